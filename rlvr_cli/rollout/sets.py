"""`reward.unit: set`: several responses judged together (e.g. ideas rewarded for being right
and different). A group's consecutive members, `set_size` at a time, are one set: sample
`index // set_size` of its group. The verifier `module:function` is called once per set with the
task and the list of its responses, and every member carries the set's verdict and reward; the
set is one unit of its group for advantages (train/credit.py), whose other sets are its baseline.

A set is always sampled: a greedy draw would fill it with one answer repeated, so a set is drawn
with the contract's sampling (seeded) even where the caller asks for greedy decoding — holdout
evaluations and gates included. A draw of fewer members than a set (a holdout's one sample per
task) samples one whole set."""

from __future__ import annotations

import math
from typing import Any


def judged(contract: Any) -> bool:
    return contract.objective.reward.unit == "set"


def members(contract: Any, group_size: int) -> int:
    """Samples per task for a draw of `group_size`: whole sets."""
    if not judged(contract):
        return group_size
    size = contract.objective.reward.set_size
    return max(1, math.ceil(group_size / size)) * size
