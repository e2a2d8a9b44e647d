"""`rlvr data check`: every claim the contract's `data` section makes, checked against the
split files in one streaming pass each.

Checked (rule codes in docs/rules.md): rows are tasks (RLV901: JSON, UTF-8, size, schema);
ids unique within and across splits (RLV405) and of one type (RLV409); no prompt twice
after the declared normalisation, across splits (RLV408) or within one (RLV410); with
`dedup.method: minhash` no near-duplicate prompts across splits (RLV411); with
`dedup.semantic_clusters: true` no cluster of one template's prompts across splits (RLV415); no answer of one
split verbatim in another split's prompt or hint (RLV412); no secret (RLV413) or personal
datum (RLV414); the holdout design holds (RLV407); sealed_eval carries no hint (RLV401).

Memory stays bounded by the evaluation splits: train rows are checked as they stream past
and only an 8-byte digest and the id of each are kept.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.tasks import MAX_ROW_BYTES, parse_task, split_file_problem, task_lines
from rlvr_cli.contract.waivers import Scope
from rlvr_cli.data.difficulty import Profile
from rlvr_cli.data.findings import SPLITS, DataFinding, DataReport, Place
from rlvr_cli.data.groups import Groups
from rlvr_cli.data.holdout import HoldoutTally
from rlvr_cli.data.leak import AnswerIndex, answers
from rlvr_cli.data.normal import NUMBERS, normalizer, prompt_text, strings
from rlvr_cli.data.scan import Scanner
from rlvr_cli.files import sha256_file

ORDER = ("holdout", "sealed_eval", "train")  # evaluation splits first: they are indexed, train is queried
BATCH = 1024
DEFAULT_LEAKAGE = {"answer_fields": ["answer"], "min_chars": 8}


def settings_of(c: Contract) -> dict[str, Any]:
    """The settings the check runs with, defaults resolved (written into the report)."""
    d = c.data
    near = None
    if d.dedup.method == "minhash":
        near = {
            "threshold": d.dedup.threshold if d.dedup.threshold is not None else 0.8,
            "shingle": d.dedup.shingle or 5,
            "permutations": d.dedup.permutations or 128,
        }
    clusters = None
    if d.dedup.semantic_clusters:  # a claim the check verifies: one template's problems in one split
        clusters = dict(near or {"threshold": 0.8, "shingle": 5, "permutations": 128})
    leakage = d.leakage.model_dump() if d.leakage is not None else dict(DEFAULT_LEAKAGE)
    return {
        "normalize": list(d.dedup.normalize),
        "near_duplicates": near,
        "semantic_clusters": clusters,
        "leakage": leakage,
        "pii_patterns": dict(d.pii_patterns or {}),
        "hint_field": d.hints.field if d.hints is not None and d.hints.used else None,
    }


def check(
    c: Contract, folder: Path, contract_path: str, waivers: list[Scope] | None = None, profile: Profile | None = None
) -> DataReport:
    """Check every split the contract names; a missing file is a finding, not an exception.
    With a difficulty `profile`, also how much of train carries no signal and whether an
    evaluation split is harder or easier than train (RLV416, RLV417)."""
    files = {}
    for name in SPLITS:
        path = folder / getattr(c.data.splits, name).path
        files[name] = {
            "path": getattr(c.data.splits, name).path,
            "sha256": sha256_file(path) if path.is_file() else None,
            "rows": 0,
        }
    report = DataReport(contract_path, files, settings_of(c), waivers=list(waivers or []))
    with Scanner(c.data.pii_patterns) as scanner:
        _Check(c, folder, report, scanner, profile).run()
    return report


def _loc(split: str, line: int) -> int:
    return SPLITS.index(split) << 40 | line


def _place(loc: int) -> Place:
    return Place(SPLITS[loc >> 40], loc & ((1 << 40) - 1))


def _pair(a: int, b: int) -> tuple[Place, Place]:
    """The later of two places first: the finding sits where the copy is."""
    return (_place(max(a, b)), _place(min(a, b)))


class _Check:
    def __init__(
        self, c: Contract, folder: Path, report: DataReport, scanner: Scanner, profile: Profile | None = None
    ) -> None:
        self.c, self.folder, self.report, self.scanner, self.profile = c, folder, report, scanner, profile
        s = report.settings
        self.normalize = normalizer(s["normalize"])
        self.hint_field = s["hint_field"]
        self.answer_fields = s["leakage"]["answer_fields"]
        self.answers = AnswerIndex(s["leakage"]["min_chars"])
        self.eval_texts: list[tuple[str, int]] = []  # (normalised prompt and hint, loc): leak-checked at the end
        self.ids: dict[str, int] = {}
        self.id_types: dict[str, int] = {}  # type name → first loc
        self.digests: dict[bytes, int] = {}
        self.holdout = HoldoutTally(c.data.holdout_design)
        self.near = _Near(s["near_duplicates"], self) if s["near_duplicates"] else None
        self.clusters = _Near(s["semantic_clusters"], self, clusters=True) if s["semantic_clusters"] else None

    def run(self) -> None:
        for name in ORDER:
            self._split(name)
        for text, loc in self.eval_texts:
            self._leaks(text, loc)
        self._id_types()
        if self.clusters is not None:
            self.clusters.report_clusters()
        for code, where, message in self.holdout.problems():
            self.report.add(DataFinding(code, "error", message, split=where))
        if self.profile is not None:
            self._difficulty(self.profile)
        self._task_ids()
        self.report.settle()

    def _difficulty(self, profile: Profile) -> None:
        from rlvr_cli.data.difficulty import findings

        ids_by_split: dict[str, list[str]] = {name: [] for name in SPLITS}
        for task, loc in self.ids.items():
            ids_by_split[SPLITS[loc >> 40]].append(task)
        self.report.profile = profile.summary(ids_by_split)
        for code, split, message, tasks in findings(profile, ids_by_split):
            self.report.add(DataFinding(code, "warning", message, split=split, tasks=tasks))

    def _task_ids(self) -> None:
        """Each finding's task ids, from the ids kept of every row (one pass over them)."""
        places = [(f, [p for p in (f.at, f.other) if p is not None]) for f in self.report.findings]
        wanted = {_loc(p.split, p.line) for _, found in places for p in found}
        by_loc = {loc: task for task, loc in self.ids.items() if loc in wanted}
        for f, found in places:
            if not found:  # a place-less finding keeps the ids it was given
                continue
            f.tasks = tuple(by_loc[loc] for loc in (_loc(p.split, p.line) for p in found) if loc in by_loc)

    def _split(self, name: str) -> None:
        path = self.folder / self.report.files[name]["path"]
        problem = split_file_problem(path)
        if problem:
            self.report.add(DataFinding("RLV901", "error", problem, split=name))
            return
        target = path.resolve()
        if path.is_symlink() and not target.is_relative_to(self.folder.resolve()):  # read, but never silently
            message = f"{path.name} is a link to {target}, outside the contract's folder; copy the data beside it"
            self.report.add(DataFinding("RLV406", "warning", message, split=name))
        rows = 0
        for line, raw in task_lines(path):
            row = self._row(name, line, raw)
            if row is not None:
                rows += 1
                self._task(name, line, row)
        for near in (self.near, self.clusters):
            if near is not None:
                near.flush()  # a batch holds one split's prompts
        self.report.files[name]["rows"] = rows
        if rows == 0:
            self.report.add(DataFinding("RLV901", "error", f"{path.name} holds no task", split=name))

    def _row(self, name: str, line: int, raw: bytes | None) -> dict[str, Any] | None:
        """The task on one line, or None (reported) when the line is not one."""
        if raw is None:
            row, problem = None, f"a line over {MAX_ROW_BYTES:,} bytes (refused before reading it)"
        else:
            row, problem = parse_task(raw)
        problem = problem or self._answer_problem(row)
        if problem:
            self.report.add(DataFinding("RLV901", "error", problem, at=Place(name, line)))
            return None
        return row  # type: ignore[no-any-return]

    def _answer_problem(self, row: dict[str, Any]) -> str | None:
        """An answer field, where a row has one, holds text or a number (or a list of them)."""
        for name in self.answer_fields:
            if name not in row:
                continue
            value = row[name]
            items = value if isinstance(value, list) and value else [value]
            if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in items):
                return f"the answer field {name!r} is {_kind(value)}: an answer is text or a number (or a list of them)"
            if any(isinstance(v, str) and not v.strip() for v in items):
                return f"the answer field {name!r} is empty"
        return None

    def _task(self, name: str, line: int, row: dict[str, Any]) -> None:
        loc = _loc(name, line)
        self._id(row["id"], loc)
        flagged = self.scanner.row(list(strings(row)))  # what a report must never quote
        text = self.normalize(prompt_text(row["prompt"]))
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        first = self.digests.setdefault(digest, loc)
        if first != loc:
            self._duplicate(first, loc, text if not flagged else None)
        hint = row.get(self.hint_field) if self.hint_field else None
        if hint is not None and name == "sealed_eval":
            self.report.add(
                DataFinding("RLV401", "error", f"carries the hint field '{self.hint_field}'", at=Place(name, line))
            )
        full = text if not isinstance(hint, str) else text + "\n" + self.normalize(hint)
        given = frozenset(NUMBERS.findall(text))  # the question's numbers: a leak shows them beside the answer
        for answer in answers(row, self.answer_fields):
            self.answers.add(self.normalize(answer), Place(name, line), given)
        if name == "train":
            self._leaks(full, loc)
        else:
            self.eval_texts.append((full, loc))
        for near in (self.near, self.clusters):
            if near is not None:
                near.add(text, digest, loc)
        self.holdout.add(name, row)
        for kind, what, shown in flagged:
            code = "RLV413" if kind == "secret" else "RLV414"
            label = "a secret" if kind == "secret" else "personal data"
            self.report.add(DataFinding(code, "error", f"{label}: {what} ({shown})", at=Place(name, line)))

    def _id(self, value: Any, loc: int) -> None:
        self.id_types.setdefault(type(value).__name__, loc)
        first = self.ids.setdefault(str(value), loc)
        if first != loc:
            at, other = _pair(first, loc)
            message = f"task id {str(value)!r} is already used at {self.report.where(other)}"
            self.report.add(DataFinding("RLV405", "error", message, at=at, other=other))

    def _duplicate(self, first: int, loc: int, text: str | None) -> None:
        """`text` is quoted (its start) unless None: a prompt holding a secret or personal data."""
        at, other = _pair(first, loc)
        within = at.split == other.split
        code = "RLV410" if within else "RLV408"
        how = "within the split" if within else "across splits"
        shown = repr(text[:60]) if text is not None else "[not quoted: it holds a secret or personal data]"
        message = f"the prompt of {self.report.where(other)} again ({how}): {shown}"
        self.report.add(DataFinding(code, "error", message, at=at, other=other))

    def _leaks(self, text: str, loc: int) -> None:
        here = _place(loc)
        for answer, source in self.answers.find(text, here.split):
            shown = repr(answer[:40]) if not self.scanner.row([answer]) else "not quoted: a secret or personal datum"
            message = f"the answer of {self.report.where(source)} ({shown}) is in this prompt or hint"
            self.report.add(DataFinding("RLV412", "error", message, at=here, other=source))

    def _id_types(self) -> None:
        if len(self.id_types) > 1:
            where = ", ".join(f"{t} at {self.report.where(_place(loc))}" for t, loc in self.id_types.items())
            self.report.add(DataFinding("RLV409", "error", f"task ids of more than one type: {where}"))


