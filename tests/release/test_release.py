"""`rlvr release` through the CLI on the shipped single-turn example: bundles built from gated
runs, verified, tampered and refused; promoted (only intact and passing); the rollback drill
passes, and fails once the last known-good bundle was altered; rollback restores it only intact."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, rlvr

pytestmark = pytest.mark.slow  # two short runs, their gates and bundles

CONTRACT = "experiment.rlvr.yaml"
LENIENT = ("min: 0.3, confidence: 0.9, critical: true", "min: 0.0, confidence: 0.9, critical: true")


def gated_run(folder: Path, name: str, steps: int) -> Path:
    run = folder / "runs" / name
    done = rlvr("train", folder / CONTRACT, "--max-steps", str(steps), "--run-dir", run, timeout=600)
    assert done.code == 0, done.stderr[-2000:]
    rlvr("gate", folder / CONTRACT, "--candidate", run, timeout=600)
    return run


def build(folder: Path, run: Path, registry: Path) -> str:
    done = rlvr("release", "build", folder / CONTRACT, run, "--registry", registry, "--drill-tasks", "3", timeout=600)
    assert done.code == 0, done.stderr[-2000:]
    return done.stdout.split()[0]


@pytest.fixture(scope="module")
def registry(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, str]:
    """(registry, bundle A: 1 step, C: 8 steps, both passing, and F: A's run gated by a stricter contract)."""
    root = tmp_path_factory.mktemp("release")
    folder = copy_experiment(single_turn, root / "exp", [LENIENT])
    registry = root / "registry"
    run_a = gated_run(folder, "a", 1)
    a = build(folder, run_a, registry)
    c = build(folder, gated_run(folder, "c", 8), registry)
    strict = copy_experiment(single_turn, root / "strict")  # holdout-correct ≥ 0.3: a 1-step run fails it
    run_f = strict / "runs" / "f"
    shutil.copytree(run_a, run_f)
    assert rlvr("gate", strict / CONTRACT, "--candidate", run_f, timeout=600).code == 1
    return registry, a, c, build(strict, run_f, registry)


def test_a_bundle_holds_every_part_and_verifies(registry: tuple) -> None:
    root, a, *_ = registry
    bundle = root / "bundles" / a
    manifest = json.loads((bundle / "manifest.json").read_text())
    names = set(manifest["files"])
    for part in ("policy/model.safetensors", "tokenizer/tokenizer.json", "contract/experiment.rlvr.yaml"):
        assert part in names, part
    assert {"run/gate/verdict.json", "run/data-check.json", "drill.json", "verifier/verifier.py"} <= names
    assert manifest["verifier"]["version"] and manifest["release"] == "pass"
    assert len(json.loads((bundle / "drill.json").read_text())) == 3
    done = rlvr("release", "verify", bundle)
    assert done.code == 0 and "intact" in done.stdout


def test_a_changed_byte_anywhere_is_found(registry: tuple, tmp_path: Path) -> None:
    root, a, *_ = registry
    copy = tmp_path / "copy"
    shutil.copytree(root / "bundles" / a, copy)
    weights = copy / "policy" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    (copy / "run" / "extra.txt").write_text("added")
    done = rlvr("release", "verify", copy)
    assert done.code == 1
    assert "policy/model.safetensors: does not match its sha256" in done.stdout
    assert "run/extra.txt: not in the manifest" in done.stdout
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["release"] = "pass" if manifest["release"] != "pass" else "fail"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert "its own hash does not match" in rlvr("release", "verify", copy).stdout


def test_promote_drill_tamper_and_rollback(registry: tuple, tmp_path: Path) -> None:
    source, a, b, f = registry
    root = tmp_path / "registry"
    shutil.copytree(source, root)
    refused = rlvr("release", "promote", root, f)
    assert refused.code == 1 and "not pass" in refused.stderr  # a failing gate verdict never ships
    assert rlvr("release", "drill", root).code == 1  # nothing to roll back to yet
    assert rlvr("release", "promote", root, a).code == 0
    assert rlvr("release", "promote", root, b).code == 0
    listed = rlvr("release", "list", root).stdout
    assert f"{b}" in listed and "← current" in listed and "← last known-good" in listed
    drill = rlvr("release", "drill", root, timeout=600)
    assert drill.code == 0, drill.stdout + drill.stderr
    assert f"drill passed: {a} restored intact" in drill.stdout
    assert rlvr("release", "drill", root, "--bundle", b, timeout=600).code == 0  # the current one too
    registry_json = (root / "registry.json").read_text()
    weights = root / "bundles" / a / "policy" / "model.safetensors"
    original = weights.read_bytes()
    weights.write_bytes(original[:-1] + bytes([original[-1] ^ 0x01]))
    failed = rlvr("release", "drill", root, timeout=600)
    assert failed.code == 1 and "model.safetensors: does not match its sha256" in failed.stdout
    assert (root / "registry.json").read_text() == registry_json  # a drill changes nothing
    refused = rlvr("release", "rollback", root)
    assert refused.code == 1 and "not intact" in refused.stderr
    weights.write_bytes(original)
    done = rlvr("release", "rollback", root)
    assert done.code == 0 and f"current {a} (was {b})" in done.stdout
    state = json.loads((root / "registry.json").read_text())
    assert state["current"] == a and state["bundles"][b]["state"] == "rolled_back"
    assert rlvr("release", "promote", root, b).code == 1  # a rolled-back bundle does not come back


def test_a_drill_in_a_changed_environment_is_refused(registry: tuple, tmp_path: Path) -> None:
    source, a, *_ = registry
    root = tmp_path / "registry"
    shutil.copytree(source, root)
    manifest = json.loads((root / "bundles" / a / "manifest.json").read_text())
    verifier = Path(manifest["experiment"]) / "verifier.py"
    text = verifier.read_text()
    try:
        verifier.write_text(text + "\n# changed\n")
        done = rlvr("release", "drill", root, "--bundle", a, timeout=600)
        assert done.code == 1 and "the verifier changed since the bundle was built" in done.stderr
    finally:
        verifier.write_text(text)


def canary(root: Path, candidate: str, *more: str) -> object:
    manifest = json.loads((root / "bundles" / candidate / "manifest.json").read_text())
    requests = Path(manifest["experiment"]) / "data" / "holdout.jsonl"  # live-like: tasks in the contract's format
    return rlvr("release", "canary", root, candidate, "--tasks", requests, "--share", "1.0", *more, timeout=600)


def test_a_canary_promotes_a_better_candidate_and_refuses_a_worse_one(registry: tuple, tmp_path: Path) -> None:
    source, a, c, _ = registry
    better = tmp_path / "better"
    shutil.copytree(source, better)
    assert rlvr("release", "promote", better, a).code == 0
    done = canary(better, c)
    assert done.code == 0, done.stdout + done.stderr
    assert "promoted: current" in done.stdout
    state = json.loads((better / "registry.json").read_text())
    assert (state["current"], state["last_known_good"]) == (c, a)
    reports = list((better / "canary").glob("*.json"))
    assert len(reports) == 1 and json.loads(reports[0].read_text())["decision"] == "promote"
    worse = tmp_path / "worse"
    shutil.copytree(source, worse)
    assert rlvr("release", "promote", worse, c).code == 0
    refused = canary(worse, a)
    assert refused.code == 1 and "refused: reward difference" in refused.stdout
    assert json.loads((worse / "registry.json").read_text())["current"] == c  # nothing changed
    assert canary(worse, a, "--allow-tools", "search").code == 2  # a single-turn task has no tools to allow
