"""`rlvr data split`: deduplicate first, then split by a declared key so that a group never
straddles two splits; seeded, reproducible, with a manifest of how it was done.

Exact duplicates (after the contract's normalisation) are dropped, the first copy kept. With
`dedup.method: minhash`, near duplicates are not dropped but joined into one group, so they
land in the same split; with `dedup.semantic_clusters: true` so are the prompts of one semantic
cluster (one template's problems: `rlvr_cli.data.near.skeleton`). Groups the holdout design
withholds (a held-out composition, entity group or length bucket of the `--by` field) go to
holdout; every other group is placed by a seeded hash of its key: the same data, key, fractions
and seed give byte-identical splits.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.tasks import read_split
from rlvr_cli.data.check import settings_of
from rlvr_cli.data.difficulty import Profile
from rlvr_cli.data.findings import SPLITS
from rlvr_cli.data.groups import Groups
from rlvr_cli.data.normal import normalizer, prompt_text
from rlvr_cli.errors import RlvrError
from rlvr_cli.files import atomic_write_text, sha256_file

_ALL = "\0all"  # the stratum of every row (a stratified split breaks its ties by the overall shares)
HOLDOUT_FIELDS = {"composition": "compositions", "entity_group": "entity_groups", "length_bucket": "length_buckets"}


def group_keys(row: dict[str, Any], by: str | None, line: int) -> list[str]:
    """The groups a row belongs to: its value of `by`, or each value of a list (a row of two
    compositions joins both groups, read as `rlvr data check` reads the holdout design)."""
    if by is None:
        return [f"id:{row['id']}"]
    if by not in row:
        raise RlvrError(f"line {line}: task {row['id']!r} has no field '{by}' to split by")
    value = row[by]
    values = value if isinstance(value, list) and value else [value]
    return [v if isinstance(v, str) else json.dumps(v, sort_keys=True) for v in values]


def _rank(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=8).digest(), "big")


def plan_split(
    c: Contract,
    rows: list[dict[str, Any]],
    by: str | None,
    fractions: Sequence[float],
    seed: int,
    profile: Profile | None = None,
    drop: Sequence[str] = (),
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """The three splits and what the manifest says about how they were made; with a difficulty
    `profile`, each label's groups are spread over the splits in the fractions (stratified), and
    the tasks whose label is in `drop` are left out first."""
    settings = settings_of(c)
    kept, dropped, left_out = _dedup(rows, normalizer(settings["normalize"]), profile, drop)
    groups = Groups()
    keys = []
    for line, row, _ in kept:
        names = group_keys(row, by, line)
        for other in names[1:]:
            groups.join(names[0], other)
        keys.append(groups.find(names[0]))
    merged = _join_near(settings["near_duplicates"], [text for _, _, text in kept], keys, groups)
    clustered = _join_near(settings["semantic_clusters"], [text for _, _, text in kept], keys, groups, True)
    forced = {groups.find(key) for key in _forced(c, by) if key in groups.parent}
    strata = None
    if profile is not None:
        strata = _strata([groups.find(k) for k in keys], [profile.label(row["id"]) for _, row, _ in kept])
    assignment = _assign(
        {groups.find(k) for k in keys}, [groups.find(k) for k in keys], forced, fractions, seed, strata
    )
    splits: dict[str, list[dict[str, Any]]] = {name: [] for name in SPLITS}
    hint = settings["hint_field"]
    for (_, row, _), key in zip(kept, keys, strict=True):
        name = assignment[groups.find(key)]
        if name == "sealed_eval" and hint:
            row = {k: v for k, v in row.items() if k != hint}  # sealed_eval is hint-free
        splits[name].append(row)
    manifest = {
        "by": by,
        "fractions": dict(zip(SPLITS, fractions, strict=True)),
        "seed": seed,
        "normalize": settings["normalize"],
        "near_duplicates": settings["near_duplicates"],
        "dropped_duplicates": dropped,
        "near_duplicate_joins": merged,
        "semantic_cluster_joins": clustered,
        "groups": len({groups.find(k) for k in keys}),
        "largest_group": max(Counter(groups.find(k) for k in keys).values(), default=0),
        "shares": {name: round(len(found) / max(len(kept), 1), 4) for name, found in splits.items()},
        "held_out_groups": sorted(_forced(c, by)),
        "hint_field_removed_from_sealed_eval": hint,
    }
    if profile is not None:
        ids = {name: [str(row["id"]) for row in found] for name, found in splits.items()}
        manifest["profile"] = {**profile.summary(ids), "stratified": True, "drop": list(drop), "dropped": left_out}
    return splits, manifest


def _dedup(
    rows: list[dict[str, Any]], normalize: Any, profile: Profile | None, drop: Sequence[str]
) -> tuple[list[tuple[int, dict[str, Any], str]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(kept (line, row, normalised prompt), exact duplicates dropped, rows left out by `drop`)."""
    kept, dropped, first, left_out = [], [], {}, []
    for line, row in enumerate(rows, 1):
        if profile is not None and profile.label(row["id"]) in drop:
            left_out.append({"id": row["id"], "line": line, "profile": profile.label(row["id"])})
            continue
        text = normalize(prompt_text(row["prompt"]))
        if text in first:
            dropped.append({"id": row["id"], "line": line, "duplicate_of": first[text]})
            continue
        first[text] = row["id"]
        kept.append((line, row, text))
    return kept, dropped, left_out