class _Near:
    """Prompts batched for signing; evaluation splits indexed, every prompt queried. Near
    duplicates (RLV411) are reported pair by pair; semantic clusters (`clusters`: prompts compared
    with their numbers masked) are joined, and each cluster that spans splits is one RLV415."""

    def __init__(self, settings: dict[str, Any], check: _Check, clusters: bool = False) -> None:
        from rlvr_cli.data.near import Index, Signer

        self.signer = Signer(settings["permutations"], settings["shingle"])
        self.index = Index(settings["threshold"], settings["permutations"])
        self.check, self.clusters = check, clusters
        self.pending: list[tuple[str, bytes, int]] = []
        self.texts: dict[int, str] = {}  # loc → the text of every indexed (evaluation) prompt, to confirm pairs
        self.groups = Groups()  # clusters: the places of joined prompts
        self.skeletons: dict[bytes, int] = {}  # clusters: a skeleton's digest → the first place it was seen

    def add(self, text: str, digest: bytes, loc: int) -> None:
        if self.clusters:  # one skeleton is one cluster: only a new skeleton is signed and compared
            from rlvr_cli.data.near import skeleton

            text = skeleton(text)
            digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
            first = self.skeletons.setdefault(digest, loc)
            if first != loc:
                self.groups.join(loc, first)
                return
        self.pending.append((text, digest, loc))
        if len(self.pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        """Query the pending prompts (all of one split) against the index, then index them
        when they are evaluation prompts."""
        if not self.pending:
            return
        from rlvr_cli.data.near import ESTIMATE_SLACK, confirm, numbers_salt, same_template

        index, k = self.index, self.signer.shingle
        signatures = self.signer.signatures([text for text, _, _ in self.pending])
        salts = None if self.clusters else [numbers_salt(text) for text, _, _ in self.pending]  # same numbers only
        found_all = index.matches(signatures, floor=max(index.threshold - ESTIMATE_SLACK, 0.0), salts=salts)
        for (text, digest, loc), found in zip(self.pending, found_all, strict=True):
            for (other_digest, other), _ in found:  # type: ignore[misc]
                if other >> 40 == loc >> 40:
                    continue
                if self.clusters:  # a candidate already in this prompt's cluster needs no comparing
                    joined = self.groups.find(loc) == self.groups.find(other)
                    if not joined and same_template(text, self.texts[other], index.threshold, k) is not None:
                        self.groups.join(loc, other)
                    continue
                if other_digest == digest:  # exact copies are RLV408 already
                    continue
                similarity = confirm(text, self.texts[other], index.threshold, k)  # the estimate never decides
                if similarity is not None:
                    self._report(loc, other, similarity)
        if SPLITS[self.pending[0][2] >> 40] != "train":
            index.add([(digest, loc) for _, digest, loc in self.pending], signatures, salts)
            self.texts.update((loc, text) for text, _, loc in self.pending)
        self.pending.clear()

    def _report(self, loc: int, other_loc: int, similarity: float) -> None:
        report = self.check.report
        at, other = _pair(other_loc, loc)
        message = (
            f"a near duplicate of {report.where(other)} (Jaccard similarity {similarity:.2f}, the same numbers in "
            "the same roles)"
        )
        report.add(DataFinding("RLV411", "error", message, at=at, other=other, similarity=similarity))

    def report_clusters(self) -> None:
        """One warning per cluster that spans splits, at its first member outside the first split."""
        members: dict[int, list[int]] = {}
        for loc in self.groups.parent:
            members.setdefault(self.groups.find(loc), []).append(loc)
        report, threshold = self.check.report, self.index.threshold
        for locs in sorted(sorted(m) for m in members.values()):
            counts = {name: sum(SPLITS[loc >> 40] == name for loc in locs) for name in SPLITS}
            if sum(n > 0 for n in counts.values()) < 2:
                continue  # within one split, as the contract says
            spans = ", ".join(f"{name} ({n})" for name, n in counts.items() if n)
            other = _place(locs[0])
            at = _place(next(loc for loc in locs if loc >> 40 != locs[0] >> 40))
            message = (
                f"one semantic cluster of {len(locs)} prompts (with their numbers masked, Jaccard similarity ≥ "
                f"{threshold:.2f}) spans {spans}, e.g. this prompt and {report.where(other)}; the contract says "
                "`dedup.semantic_clusters: true`"
            )
            report.add(DataFinding("RLV415", "warning", message, at=at, other=other))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "an empty list" if not value else "a list holding something else"
    return {bool: "true or false", dict: "an object"}.get(type(value), type(value).__name__)
