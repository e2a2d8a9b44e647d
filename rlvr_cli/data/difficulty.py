"""The difficulty profile `rlvr audit rewards --profile` writes (one JSON line per task: its `id`
and `profile` label), as `rlvr data split` and `rlvr data check` read it.

`data split --profile` stratifies: each label's groups are spread over the splits in the asked
fractions, so holdout is as hard as train; `--drop` leaves out the labels that teach nothing
under group-normalised advantages (a group that all fails or all passes has zero advantage).
`data check --profile` says how many training tasks carry no signal (RLV416) and whether an
evaluation split's difficulty mix differs from train's beyond what chance explains (RLV417)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.errors import UsageProblem
from rlvr_cli.files import sha256_file

LABELS = ("unsolved", "hard", "medium", "easy", "solved_by_all")
UNPROFILED = "unprofiled"
NO_SIGNAL = ("unsolved", "solved_by_all")
#: RLV417 fires when the mixes differ by this much (total variation) and chance explains it less than SKEW_P
SKEW_DISTANCE = 0.1
SKEW_P = 0.01
PERMUTATIONS = 2000
#: RLV416 fires when at least this share of the profiled training tasks carries no signal
NO_SIGNAL_SHARE = 0.1


@dataclass
class Profile:
    path: Path
    sha256: str
    labels: dict[str, str] = field(default_factory=dict)  # task id → label

    @classmethod
    def read(cls, path: Path) -> Profile:
        """The profile file, every line checked (a bad line is a usage error at path:line)."""
        if not path.is_file():
            raise UsageProblem(f"--profile {path}: no such file (`rlvr audit rewards --profile FILE` writes one)")
        profile = cls(path, sha256_file(path))
        with path.open(encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    raise UsageProblem(f"{path}:{number}: not JSON") from None
                label = row.get("profile") if isinstance(row, dict) else None
                task = row.get("id") if isinstance(row, dict) else None
                if not isinstance(task, (str, int)) or isinstance(task, bool) or label not in LABELS:
                    raise UsageProblem(
                        f"{path}:{number}: a profile line is {{id, profile: one of {', '.join(LABELS)}}}"
                    )
                if str(task) in profile.labels:
                    raise UsageProblem(f"{path}:{number}: task {task!r} is profiled twice")
                profile.labels[str(task)] = label
        if not profile.labels:
            raise UsageProblem(f"--profile {path}: no task is profiled in it")
        return profile

    def label(self, task: Any) -> str:
        return self.labels.get(str(task), UNPROFILED)

    def summary(self, ids_by_split: dict[str, list[str]]) -> dict[str, Any]:
        """What a report and a manifest record: the file, each split's label counts, the ids
        the profile holds that no split does (a stale profile)."""
        known = {i for ids in ids_by_split.values() for i in ids}
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            "mix": {name: _counts([self.label(i) for i in ids]) for name, ids in ids_by_split.items()},
            "profiled_tasks_in_no_split": sum(1 for i in self.labels if i not in known),
        }


def parse_drop(text: str | None) -> tuple[str, ...]:
    """`--drop unsolved,solved_by_all` → the labels, each checked."""
    if not text:
        return ()
    labels = tuple(part.strip() for part in text.split(",") if part.strip())
    wrong = [label for label in labels if label not in LABELS]
    if wrong:
        raise UsageProblem(f"--drop {text!r}: {', '.join(wrong)} is not a profile label ({', '.join(LABELS)})")
    return labels


def _counts(labels: list[str]) -> dict[str, int]:
    found = Counter(labels)
    return {label: found[label] for label in (*LABELS, UNPROFILED) if found[label]}


def distance(a: list[str], b: list[str]) -> float:
    """Total variation distance between two label mixes."""
    ca, cb = Counter(a), Counter(b)
    return 0.5 * sum(abs(ca[k] / len(a) - cb[k] / len(b)) for k in set(ca) | set(cb))


def skew(a: list[str], b: list[str], seed: int = 0) -> tuple[float, float]:
    """(distance, p): the mixes' distance and the share of seeded random re-splits of the same
    tasks into the same sizes whose distance is at least as large (a permutation test)."""
    import numpy as np

    observed = distance(a, b)
    kinds = sorted(set(a) | set(b))
    pooled = np.array([kinds.index(x) for x in a + b])
    total = np.bincount(pooled, minlength=len(kinds))
    rng, beyond = np.random.default_rng(seed), 0
    for _ in range(PERMUTATIONS):
        first = np.bincount(rng.permutation(pooled)[: len(a)], minlength=len(kinds))
        tv = 0.5 * np.abs(first / len(a) - (total - first) / len(b)).sum()
        beyond += bool(tv >= observed - 1e-12)
    return observed, (beyond + 1) / (PERMUTATIONS + 1)


def findings(profile: Profile, ids_by_split: dict[str, list[str]]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(code, split, message, task ids) for RLV416 and RLV417 (both warnings)."""
    out = []
    train = [profile.label(i) for i in ids_by_split.get("train", []) if profile.label(i) != UNPROFILED]
    if train:
        idle = [i for i in ids_by_split["train"] if profile.label(i) in NO_SIGNAL]
        if len(idle) >= NO_SIGNAL_SHARE * len(train):
            counts = Counter(profile.label(i) for i in idle)
            message = (
                f"{len(idle)} of {len(train)} profiled training tasks ({len(idle) / len(train):.0%}) carry no "
                f"learning signal: {counts['unsolved']} solved by no profiled model, {counts['solved_by_all']} by "
                "every one (a group that all fails or all passes has zero advantage); `rlvr data split --profile "
                "FILE --drop unsolved,solved_by_all` leaves them out"
            )
            out.append(("RLV416", "train", message, tuple(idle)))
    for name in ("holdout", "sealed_eval"):
        other = [profile.label(i) for i in ids_by_split.get(name, []) if profile.label(i) != UNPROFILED]
        if not train or not other:
            continue
        tv, p = skew(train, other)
        if tv >= SKEW_DISTANCE and p < SKEW_P:
            shares = ", ".join(
                f"{label} {Counter(train)[label] / len(train):.0%} vs {Counter(other)[label] / len(other):.0%}"
                for label in LABELS
                if label in train or label in other
            )
            message = (
                f"{name}'s difficulty mix differs from train's (total variation {tv:.2f}, permutation p = {p:.4f}): "
                f"{shares}; its score measures the mix as much as the policy (`rlvr data split --profile FILE` "
                "stratifies)"
            )
            out.append(("RLV417", name, message, ()))
    return out