def _strata(roots: list[str], labels: list[str]) -> dict[str, str]:
    """Each group's stratum: the label most of its tasks carry (the harder label on a tie)."""
    from rlvr_cli.data.difficulty import LABELS, UNPROFILED

    order = (*LABELS, UNPROFILED)
    counts: dict[str, Counter[str]] = {}
    for root, label in zip(roots, labels, strict=True):
        counts.setdefault(root, Counter())[label] += 1
    return {root: min(found, key=lambda label: (-found[label], order.index(label))) for root, found in counts.items()}


def _join_near(
    settings: dict[str, Any] | None, texts: list[str], keys: list[str], groups: Groups, clusters: bool = False
) -> int:
    """Join the groups of near duplicates (or, `clusters`, of one semantic cluster's prompts)."""
    if not settings or len(texts) < 2:
        return 0
    import numpy as np

    from rlvr_cli.data.near import ESTIMATE_SLACK, Index, Signer, confirm, numbers_salt, same_template, skeleton

    if clusters:
        texts, confirm = [skeleton(t) for t in texts], same_template  # numbers masked; the similarity decides

    signer = Signer(settings["permutations"], settings["shingle"])
    index = Index(settings["threshold"], settings["permutations"])
    floor, k = max(index.threshold - ESTIMATE_SLACK, 0.0), signer.shingle
    joins = 0
    signatures = signer.signatures(texts)
    salts = None if clusters else [numbers_salt(t) for t in texts]  # near duplicates state the same numbers

    def join(a: int, b: int) -> int:  # the estimate never decides: the same numbers and the exact similarity do
        return groups.join(keys[a], keys[b]) if confirm(texts[a], texts[b], index.threshold, k) is not None else 0

    for start in range(0, len(texts), 1024):
        batch, block = signatures[start : start + 1024], None if salts is None else salts[start : start + 1024]
        for offset, found in enumerate(index.matches(batch, floor=floor, salts=block)):
            for other, _ in found:
                joins += join(start + offset, other)  # type: ignore[arg-type]
        for offset in range(len(batch)):  # pairs within a batch: each row against the rows before it
            row = batch[offset]
            similar = np.nonzero((batch[:offset] == row).mean(axis=1) >= floor)[0]
            for other in similar:
                joins += join(start + offset, start + int(other))
        index.add(list(range(start, start + len(batch))), batch, block)
    return joins


def _forced(c: Contract, by: str | None) -> set[str]:
    design = c.data.holdout_design
    if design is None or by not in HOLDOUT_FIELDS:
        return set()
    return set(getattr(design, HOLDOUT_FIELDS[by]) or [])


