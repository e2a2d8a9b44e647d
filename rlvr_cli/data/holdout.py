"""The declared holdout design, tallied from the rows as they stream past (RLV407): each
held-out composition, entity group and length bucket is in holdout and absent from train;
`longer_trajectories` means holdout prompts are longer on average than train's."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

FIELDS = (("compositions", "composition"), ("entity_groups", "entity_group"), ("length_buckets", "length_bucket"))


def _values(row: dict[str, Any], field: str) -> set[str]:
    value = row.get(field)
    if isinstance(value, list):
        return {str(v) for v in value}
    return {str(value)} if value is not None else set()


class HoldoutTally:
    def __init__(self, design: Any) -> None:
        self.design = design
        self.watched = {field: set(getattr(design, key) or []) for key, field in FIELDS if design is not None}
        self.in_holdout: dict[tuple[str, str], int] = defaultdict(int)
        self.in_train: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.size = {"train": [0, 0], "holdout": [0, 0]}  # split → [rows, prompt characters]

    def add(self, split: str, row: dict[str, Any]) -> None:
        if self.design is None or split not in self.size:
            return
        for field, names in self.watched.items():
            for value in _values(row, field) & names:
                if split == "holdout":
                    self.in_holdout[field, value] += 1
                elif len(self.in_train[field, value]) < 3:
                    self.in_train[field, value].append(str(row.get("id")))
        if self.design.longer_trajectories:
            self.size[split][0] += 1
            prompt = row.get("prompt")
            self.size[split][1] += len(prompt) if isinstance(prompt, str) else len(json.dumps(prompt))

    def problems(self) -> Iterator[tuple[str, str, str]]:
        """(code, split, message) for each claim the rows do not bear out."""
        if self.design is None:
            return
        for key, field in FIELDS:
            for name in getattr(self.design, key) or []:
                if not self.in_holdout[field, name]:
                    yield "RLV407", "holdout", f"holdout_design.{key}: no holdout task has {field} '{name}'"
                train_ids = self.in_train.get((field, name))
                if train_ids:
                    yield (
                        "RLV407",
                        "train",
                        f"holdout_design.{key}: {field} '{name}' is in train too (tasks {', '.join(train_ids)})",
                    )
        if self.design.longer_trajectories:
            mean = {s: chars / max(rows, 1) for s, (rows, chars) in self.size.items()}
            if mean["holdout"] <= mean["train"]:
                yield (
                    "RLV407",
                    "holdout",
                    f"holdout_design.longer_trajectories: holdout prompts ({mean['holdout']:.0f} characters on "
                    f"average) are not longer than train's ({mean['train']:.0f})",
                )
