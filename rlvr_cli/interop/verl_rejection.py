"""verl 0.9.1's rollout rejection sampling (`algorithm.rollout_correction.rollout_rs` with
`rollout_rs_threshold`) as the contract's `objective.rejection`, and back. verl's options are
`token_k1…3`, `seq_sum_k1…3`, `seq_mean_k1…3`, `seq_max_k2…3`, comma-separated, every one
required to keep a token; thresholds one per option (or one for all): `"low_high"` ratio bounds
for k1 (a single value u: [1/u, u]), an upper bound for k2 and k3 (rollout_corr_helper.py)."""

from __future__ import annotations

from typing import Any

from rlvr_cli.interop.common import Mapping, plain
from rlvr_cli.interop.verl_config import C

OVER = {"token": "token", "seq_sum": "sequence_sum", "seq_mean": "sequence_mean", "seq_max": "sequence_max"}
PREFIX = {v: k for k, v in OVER.items()}


def rejection(get: Any, out: Mapping) -> None:
    """`get`: verl_map's Reader. Each option becomes one criterion; a malformed option or
    threshold is refused by name (verl itself raises on it)."""
    if get(f"{C}.bypass_mode"):  # there π_old is the rollout's, and the loss rejects against π_θ each pass
        out.refuse(f"{C}.rollout_rs", "with bypass_mode verl rejects inside the loss, against the current policy")
        return
    options = [o.strip() for o in str(get(f"{C}.rollout_rs")).split(",") if o.strip()]
    options = list(dict.fromkeys(options))  # verl removes duplicates
    spec = get(f"{C}.rollout_rs_threshold")
    specs = [p.strip() for p in str(spec).split(",") if p.strip()] if spec is not None else []
    if len(specs) == 1:
        specs *= len(options)
    key = f"{C}.rollout_rs_threshold"
    if len(specs) != len(options):
        out.refuse(key, f"{plain(spec)}: one threshold for all of {options}, or one each")
        return
    criteria = []
    for option, text in zip(options, specs, strict=True):
        criterion = _criterion(option, text)
        if isinstance(criterion, str):
            out.refuse(f"{C}.rollout_rs", f"{option} ({text}): {criterion}")
            return
        criteria.append(criterion)
    out.set("objective.rejection", criteria, get.source(f"{C}.rollout_rs") + f", threshold {plain(spec)}")


def _criterion(option: str, text: str) -> dict[str, Any] | str:
    """One contract criterion for a verl option and its threshold, or why there is none."""
    head, _, estimator = option.rpartition("_")
    if head not in OVER or estimator not in ("k1", "k2", "k3") or option == "seq_max_k1":
        return "not one of verl's rejection options"
    try:
        if estimator == "k1":
            low_text, _, high_text = text.partition("_")
            high = float(high_text or low_text)
            low = float(low_text) if high_text else 1.0 / high
        else:
            if "_" in text:
                return "k2 and k3 take one upper bound"
            low, high = None, float(text)
    except ValueError:
        return "not a number"
    if high <= 0 or (low is not None and not 0 < low <= high):
        return "bounds must be positive, low ≤ high"
    criterion: dict[str, Any] = {"estimator": estimator, "over": OVER[head], "high": high}
    if low is not None:
        criterion["low"] = low
    return criterion


def export(criteria: list[Any] | None, out: Mapping) -> None:
    """The contract's criteria as verl's comma-separated options and thresholds."""
    if not criteria:
        out.set(f"{C}.rollout_rs", None, "objective.rejection: none")
        return
    options = [f"{PREFIX[c.over]}_{c.estimator}" for c in criteria]
    thresholds = [f"{c.low}_{c.high}" if c.estimator == "k1" else f"{c.high}" for c in criteria]
    out.set(f"{C}.rollout_rs", ",".join(options), "objective.rejection")
    out.set(f"{C}.rollout_rs_threshold", ",".join(thresholds), "objective.rejection")
