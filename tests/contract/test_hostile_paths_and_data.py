"""Inputs that used to pass or crash: odd paths given to validate, data rows that break training
later, verifiers that are not the user's code, sizes no run can have."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT, copy_experiment, edit, rlvr

CONTRACT = "experiment.rlvr.yaml"
VALID = ROOT / "tests" / "contracts" / "valid" / "base.rlvr.yaml"


@pytest.fixture
def experiment(single_turn: Path, tmp_path: Path) -> Path:
    return copy_experiment(single_turn, tmp_path / "exp")


def test_an_empty_path_argument_is_a_usage_error() -> None:
    run = rlvr("validate", "")
    assert run.code == 2 and "empty" in run.stderr


def test_folder_scans_report_links_and_pipes_they_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "ok.rlvr.yaml").write_text(VALID.read_text())
    (tmp_path / "dangling.rlvr.yaml").symlink_to(tmp_path / "nowhere.yaml")
    os.mkfifo(tmp_path / "pipe.rlvr.yaml")
    run = rlvr("validate", tmp_path, timeout=30)
    assert run.code == 2 and run.stderr.count("not a regular file") == 2, run.stderr
    assert "dangling.rlvr.yaml" in run.stderr and "pipe.rlvr.yaml" in run.stderr


def test_a_file_that_opens_but_cannot_be_read_is_exit_2() -> None:
    run = rlvr("validate", "/proc/self/mem")
    assert run.code == 2 and "cannot be read" in run.stderr and "internal error" not in run.stderr


@pytest.mark.parametrize(
    ("row", "words"),
    [
        (b'{"id": "l1", "prompt": "caf\xe9", "answer": "1"}', "not UTF-8"),
        (json.dumps({"id": "big", "prompt": "x" * (2 << 20), "answer": "1"}).encode(), "a line over 1,048,576 bytes"),
        (json.dumps({"id": "m", "prompt": [{"role": "user", "content": 5}], "answer": "1"}).encode(), "content"),
        (json.dumps({"id": "m", "prompt": ["hi"], "answer": "1"}).encode(), "chat message"),
        (json.dumps({"id": True, "prompt": "x", "answer": "1"}).encode(), "id must be"),
    ],
)
def test_deep_refuses_rows_training_cannot_use(experiment: Path, row: bytes, words: str) -> None:
    with (experiment / "data" / "train.jsonl").open("ab") as fh:
        fh.write(row + b"\n")
    run = rlvr("validate", "--deep", "--format", "json", experiment / CONTRACT)
    found = [d for d in run.json()["files"][0]["diagnostics"] if d["code"] == "RLV901"]
    assert run.code == 1 and any(words in d["message"] for d in found), found


def test_a_huge_row_is_refused_before_anything_tokenizes_it(experiment: Path) -> None:
    with (experiment / "data" / "train.jsonl").open("a") as fh:
        fh.write(json.dumps({"id": "big", "prompt": "1+1=" * (1 << 20), "answer": "2"}) + "\n")
    run = rlvr("train", experiment / CONTRACT, "--max-steps", "1", timeout=120)
    assert run.code == 1 and "train.jsonl:36: [RLV901] a line over 1,048,576 bytes" in run.stderr


def test_a_standard_library_function_is_not_a_verifier(experiment: Path) -> None:
    edit(experiment, "verifier: verifier:verify", "verifier: os:system")
    run = rlvr("validate", "--deep", experiment / CONTRACT)
    assert run.code == 1 and "standard-library module" in run.stdout
    audit = rlvr("audit", "verifier", experiment / CONTRACT)
    assert audit.code == 1 and "standard library" in audit.stderr


def test_sizes_no_run_can_have_are_refused(experiment: Path) -> None:
    edit(experiment, "group_size: 8", "group_size: 1e9")
    run = rlvr("validate", "--format", "json", experiment / CONTRACT)
    found = run.json()["files"][0]["diagnostics"]
    assert run.code == 1 and [d["code"] for d in found] == ["RLV003"] and "group_size" in found[0]["path"]


def test_data_outside_the_contract_folder_is_flagged(experiment: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text((experiment / "data" / "holdout.jsonl").read_text())
    edit(experiment, "holdout: {path: data/holdout.jsonl}", f"holdout: {{path: {outside}}}")
    run = rlvr("validate", "--format", "json", experiment / CONTRACT)
    codes = [d["code"] for d in run.json()["files"][0]["diagnostics"]]
    assert "RLV406" in codes
    assert rlvr("validate", "--strict", experiment / CONTRACT).code == 1


def test_the_holdout_design_must_be_true_of_the_data(experiment: Path) -> None:
    data = experiment / "data"
    edit(experiment, "  hints: {used: false}", "  holdout_design: {compositions: [carry]}\n  hints: {used: false}")
    claimed = rlvr("validate", "--deep", "--format", "json", experiment / CONTRACT)
    found = [d for d in claimed.json()["files"][0]["diagnostics"] if d["code"] == "RLV407"]
    assert claimed.code == 1 and "no holdout task has composition 'carry'" in found[0]["message"]
    for split, tag in (("holdout", "carry"), ("train", "plain")):
        rows = [json.loads(x) for x in (data / f"{split}.jsonl").read_text().splitlines()]
        (data / f"{split}.jsonl").write_text("".join(json.dumps({**r, "composition": tag}) + "\n" for r in rows))
    assert rlvr("validate", "--deep", experiment / CONTRACT).code == 0  # now the data shows it
    rows = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()]
    rows[0]["composition"] = "carry"  # one leaked into train
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    leaked = rlvr("validate", "--deep", experiment / CONTRACT)
    assert leaked.code == 1 and "is in train too" in leaked.stdout


def test_a_prompt_in_two_splits_is_a_leak_with_both_places(experiment: Path) -> None:
    data = experiment / "data"
    clean = rlvr("validate", "--deep", "--format", "json", experiment / CONTRACT)
    assert "RLV408" not in [d["code"] for d in clean.json()["files"][0]["diagnostics"]]
    train = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()]
    holdout = [json.loads(x) for x in (data / "holdout.jsonl").read_text().splitlines()]
    copied = [{**row, "id": f"copy-{i}"} for i, row in enumerate(holdout[:2])]
    spaced = {**train[0], "id": "spaced", "prompt": "  " + train[0]["prompt"] + " "}  # the same prompt, padded
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*train, *copied]))
    with (data / "sealed_eval.jsonl").open("a") as fh:
        fh.write(json.dumps(spaced) + "\n")
    leaked = rlvr("validate", "--deep", "--format", "json", experiment / CONTRACT)
    found = [d["message"] for d in leaked.json()["files"][0]["diagnostics"] if d["code"] == "RLV408"]
    assert leaked.code == 1 and len(found) == 3
    assert any(f"data/holdout.jsonl:1: the prompt of data/train.jsonl:{len(train) + 1} again" in m for m in found)
    assert any("data/sealed_eval.jsonl:" in m and "the prompt of data/train.jsonl:1 again" in m for m in found)
    run = rlvr("train", experiment / CONTRACT, "--max-steps", "1", timeout=300)
    assert run.code == 1 and "[RLV408]" in run.stderr and "rlvr data check" in run.stderr