def _assign(
    roots: set[str],
    keys: list[str],
    forced: set[str],
    fractions: Sequence[float],
    seed: int,
    strata: dict[str, str] | None = None,
) -> dict[str, str]:
    """Group → split: held-out groups to holdout; the rest, in seeded order, each to the split
    furthest below its share of the rows (of its stratum's rows, when stratified; overall on a tie)."""
    sizes: dict[str, int] = {}
    for key in keys:
        sizes[key] = sizes.get(key, 0) + 1
    stratum = strata or dict.fromkeys(roots, "")
    totals = Counter[str]()
    for root in roots:
        totals[stratum[root]] += sizes[root]
    totals[_ALL] = len(keys)
    filled = {s: dict.fromkeys(SPLITS, 0) for s in totals}
    targets = {s: dict(zip(SPLITS, (n * f for f in fractions), strict=True)) for s, n in totals.items()}
    assignment = {}

    def place(root: str, name: str) -> None:
        assignment[root] = name
        for s in (stratum[root], _ALL):
            filled[s][name] += sizes[root]

    for root in sorted(roots & forced):
        place(root, "holdout")
    order = sorted((r for r in roots if r not in assignment), key=lambda r: (_rank(seed, r), r))
    for root in order:  # each group to the split furthest below its share
        s = stratum[root]
        place(root, max(SPLITS, key=lambda n: (targets[s][n] - filled[s][n], targets[_ALL][n] - filled[_ALL][n])))
    return assignment


def write_split(
    c: Contract,
    contract_path: Path,
    source: Path,
    by: str | None,
    fractions: Sequence[float],
    seed: int,
    *,
    force: bool,
    profile: Profile | None = None,
    drop: Sequence[str] = (),
) -> tuple[Path, dict[str, Any]]:
    """Write the three split files the contract names and the manifest; returns the manifest."""
    folder = contract_path.resolve().parent
    targets = {name: folder / getattr(c.data.splits, name).path for name in SPLITS}
    manifest_rel = c.data.split_manifest or str(Path(c.data.splits.train.path).parent / "split-manifest.json")
    outside = [
        (k, p)
        for k, p in [*targets.items(), ("split_manifest", folder / manifest_rel)]
        if not p.resolve().is_relative_to(folder)
    ]
    if outside:  # --force replaces files: never one outside the experiment (a `../` path, a link out)
        key, path = outside[0]
        raise RlvrError(
            f"data split writes only inside the contract's folder {folder}; {key} resolves to {path.resolve()}"
        )
    existing = [str(p) for p in targets.values() if p.exists()]
    if existing and not force:
        raise RlvrError(f"{', '.join(existing)} already exist; --force replaces them")
    rows = read_split(source, "source")
    splits, manifest = plan_split(c, rows, by, fractions, seed, profile, drop)
    empty = [name for name, found in splits.items() if not found]
    if empty:
        why = (
            f"{manifest['groups']} group(s) for {sum(len(f) for f in splits.values())} tasks, the largest of "
            f"{manifest['largest_group']}"
        )
        joined, clustered = manifest["near_duplicate_joins"], manifest["semantic_cluster_joins"]
        if joined:
            why += f", after {joined} near-duplicate join(s) merged groups whose prompts are near copies"
        if clustered:
            why += (
                f", after {clustered} semantic-cluster join(s) (`semantic_clusters: true` keeps each template's "
                "problems in one split)"
            )
        raise RlvrError(f"no task lands in {', '.join(empty)} ({why}): give it a larger share, or split by a finer key")
    out = {"version": 1, "source": {"path": _rel(source, folder), "sha256": sha256_file(source), "rows": len(rows)}}
    out.update(manifest)
    out["splits"] = {}
    for name, found in splits.items():
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in found)
        targets[name].parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(targets[name], text)
        path = getattr(c.data.splits, name).path
        out["splits"][name] = {"path": path, "sha256": sha256_file(targets[name]), "rows": len(found)}
    target = folder / manifest_rel
    atomic_write_text(target, json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    return target, out


def _rel(path: Path, folder: Path) -> str:
    resolved = path.resolve()
    return resolved.relative_to(folder).as_posix() if resolved.is_relative_to(folder) else str(path)
