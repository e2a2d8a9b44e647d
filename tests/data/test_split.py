"""`rlvr data split`: dedup first, groups never straddle splits, held-out groups go to holdout,
seeded and byte-for-byte reproducible, and the result passes `rlvr data check`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, edit, rlvr
from tests.data.planted import clean_rows, read, shuffle_and_reword, write

CONTRACT = "experiment.rlvr.yaml"


@pytest.fixture
def source(single_turn: Path, tmp_path: Path) -> Path:
    """An experiment whose data/all.jsonl holds 200 tasks in 20 compositions, with two exact
    copies (one differing in case and spacing), one paraphrase-level copy, and hints."""
    folder = copy_experiment(single_turn, tmp_path / "exp")
    for name in ("train", "holdout", "sealed_eval"):
        (folder / "data" / f"{name}.jsonl").unlink()
    rows = clean_rows(200, 11, "task")
    for i, row in enumerate(rows):
        row["composition"] = f"c{i % 20}"
        row["hint"] = f"start from {row['answer']}"
    rows.append({**rows[3], "id": "copy-a"})
    rows.append({**rows[9], "id": "copy-b", "prompt": "  " + rows[9]["prompt"].upper()})
    rows.append({**rows[5], "id": "para", "prompt": shuffle_and_reword(rows[5]["prompt"]), "composition": "c19"})
    write(folder / "data" / "all.jsonl", rows)
    edit(
        folder,
        "dedup: {stage: before_split, method: exact, semantic_clusters: false}",
        "dedup: {stage: before_split, method: minhash, semantic_clusters: false, normalize: [whitespace, case]}\n"
        "  split_manifest: data/split-manifest.json",
    )
    edit(
        folder,
        "  hints: {used: false}",
        "  holdout_design: {compositions: [c7]}\n  hints: {used: true, source: solutions, field: hint, "
        "leak_check: true, placement: prompt, share: 0.5, until_step: 10, advantage: group}",
    )
    return folder


def split(folder: Path, *args: str) -> dict:
    run = rlvr("data", "split", folder / CONTRACT, "--by", "composition", *args)
    assert run.code == 0, run.stderr
    return json.loads((folder / "data" / "split-manifest.json").read_text())


def test_split_dedups_keeps_groups_whole_and_passes_the_data_check(source: Path) -> None:
    manifest = split(source)
    data = source / "data"
    splits = {name: read(data / f"{name}.jsonl") for name in ("train", "holdout", "sealed_eval")}
    assert sorted(d["id"] for d in manifest["dropped_duplicates"]) == ["copy-a", "copy-b"]
    assert manifest["near_duplicate_joins"] == 1  # `para` (composition c19) joined task-5's group (c5)
    owner = {}
    for name, rows in splits.items():
        for row in rows:
            assert owner.setdefault(row["composition"], name) == name, f"{row['composition']} straddles"
    assert owner["c7"] == "holdout" and owner["c19"] == owner["c5"]
    assert sum(map(len, splits.values())) == 201 and all(rows for rows in splits.values())
    assert all("hint" not in row for row in splits["sealed_eval"]) and all("hint" in r for r in splits["train"])
    assert {n: manifest["splits"][n]["rows"] for n in splits} == {n: len(r) for n, r in splits.items()}
    checked = rlvr("data", "check", source / CONTRACT)
    assert checked.code == 0, checked.stdout
    lock = rlvr("lock", source / CONTRACT)
    assert lock.code == 0 and "data/split-manifest.json" in (source / "experiment.lock.json").read_text()
    assert rlvr("validate", "--deep", source / CONTRACT).code == 0
    with (data / "holdout.jsonl").open("a") as fh:  # edited by hand after the split
        fh.write(json.dumps({"id": "late", "prompt": "A late addition about geese.", "answer": "1"}) + "\n")
    drift = rlvr("validate", "--deep", source / CONTRACT)
    assert drift.code == 1 and "data/holdout.jsonl changed since data/split-manifest.json was written" in drift.stdout


def test_split_is_reproducible_and_the_seed_matters(source: Path) -> None:
    split(source, "--seed", "3")
    first = {p.name: p.read_bytes() for p in (source / "data").glob("*.jsonl")}
    refused = rlvr("data", "split", source / CONTRACT, "--by", "composition")
    assert refused.code == 1 and "--force" in refused.stderr
    split(source, "--seed", "3", "--force")
    assert {p.name: p.read_bytes() for p in (source / "data").glob("*.jsonl")} == first
    split(source, "--seed", "4", "--force")
    assert (source / "data" / "train.jsonl").read_bytes() != first["train.jsonl"]


def test_split_refuses_bad_requests(source: Path) -> None:
    bad = rlvr("data", "split", source / CONTRACT, "--fractions", "0.5,0.6,0.1")
    assert bad.code == 2 and "sum to 1" in bad.stderr
    missing = rlvr("data", "split", source / CONTRACT, "--by", "colour")
    assert missing.code == 1 and "no field 'colour'" in missing.stderr
    assert not (source / "data" / "train.jsonl").exists()  # nothing half-written


def test_split_never_writes_outside_the_contracts_folder(source: Path, tmp_path: Path) -> None:
    outside = tmp_path / "victim.jsonl"
    outside.write_text("precious\n")
    edit(source, "path: data/holdout.jsonl", "path: ../victim.jsonl")
    run = rlvr("data", "split", source / CONTRACT, "--by", "composition", "--force")
    assert run.code == 1 and "writes only inside the contract's folder" in run.stderr and "holdout" in run.stderr
    assert outside.read_text() == "precious\n" and not (source / "data" / "train.jsonl").exists()
    edit(source, "path: ../victim.jsonl", "path: data/holdout.jsonl")
    (source / "data" / "holdout.jsonl").symlink_to(outside)  # a link out is the same escape
    run = rlvr("data", "split", source / CONTRACT, "--by", "composition", "--force")
    assert run.code == 1 and "resolves to" in run.stderr and outside.read_text() == "precious\n"


def test_split_and_check_read_list_valued_fields_alike_and_the_split_says_what_it_grouped(source: Path) -> None:
    rows = read(source / "data" / "all.jsonl")
    for i in range(4):  # tasks of two compositions, one of them held out: they belong in holdout
        rows.append(
            {
                "id": f"both-{i}",
                "prompt": f"Add 7 and {i} apples, then 3 more pears.",
                "answer": str(10 + i),
                "composition": ["c3", "c7"],
                "hint": "add",
            }
        )
    write(source / "data" / "all.jsonl", rows)
    run = rlvr("data", "split", source / CONTRACT, "--by", "composition")
    assert run.code == 0, run.stderr
    assert "group(s), the largest of" in run.stdout and "asked" in run.stdout
    placed = {
        r["id"]: name for name in ("train", "holdout", "sealed_eval") for r in read(source / "data" / f"{name}.jsonl")
    }
    assert all(placed[f"both-{i}"] == "holdout" for i in range(4))
    check = rlvr("data", "check", source / CONTRACT, "--format", "json")
    assert [f for f in check.json()["findings"] if f["code"] == "RLV407"] == []
    tiny = rlvr("data", "split", source / CONTRACT, "--by", "composition", "--fractions", "0.98,0.01,0.01", "--force")
    assert tiny.code == 1 and "group(s) for" in tiny.stderr and "the largest of" in tiny.stderr
