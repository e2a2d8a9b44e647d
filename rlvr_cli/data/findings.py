"""What `rlvr data check` found: findings at their file and line, the report written as
`data-check.json`, and its text, json and github forms."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rlvr_cli.contract.formatters import gh_escape
from rlvr_cli.contract.waivers import Scope

SPLITS = ("train", "holdout", "sealed_eval")
LISTED_PER_CODE = 200  # findings the text and github forms list per code (--max-per-code); JSON has every one


@dataclass(frozen=True)
class Place:
    split: str
    line: int


@dataclass
class DataFinding:
    code: str
    severity: str  # error | warning | waived
    message: str
    at: Place | None = None  # where the finding is; None: the split as a whole
    other: Place | None = None  # the other place of a pair (a duplicate, a leak's source)
    similarity: float | None = None  # near duplicates: the estimated Jaccard similarity
    split: str | None = None  # the split a place-less finding is about
    waiver: str | None = None
    tasks: tuple[str, ...] = ()  # the ids of the tasks at its places (a waiver's `tasks` scope)


@dataclass
class DataReport:
    """Every finding of one data check, with the files and settings it was made against."""

    contract: str
    files: dict[str, dict[str, Any]]  # split → {path, sha256, rows}
    settings: dict[str, Any]
    waivers: list[Scope] = field(default_factory=list)  # the contract's waivers that have not expired
    findings: list[DataFinding] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    severities: Counter[str] = field(default_factory=Counter)
    listed_per_code: int = LISTED_PER_CODE  # the text and github forms; 0: every one
    profile: dict[str, Any] | None = None  # with --profile: the file and each split's difficulty mix

    def add(self, finding: DataFinding) -> None:
        """Keep and count a finding (the waivers are applied by `settle`, once its tasks are known)."""
        self.counts[finding.code] += 1
        self.severities[finding.severity] += 1
        self.findings.append(finding)

    def settle(self) -> None:
        """Apply the waivers: a waived finding stays listed, as waived, with the reason."""
        for f in self.findings:
            if f.severity == "waived":
                continue
            scope = next((w for w in self.waivers if w.covers(f.code, self.said(f), f.tasks)), None)
            if scope is not None:
                self.severities[f.severity] -= 1
                self.severities["waived"] += 1
                f.severity, f.waiver = "waived", scope.reason

    def listed(self) -> tuple[list[DataFinding], dict[str, int]]:
        """The findings the text and github forms show (`listed_per_code` of each code), and how
        many of each code they leave out."""
        if not self.listed_per_code:
            return self.findings, {}
        shown, seen = [], Counter[str]()
        for f in self.findings:
            seen[f.code] += 1
            if seen[f.code] <= self.listed_per_code:
                shown.append(f)
        return shown, {code: n - self.listed_per_code for code, n in seen.items() if n > self.listed_per_code}

    @property
    def errors(self) -> int:
        return self.severities["error"]

    def path(self, place: Place) -> str:
        return str(self.files[place.split]["path"])

    def said(self, f: DataFinding) -> str:
        """A finding's place and message: what a waiver's `match` searches."""
        return f"{self.where(f.at, f.split)}: {f.message}"

    def where(self, place: Place | None, split: str | None = None) -> str:
        if place is None:
            return str(self.files[split]["path"]) if split in self.files else "data"
        return f"{self.path(place)}:{place.line}"

    def as_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "contract": self.contract,
            "files": self.files,
            "settings": self.settings,
            "errors": self.severities["error"],
            "warnings": self.severities["warning"],
            "waived": self.severities["waived"],
            "counts": dict(sorted(self.counts.items())),
            "findings": [self._finding_json(f) for f in self.findings],
            **({"profile": self.profile} if self.profile is not None else {}),
        }

    def _finding_json(self, f: DataFinding) -> dict[str, Any]:
        out: dict[str, Any] = {"code": f.code, "severity": f.severity, "message": f.message}
        for key, place in (("at", f.at), ("other", f.other)):
            if place is not None:
                out[key] = {"split": place.split, "path": self.path(place), "line": place.line}
        if f.at is None and f.split:
            out["at"] = {"split": f.split, "path": self.files.get(f.split, {}).get("path")}
        if f.similarity is not None:
            out["similarity"] = round(f.similarity, 4)
        if f.tasks:
            out["tasks"] = list(f.tasks)
        if f.waiver:
            out["waiver"] = f.waiver
        return out

    def text(self) -> str:
        lines = []
        shown, left_out = self.listed()
        for f in shown:
            where = self.where(f.at, f.split)
            where += ":1" if f.at is not None else ""
            tail = f" (waived: {f.waiver})" if f.waiver else ""
            lines.append(f"{where}: {f.severity}[{f.code}] {f.message}{tail}")
        lines += [self._left_out(code, n) for code, n in sorted(left_out.items())]
        if self.profile is not None:
            lines.append(f"difficulty profile {self.profile['path']}:")
            for split, mix in self.profile["mix"].items():
                shown_mix = ", ".join(f"{label} {n}" for label, n in mix.items()) or "no task"
                lines.append(f"  {split}: {shown_mix}")
            stale = self.profile["profiled_tasks_in_no_split"]
            if stale:
                lines.append(f"  {stale} profiled task(s) are in no split (a profile of other data?)")
        return "\n".join(lines)

    def _left_out(self, code: str, n: int) -> str:
        return (
            f"... and {n:,} more {code} finding(s), not listed (--max-per-code {self.listed_per_code}); "
            "--format json and --out list every one"
        )

    def github(self) -> str:
        kinds = {"error": "error", "warning": "warning", "waived": "notice"}
        lines = []
        shown, left_out = self.listed()
        for f in shown:
            props = f"file={gh_escape(self.where(None, f.split) if f.at is None else self.path(f.at), True)}"
            if f.at is not None:
                props += f",line={f.at.line}"
            lines.append(f"::{kinds[f.severity]} {props},title={f.code}::{gh_escape(f.message)}")
        lines += [
            f"::notice title={code}::{gh_escape(self._left_out(code, n))}" for code, n in sorted(left_out.items())
        ]
        return "\n".join(lines)

    def summary(self) -> str:
        rows = sum(int(f["rows"]) for f in self.files.values())
        parts = [f"{n} {k}{'s' if n != 1 and k != 'waived' else ''}" for k, n in self.severities.items() if n]
        return f"{rows:,} task rows in {len(self.files)} splits checked: " + (", ".join(parts) or "clean")

    def dumps(self) -> str:
        return json.dumps(self.as_json(), indent=2, ensure_ascii=False) + "\n"
