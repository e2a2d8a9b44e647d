"""The difficulty profile after `rlvr audit rewards --profile`: `rlvr data split --profile`
stratifies (each label spread over the splits in the asked shares) and `--drop` leaves out the
labels that teach nothing; `rlvr data check --profile` says when train carries little signal
(RLV416) and when an evaluation split is harder or easier than train beyond chance (RLV417), and
stays quiet on a random split of one distribution. Profiled before splitting with `--tasks`."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from rlvr_cli.env.agent import serve
from tests.audit.openai_standin import make_app
from tests.conftest import copy_experiment, rlvr
from tests.data.planted import clean_rows, read, write

CONTRACT = "experiment.rlvr.yaml"
LABELS = ["unsolved", "hard", "hard", "medium", "medium", "medium", "easy", "easy", "easy", "solved_by_all"]
SPLITS = ("train", "holdout", "sealed_eval")


@pytest.fixture
def exp(single_turn: Path, tmp_path: Path) -> Path:
    """400 tasks in data/all.jsonl, no splits yet, and a profile of them (10 % unsolved, 10 %
    solved by all, the rest hard, medium or easy) in profile.jsonl."""
    folder = copy_experiment(single_turn, tmp_path / "exp")
    for name in SPLITS:
        (folder / "data" / f"{name}.jsonl").unlink()
    rows = clean_rows(400, 5, "task")
    write(folder / "data" / "all.jsonl", rows)
    profile = [{"id": r["id"], "profile": LABELS[i * 7 % 10], "pass@1_mean": 0.5} for i, r in enumerate(rows)]
    write(folder / "profile.jsonl", profile)
    return folder


def mix(folder: Path, name: str) -> Counter:
    labels = {r["id"]: r["profile"] for r in read(folder / "profile.jsonl")}
    return Counter(labels[r["id"]] for r in read(folder / "data" / f"{name}.jsonl"))


def check(folder: Path) -> tuple[int, dict]:
    done = rlvr("data", "check", folder / CONTRACT, "--profile", folder / "profile.jsonl", "--format", "json")
    assert done.code in (0, 1), done.stderr
    return done.code, json.loads(done.stdout)


def test_a_stratified_split_spreads_each_label_and_drops_the_idle_ones(exp: Path) -> None:
    args = ("--profile", exp / "profile.jsonl", "--drop", "unsolved,solved_by_all")
    done = rlvr("data", "split", exp / CONTRACT, "--source", exp / "data" / "all.jsonl", *args)
    assert done.code == 0, done.stderr
    assert "80 task(s) left out by --drop: unsolved 40, solved_by_all 40" in done.stdout
    manifest = json.loads((exp / "data" / "split-manifest.json").read_text())
    assert manifest["profile"]["stratified"] and len(manifest["profile"]["dropped"]) == 80
    for label, total in (("hard", 80), ("medium", 120), ("easy", 120)):
        for name, share in zip(SPLITS, (0.8, 0.1, 0.1), strict=True):
            assert abs(mix(exp, name)[label] - total * share) <= 1, (label, name, mix(exp, name))
    assert not any(mix(exp, name)[label] for name in SPLITS for label in ("unsolved", "solved_by_all"))
    code, report = check(exp)
    assert code == 0 and not {"RLV416", "RLV417"} & set(report["counts"]), report["counts"]
    assert report["profile"]["mix"]["holdout"] == {"hard": 8, "medium": 12, "easy": 12}
    assert report["profile"]["profiled_tasks_in_no_split"] == 80  # the dropped ones: said, not an error


def test_the_check_says_idle_training_tasks_and_a_skewed_evaluation_split(exp: Path) -> None:
    rows = read(exp / "data" / "all.jsonl")
    labels = {r["id"]: r["profile"] for r in read(exp / "profile.jsonl")}
    hard = [r for r in rows if labels[r["id"]] in ("hard", "unsolved")]
    rest = [r for r in rows if labels[r["id"]] not in ("hard", "unsolved")]
    write(exp / "data" / "holdout.jsonl", hard[:40])  # the holdout is the hard tail: it measures the mix
    write(exp / "data" / "sealed_eval.jsonl", rest[:40])
    write(exp / "data" / "train.jsonl", hard[40:] + rest[40:])
    code, report = check(exp)
    assert code == 0  # warnings: the data is not wrong, the measurement would mislead
    found = {f["code"]: f for f in report["findings"] if f["code"] in ("RLV416", "RLV417")}
    assert found["RLV417"]["at"]["split"] == "holdout" and "difficulty mix differs" in found["RLV417"]["message"]
    assert [f for f in report["findings"] if f["code"] == "RLV417"] == [found["RLV417"]]  # sealed_eval: easy only
    idle = found["RLV416"]
    assert idle["at"]["split"] == "train" and len(idle["tasks"]) == len(
        [r for r in hard[40:] + rest[40:] if labels[r["id"]] in ("unsolved", "solved_by_all")]
    )
    text = rlvr("data", "check", exp / CONTRACT, "--profile", exp / "profile.jsonl")
    assert "warning[RLV416]" in text.stdout and "difficulty profile" in text.stdout
    with (exp / CONTRACT).open("a") as fh:  # accepted: waived in the data check, never stale to validate
        fh.write("\nwaivers:\n  - {rule: RLV416, reason: a curriculum keeps them for a later policy}\n")
    _, waived = check(exp)
    assert [f["severity"] for f in waived["findings"] if f["code"] == "RLV416"] == ["waived"]
    validated = rlvr("validate", exp / CONTRACT)
    assert validated.code == 0 and "RLV005" not in validated.stdout + validated.stderr


def test_a_random_split_of_one_distribution_is_no_skew(exp: Path) -> None:
    done = rlvr("data", "split", exp / CONTRACT, "--source", exp / "data" / "all.jsonl")  # not stratified
    assert done.code == 0, done.stderr
    for seed in ("1", "2", "3"):
        again = rlvr("data", "split", exp / CONTRACT, "--source", exp / "data" / "all.jsonl", "--seed", seed, "--force")
        assert again.code == 0, again.stderr
        _, report = check(exp)
        assert "RLV417" not in report["counts"], report["findings"]
        assert report["counts"].get("RLV416") == 1  # 20 % of train is unsolved or solved by all


def test_a_bad_profile_or_drop_is_refused_with_where(exp: Path) -> None:
    lines = (exp / "profile.jsonl").read_text().splitlines()
    lines[2] = json.dumps({"id": "task-2", "profile": "tricky"})
    (exp / "bad.jsonl").write_text("\n".join(lines) + "\n")
    source = ("--source", exp / "data" / "all.jsonl")
    bad = rlvr("data", "split", exp / CONTRACT, *source, "--profile", exp / "bad.jsonl")
    assert bad.code == 2 and "bad.jsonl:3" in bad.stderr and "Traceback" not in bad.stderr
    no_profile = rlvr("data", "split", exp / CONTRACT, *source, "--drop", "unsolved")
    assert no_profile.code == 2 and "--drop needs --profile" in no_profile.stderr
    label = rlvr("data", "split", exp / CONTRACT, *source, "--profile", exp / "profile.jsonl", "--drop", "boring")
    assert label.code == 2 and "boring is not a profile label" in label.stderr
    assert not (exp / "data" / "train.jsonl").exists()  # nothing written
    missing = rlvr("data", "check", exp / CONTRACT, "--profile", exp / "nowhere.jsonl")
    assert missing.code == 2 and "no such file" in missing.stderr


def test_tasks_not_yet_split_are_profiled_then_split(single_turn: Path, tmp_path: Path) -> None:
    """generate → review → `audit rewards --tasks` → `data split --profile --drop`: a task whose
    reference is wrong is solved by no model and never reaches a split."""
    exp = copy_experiment(single_turn, tmp_path / "exp")
    tasks = read(exp / "data" / "all.jsonl")
    tasks[0]["answer"] = "99"
    write(exp / "generated.jsonl", tasks)
    env = {**os.environ, "OPENAI_API_KEY": "unused"}
    with serve(make_app()) as url:
        policies = ("--policy", f"openai:wrong@{url}/v1", "--policy", f"openai:sum@{url}/v1")
        args = ("--tasks", exp / "generated.jsonl", "--profile", exp / "profile.jsonl", "--samples", "2")
        done = rlvr("audit", "rewards", exp / CONTRACT, *policies, *args, "--format", "json", env=env)
    assert done.code == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["profile"]["unsolved"] == [tasks[0]["id"]]
    assert len(read(exp / "profile.jsonl")) == len(tasks)
    split = rlvr(
        "data",
        "split",
        exp / CONTRACT,
        "--source",
        exp / "generated.jsonl",
        "--profile",
        exp / "profile.jsonl",
        "--drop",
        "unsolved",
        "--force",
    )
    assert split.code == 0, split.stderr
    kept = [r["id"] for name in SPLITS for r in read(exp / "data" / f"{name}.jsonl")]
    assert tasks[0]["id"] not in kept and len(kept) == len(tasks) - 1
