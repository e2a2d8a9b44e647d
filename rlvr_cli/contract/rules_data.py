"""The contract's rules about its data (RLV4xx) and what counts as an answer (RLV5xx); they
register into the same registry as the rest (`rules.RULES`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from rlvr_cli.contract.diagnostics import Finding, error, warning
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.rules import rule, same_path

# ── RLV4xx: data ──────────────────────────────────────────────────────────────────────


@rule
def rlv401_hints_need_sealed_eval(c: Contract, _: Path) -> Iterator[Finding]:
    hints = c.data.hints
    if hints is None or not hints.used:
        return
    if hints.leak_check is not True:
        yield error(
            "RLV401",
            ("data", "hints"),
            "hints.used is true without 'leak_check: true'; assisted rollouts need a "
            "leak check against the hint-free sealed_eval",
        )
    if hints.source and same_path(hints.source, c.data.splits.sealed_eval.path):
        yield error(
            "RLV401",
            ("data", "hints", "source"),
            "hints come from the sealed_eval split, so sealed_eval is not hint-free",
        )


@rule
def rlv402_dedup_before_split(c: Contract, _: Path) -> Iterator[Finding]:
    if c.data.dedup.stage != "before_split":
        yield error(
            "RLV402",
            ("data", "dedup", "stage"),
            f"dedup.stage is {c.data.dedup.stage}; deduplicate before splitting or near-copies leak across splits",
        )


@rule
def rlv403_distinct_splits(c: Contract, _: Path) -> Iterator[Finding]:
    names = ("train", "holdout", "sealed_eval")
    seen: dict[str, str] = {}
    for name in names:
        path = os.path.normpath(getattr(c.data.splits, name).path)
        if path in seen:
            yield error(
                "RLV403", ("data", "splits", name, "path"), f"splits.{name} is the same file as splits.{seen[path]}"
            )
        else:
            seen[path] = name


@rule
def rlv406_data_outside_folder(c: Contract, _: Path) -> Iterator[Finding]:
    """Data is part of the experiment: a path that leaves the contract's folder is not pinned by it."""
    d = c.data
    paths = [(("data", "sources", i, "path"), s.path) for i, s in enumerate(d.sources)]
    paths += [(("data", "splits", n, "path"), getattr(d.splits, n).path) for n in ("train", "holdout", "sealed_eval")]
    for where, path in paths:
        if os.path.isabs(path) or os.path.normpath(path).split(os.sep)[0] == "..":
            yield warning(
                "RLV406", where, f"{path} is outside the contract's folder; copy the data beside the contract"
            )


@rule
def rlv404_source_provenance(c: Contract, _: Path) -> Iterator[Finding]:
    for i, source in enumerate(c.data.sources):
        missing = [k for k in ("license", "consent") if getattr(source, k) is None]
        if missing:
            yield warning("RLV404", ("data", "sources", i), f"source '{source.name}' lacks {' and '.join(missing)}")


@rule
def data_keys_that_would_change_nothing(c: Contract, _: Path) -> Iterator[Finding]:
    """A key that changes nothing is refused: near-duplicate settings without minhash, a hint
    format without prompt placement, a pattern that is not a regular expression."""
    dedup = c.data.dedup
    if dedup.method != "minhash":
        for key in ("threshold", "shingle", "permutations"):
            if getattr(dedup, key) is not None:
                yield error(
                    "RLV003", ("data", "dedup", key), f"{key} applies to method minhash; method is {dedup.method}"
                )
    hints = c.data.hints
    if hints is not None and hints.format is not None:
        if hints.placement != "prompt":
            yield error("RLV003", ("data", "hints", "format"), "format applies to placement prompt")
        elif "{prompt}" not in hints.format or "{hint}" not in hints.format:
            yield error("RLV003", ("data", "hints", "format"), "format must contain {prompt} and {hint}")
    for name, pattern in (c.data.pii_patterns or {}).items():
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            yield error("RLV003", ("data", "pii_patterns", name), f"not a regular expression: {exc}")
            continue
        if compiled.match(""):
            yield error("RLV003", ("data", "pii_patterns", name), "the pattern matches the empty string")


# ── RLV5xx: length ────────────────────────────────────────────────────────────────────


@rule
def rlv501_penalty_value(c: Contract, _: Path) -> Iterator[Finding]:
    if c.length.on_truncated == "penalize" and c.length.truncation_penalty is None:
        yield error("RLV501", ("length", "on_truncated"), "on_truncated is penalize but truncation_penalty is missing")


@rule
def rlv502_dynamic_sampling_logs(c: Contract, _: Path) -> Iterator[Finding]:
    ds = c.length.dynamic_sampling
    if ds is not None and ds.drop_uniform_groups and not ds.log_by:
        yield error(
            "RLV502",
            ("length", "dynamic_sampling"),
            "drop_uniform_groups changes the training distribution; name 'log_by' "
            "fields (e.g. [domain, difficulty]) so acceptance rates are recorded",
        )


@rule
def rlv505_uniform_on(c: Contract, _: Path) -> Iterator[Finding]:
    ds, length = c.length.dynamic_sampling, c.length
    if ds is None or "uniform_on" not in ds.model_fields_set:
        return
    if not ds.drop_uniform_groups:
        why = "drop_uniform_groups is false: no group is dropped"
    elif ds.uniform_on == "reward":
        return
    elif length.overlong_penalty is None and length.on_truncated != "penalize":
        why = "no overlong_penalty and no truncation penalty: the verifier's reward is the reward"
    else:
        return
    yield error(
        "RLV505",
        ("length", "dynamic_sampling", "uniform_on"),
        f"uniform_on: {ds.uniform_on} changes nothing here ({why})",
        suggestion="reward" if ds.drop_uniform_groups else None,
    )


@rule
def rlv506_uniform_on_unstated(c: Contract, _: Path) -> Iterator[Finding]:
    ds, length = c.length.dynamic_sampling, c.length
    shaped = length.overlong_penalty is not None or length.on_truncated == "penalize"
    if ds is not None and ds.drop_uniform_groups and shaped and "uniform_on" not in ds.model_fields_set:
        yield warning(
            "RLV506",
            ("length", "dynamic_sampling"),
            "beside length shaping, which rewards must be all equal to drop a group is a choice the peers make "
            "differently (NeMo RL: before shaping; verl: its filter_groups.metric); it is the shaped reward here: "
            "write uniform_on",
            suggestion="uniform_on: reward",
        )


@rule
def rlv504_overlong_buffer(c: Contract, _: Path) -> Iterator[Finding]:
    overlong = c.length.overlong_penalty
    if overlong is not None and overlong.buffer_tokens > c.length.max_response_tokens:
        yield error(
            "RLV504",
            ("length", "overlong_penalty", "buffer_tokens"),
            f"buffer_tokens = {overlong.buffer_tokens} is more than max_response_tokens = "
            f"{c.length.max_response_tokens}: the penalty would start before the first token",
            suggestion=str(c.length.max_response_tokens),
        )


@rule
def rlv503_packing_isolation(c: Contract, _: Path) -> Iterator[Finding]:
    packing = c.length.packing
    if packing is not None and packing.enabled and not packing.isolate_episodes:
        yield error(
            "RLV503",
            ("length", "packing", "isolate_episodes"),
            "packed episodes must not attend to each other; set isolate_episodes: true",
        )
