"""`dedup.semantic_clusters` is a claim rlvr checks and keeps: `true` says each template's problems
lie in one split. `rlvr data check` warns once per cluster that spans splits (RLV415) and never on
distinct templates; `rlvr data split` keeps every cluster whole; `false` checks nothing."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import copy_experiment, edit, rlvr
from tests.data.planted import read, write

CONTRACT = "experiment.rlvr.yaml"
EXACT = "dedup: {stage: before_split, method: exact, semantic_clusters: false}"
CLAIMED = "dedup: {stage: before_split, method: exact, semantic_clusters: true}"
TEMPLATES = [  # ten problem families of another domain (dates, rates, units), each with its numbers
    "Convert {a} kilometres to metres. Give a whole number.",
    "A tank holds {a} litres and leaks {b} litres an hour. After how many hours is it empty?",
    "What day of the year is {a} days after day {b}, in a year of 365 days?",
    "A cyclist rides {a} km in {b} hours; what is her average speed in km per hour?",
    "How many seconds are in {a} minutes and {b} seconds?",
    "If a recipe for {b} people needs {a} grams of flour, how much flour feeds one person?",
    "The thermometer read {a} degrees at noon and fell by {b} by midnight. What did it read then?",
    "Round {a}.{b} to the nearest whole number.",
    "A train leaves at hour {b} and the trip takes {a} hours; at what hour (0-23) does it arrive?",
    "Sam saves {a} coins a week. How many coins after {b} weeks?",
]


@pytest.fixture
def experiment(single_turn: Path, tmp_path: Path) -> Path:
    return copy_experiment(single_turn, tmp_path / "exp")


def family(template: int, count: int, rng: random.Random, prefix: str) -> list[dict[str, Any]]:
    rows, seen = [], set()
    while len(rows) < count:
        a, b = rng.randint(2, 9_999), rng.randint(2, 99)
        if (a, b) not in seen:
            seen.add((a, b))
            rows.append({"id": f"{prefix}-{template}-{len(rows)}", "prompt": TEMPLATES[template].format(a=a, b=b)})
    for row in rows:
        row["answer"] = "1"
    return rows


def data_check(folder: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    run = rlvr("data", "check", folder / CONTRACT, "--format", "json", *args)
    assert run.code in (0, 1), run.stderr
    return run.code, [f for f in run.json()["findings"] if f["code"] == "RLV415"]


def strict(folder: Path) -> Any:
    return rlvr("validate", "--deep", "--strict", folder / CONTRACT)


def test_a_cluster_across_splits_is_one_warning_distinct_templates_none(experiment: Path) -> None:
    rng, data = random.Random(5), experiment / "data"
    write(data / "train.jsonl", [r for t in range(6) for r in family(t, 40, rng, "t")])
    write(data / "holdout.jsonl", [r for t in (6, 7) for r in family(t, 15, rng, "h")])
    write(data / "sealed_eval.jsonl", [r for t in (8, 9) for r in family(t, 15, rng, "s")])
    edit(experiment, EXACT, CLAIMED)
    code, clusters = data_check(experiment)
    assert code == 0 and clusters == []  # ten templates, each in one split: no false alarm

    moved = family(0, 5, random.Random(99), "moved")  # five siblings of a training family, in holdout
    write(data / "holdout.jsonl", read(data / "holdout.jsonl") + moved)
    code, clusters = data_check(experiment)
    assert len(clusters) == 1 and clusters[0]["severity"] == "warning", clusters
    message = clusters[0]["message"]
    assert "one semantic cluster of 45 prompts" in message and "spans train (40), holdout (5)" in message
    assert clusters[0]["at"]["split"] == "holdout" and clusters[0]["other"]["path"] == "data/train.jsonl"
    assert code == 0 and strict(experiment).code == 1  # a warning: training goes on, --strict fails

    edit(experiment, CLAIMED, EXACT)  # claimed false: nothing is checked
    assert data_check(experiment) == (0, [])


def test_data_split_keeps_each_cluster_in_one_split(experiment: Path) -> None:
    rng, data = random.Random(6), experiment / "data"
    for name in ("train", "holdout", "sealed_eval"):
        (data / f"{name}.jsonl").unlink()
    write(data / "all.jsonl", [r for t in range(10) for r in family(t, 12, rng, "all")])
    edit(experiment, EXACT, CLAIMED)
    run = rlvr("data", "split", experiment / CONTRACT, "--source", data / "all.jsonl")
    assert run.code == 0, run.stderr
    manifest = json.loads((data / "split-manifest.json").read_text())
    assert manifest["groups"] == 10 and manifest["semantic_cluster_joins"] == 110  # 10 families of 12
    owner: dict[str, str] = {}
    for name in ("train", "holdout", "sealed_eval"):
        for row in read(data / f"{name}.jsonl"):
            assert owner.setdefault(row["id"].split("-")[1], name) == name, f"family {row['id']} straddles"
    assert data_check(experiment) == (0, []) and strict(experiment).code == 0, strict(experiment).stdout

    edit(experiment, CLAIMED, EXACT)  # the same source split without the claim: families straddle
    run = rlvr("data", "split", experiment / CONTRACT, "--source", data / "all.jsonl", "--force")
    assert run.code == 0 and json.loads((data / "split-manifest.json").read_text())["semantic_cluster_joins"] == 0
    edit(experiment, EXACT, CLAIMED)
    code, clusters = data_check(experiment)
    assert code == 0 and len(clusters) >= 5, clusters  # the claim is now false, and said so


def test_a_split_the_clusters_cannot_fill_says_why(experiment: Path) -> None:
    rng, data = random.Random(7), experiment / "data"
    write(data / "all.jsonl", family(0, 60, rng, "one"))  # one template: one cluster
    edit(experiment, EXACT, CLAIMED)
    run = rlvr("data", "split", experiment / CONTRACT, "--source", data / "all.jsonl", "--force")
    assert run.code == 1 and "no task lands in holdout, sealed_eval" in run.stderr, run.stderr
    assert "59 semantic-cluster join(s)" in run.stderr and "semantic_clusters: true" in run.stderr
