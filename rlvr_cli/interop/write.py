"""Writing what an import or export made: a contract whose imported keys each carry the
comment naming the peer's option (the rest of the contract kept as the user wrote it), and the
peer's config files."""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from rlvr_cli.interop.common import Mapping, nested

#: the contract's sections an import writes (the others are the base contract's, untouched)
SECTIONS = ("objective", "hyperparameters", "length")
#: the objective's parts every import states whole: the base contract's never survive beside the peer's
REPLACED = ("clip", "kl", "correction", "rejection", "off_policy_mask", "entropy_mask")
ORDER = {
    "objective": (
        "reward",
        "advantage",
        "clip",
        "kl",
        "entropy_coef",
        "aggregation",
        "ratio",
        "correction",
        "rejection",
        "off_policy_mask",
        "entropy_mask",
    ),
    "hyperparameters": (
        "group_size",
        "prompts_per_step",
        "micro_batch_sequences",
        "updates_per_batch",
        "mini_batches",
        "max_policy_lag",
        "sampling",
        "optimizer",
        "schedule",
        "max_steps",
        "seed",
        "precision",
    ),
}


def scalar(value: Any) -> str:
    """One value in YAML flow form (lists and mappings on one line)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=True, sort_keys=False).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def merged(base: dict[str, Any], mapping: Mapping) -> dict[str, Any]:
    """The base contract's sections with the imported values over them."""
    values = dict(mapping.values)
    weights = values.pop("objective.reward.weights", None)
    out = {name: copy.deepcopy(base.get(name) or {}) for name in SECTIONS}
    for part in REPLACED:  # the peer's config states each whole (a mask it lacks: none), never merged with the base's
        out["objective"].pop(part, None)
    if values.get("hyperparameters.sampling.engine") not in ("vllm", "sglang"):
        out["hyperparameters"].get("sampling", {}).pop("server", None)
    if "hyperparameters.adapter" in values and values["hyperparameters.adapter"] is None:
        values.pop("hyperparameters.adapter")  # the peer trains every weight: no adapter from the base either
        out["hyperparameters"].pop("adapter", None)
    if values.get("objective.advantage.scale") == "none":
        out["objective"].get("advantage", {}).pop("std", None)
        out["objective"].get("advantage", {}).pop("epsilon", None)
    for path, value in values.items():
        node = out
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    hp = out["hyperparameters"]
    total = hp.get("prompts_per_step", 1) * hp.get("group_size", 1) // max(hp.get("mini_batches", 1), 1)
    micro = hp.get("micro_batch_sequences")
    if micro and total % micro:
        hp.pop("micro_batch_sequences")  # the base's micro-batch does not divide the peer's mini-batch: one pass
    if weights is not None:
        for part, weight in zip(out["objective"]["reward"]["components"], weights, strict=True):
            part["weight"] = weight
    return out


def block(name: str, tree: dict[str, Any], comments: dict[str, str]) -> list[str]:
    """A section as block YAML, each leaf that came from the peer with its comment."""
    lines = [f"{name}:"]

    def walk(node: dict[str, Any], path: str, depth: int) -> None:
        order = ORDER.get(path, ())
        keys = sorted(node, key=lambda k: order.index(k) if k in order else len(order))
        for key in keys:
            value, here = node[key], f"{path}.{key}"
            pad = "  " * depth
            if isinstance(value, dict) and value and not _leafy(here, comments):
                lines.append(f"{pad}{key}:")
                walk(value, here, depth + 1)
                continue
            text = f"{pad}{key}: {scalar(value)}"
            note = comments.get(here)
            lines.append(f"{text}  # {note}" if note else text)

    walk(tree, name, 1)
    return lines


def _leafy(path: str, comments: dict[str, str]) -> bool:
    """A mapping none of whose keys came from the peer is written on one line."""
    return not any(key.startswith(path + ".") for key in comments)


def contract_text(base_text: str, base: dict[str, Any], mapping: Mapping, header: list[str]) -> str:
    """The base contract's text with the imported sections replaced (the rest untouched)."""
    sections = merged(base, mapping)
    comments = dict(mapping.comments)
    if "objective.reward.weights" in comments:
        comments["objective.reward.components"] = comments.pop("objective.reward.weights")
    lines = base_text.splitlines()
    for name in SECTIONS:
        new = block(name, sections[name], comments) if sections[name] else []
        lines = _replace(lines, name, new)
    top = "\n".join(f"# {h}" if h else "#" for h in header)
    if lines and lines[0].startswith("# yaml-language-server"):  # the editor's schema line stays first
        return "\n".join([lines[0], top, *lines[1:]]).rstrip() + "\n"
    return top + "\n" + "\n".join(lines).rstrip() + "\n"


def _replace(lines: list[str], name: str, new: list[str]) -> list[str]:
    start = next((i for i, line in enumerate(lines) if re.match(rf"{name}\s*:", line)), None)
    if start is None:
        return [*lines, "", *new]
    end = start + 1
    while end < len(lines) and not re.match(r"[A-Za-z_]", lines[end]):
        end += 1
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1  # blank lines and comments before the next key belong to it
    return [*lines[:start], *new, *lines[end:]]


def peer_yaml(mapping: Mapping, header: list[str], nest: bool) -> str:
    """The peer's config: keys (nested for verl, flat for trl's GRPOConfig) with their sources."""
    lines = [f"# {h}" if h else "#" for h in header]
    if not nest:
        for key, value in mapping.values.items():
            lines.append(f"{key}: {scalar(value)}  # {mapping.comments.get(key, '')}".rstrip(" #"))
        return "\n".join(lines) + "\n"
    tree = nested(mapping.values)
    for name, section in tree.items():
        lines.extend(block(name, section, mapping.comments) if isinstance(section, dict) else [f"{name}: {section}"])
    return "\n".join(lines) + "\n"
