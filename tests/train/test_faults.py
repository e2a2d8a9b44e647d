"""The run folder under faults and attack: crafted checkpoints, duplicate ids, a lost manifest,
changed locked files, a damaged checkpoint, signals, a full disk, a busy folder, prints from
the verifier, a verifier that always fails. Each through the real `rlvr` command."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr_cli.files import sha256_file
from tests.conftest import QUICK_STEPS, ROOT, copy_experiment, edit, rlvr, spawn_rlvr

pytestmark = pytest.mark.slow  # end-to-end runs: `make test` runs them, `make test-fast` does not

CONTRACT = "experiment.rlvr.yaml"


@pytest.fixture(scope="module")
def quick(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small steps, a checkpoint every step, no holdout."""
    edits = [*QUICK_STEPS, ("holdout_every: 10", "holdout_every: 50")]
    return copy_experiment(single_turn, tmp_path_factory.mktemp("faults") / "arith", edits)


@pytest.fixture
def experiment(quick: Path, tmp_path: Path) -> Path:
    return copy_experiment(quick, tmp_path / "exp")


@pytest.fixture(scope="module")
def straight(quick: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted 4-step run: what every interrupted run must end up equal to."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    done = rlvr("train", quick / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    return run_dir


def status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def steps_logged(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def record_keys(run: Path) -> list[tuple]:
    import pyarrow.parquet as pq

    manifest = json.loads((run / "records" / "manifest.json").read_text())["shards"]
    rows = [r for s in manifest for r in pq.read_table(run / "records" / s["file"]).to_pylist()]
    return sorted((r["step"], r["round"], r["group"], r["sample"], tuple(r["response_ids"])) for r in rows)


def same_final(a: Path, b: Path) -> bool:
    wa, wb = load_file(a / "final" / "model.safetensors"), load_file(b / "final" / "model.safetensors")
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_crafted_checkpoint_runs_no_code(experiment: Path, tmp_path: Path) -> None:
    run_dir, marker = tmp_path / "run", tmp_path / "owned"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "1", timeout=300).code == 0
    checkpoint = run_dir / "checkpoints" / "step-1"

    class Exploit:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    torch.save({"optimizer": Exploit()}, checkpoint / "state.pt")
    sums = json.loads((checkpoint / "COMPLETE").read_text())
    sums["files"]["state.pt"] = sha256_file(checkpoint / "state.pt")  # the attacker rewrites the checksums too
    (checkpoint / "COMPLETE").write_text(json.dumps(sums))
    resumed = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "2", "--resume", timeout=300)
    assert resumed.code == 1 and "not loaded" in resumed.stderr and "Traceback" not in resumed.stderr
    assert not marker.exists()


@pytest.mark.parametrize(("split", "row"), [("train", {"id": "dup"}), ("holdout", {"id": 1}), ("train", {"id": "1"})])
def test_duplicate_task_ids_are_refused(experiment: Path, split: str, row: dict) -> None:
    data = experiment / "data"
    first = json.loads((data / "train.jsonl").read_text().splitlines()[0])
    other = json.loads((data / "holdout.jsonl").read_text().splitlines()[0])
    (data / "train.jsonl").write_text(
        (data / "train.jsonl").read_text().replace(f'"id": {json.dumps(first["id"])}', '"id": "dup"', 1)
    )
    with (data / split).with_suffix(".jsonl").open("a") as fh:
        fh.write(json.dumps({**other, **row, "answer": "7"}) + "\n")
    if row["id"] in (1, "1"):  # an integer id and its text form are one id
        with (data / "sealed_eval.jsonl").open("a") as fh:
            fh.write(json.dumps({**other, "id": 1 if row["id"] == "1" else "1"}) + "\n")
    checked = rlvr("validate", "--deep", "--format", "json", experiment / CONTRACT)
    codes = [d["code"] for d in checked.json()["files"][0]["diagnostics"]]
    assert checked.code == 1 and "RLV405" in codes
    run = rlvr("train", experiment / CONTRACT, "--max-steps", "1", timeout=300)
    assert run.code == 1 and "the data check found" in run.stderr and "rlvr data check" in run.stderr
    listed = rlvr("data", "check", experiment / CONTRACT, "--format", "json")
    assert listed.code == 1 and "RLV405" in listed.json()["counts"]


def test_a_missing_manifest_is_refused_never_cleaned(experiment: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", timeout=300).code == 0
    (run_dir / "records" / "manifest.json").unlink()
    shards = sorted(p.name for p in (run_dir / "records").glob("*.parquet"))
    resumed = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", "--resume", timeout=300)
    assert resumed.code == 1 and "no manifest.json" in resumed.stderr
    assert sorted(p.name for p in (run_dir / "records").glob("*.parquet")) == shards and len(shards) == 3
    audited = rlvr("audit", "rollouts", run_dir)
    assert audited.code == 1 and "manifest.json is missing" in audited.stdout


def test_a_changed_locked_verifier_is_refused_on_train_and_resume(experiment: Path, tmp_path: Path) -> None:
    assert rlvr("lock", experiment / CONTRACT).code == 0
    run_dir = tmp_path / "run"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "1", timeout=300).code == 0
    verifier = experiment / "verifier.py"
    verifier.write_text(verifier.read_text().replace("correct = float(", "correct = 1.0 or float("))
    resumed = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "2", "--resume", timeout=300)
    assert resumed.code == 1 and "verifier.py changed since" in resumed.stderr
    fresh = rlvr("train", experiment / CONTRACT, "--run-dir", tmp_path / "other", "--max-steps", "1", timeout=300)
    assert fresh.code == 1 and "verifier.py changed since" in fresh.stderr


def test_a_checkpoint_without_its_marker_is_passed_over(experiment: Path, tmp_path: Path, straight: Path) -> None:
    run_dir = tmp_path / "run"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", timeout=300).code == 0
    (run_dir / "checkpoints" / "step-3" / "COMPLETE").unlink()
    for _ in range(2):  # twice: the damaged folder must not break the next resume either
        again = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", "--auto", timeout=300)
        assert again.code == 0, again.stderr[-2000:]
    assert status(run_dir)["state"] == "finished" and status(run_dir)["step"] == 4
    assert steps_logged(run_dir) == [0, 1, 2, 3]
    assert same_final(run_dir, straight) and record_keys(run_dir) == record_keys(straight)


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def _train(experiment: Path, run_dir: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    command = ["train", experiment / CONTRACT, "--run-dir", run_dir, *extra]
    return spawn_rlvr(*command, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow
def test_sigterm_then_auto_resume_equals_a_straight_run(experiment: Path, tmp_path: Path, straight: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _train(experiment, run_dir, "--max-steps", "400")
    _wait_for(run_dir / "checkpoints" / "step-2", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "interrupted by SIGTERM" in err and "--auto" in err, err[-3000:]
    assert "--auto --max-steps 400" in err  # the command it prints goes on to the step the user asked for
    state = status(run_dir)
    assert state["state"] == "paused" and "SIGTERM" in state["reason"]
    shown = rlvr("status", run_dir)
    assert "paused" in shown.stdout and "--auto --max-steps 400" in shown.stdout
    last = steps_logged(run_dir)[-1]  # status counts steps from 1, as the progress line does
    assert f"last step:  {last + 1}: " in shown.stdout and "metrics.jsonl" not in shown.stdout
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", "--auto", timeout=300)
    assert done.code == 0 and "resuming" in done.stderr, done.stderr[-2000:]
    assert steps_logged(run_dir) == [0, 1, 2, 3]
    assert same_final(run_dir, straight) and record_keys(run_dir) == record_keys(straight)


@pytest.mark.slow
def test_ctrl_c_before_the_first_checkpoint_leaves_a_way_forward(
    experiment: Path, tmp_path: Path, straight: Path
) -> None:
    edit(experiment, "every_steps: 1", "every_steps: 100")
    run_dir = tmp_path / "run"
    proc = _train(experiment, run_dir, "--max-steps", "400")
    _wait_for(run_dir / "records" / "manifest.json", proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err and "no checkpoint yet" in err
    assert status(run_dir)["state"] == "paused"
    refused = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", "--resume")
    assert refused.code == 2 and "--auto" in refused.stderr
    edit(experiment, "every_steps: 100", "every_steps: 1")  # the contract must match the straight run's
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", "--auto", timeout=300)
    assert done.code == 0 and "starting from step 0" in done.stderr, done.stderr[-2000:]
    assert steps_logged(run_dir) == [0, 1, 2, 3]
    assert same_final(run_dir, straight) and record_keys(run_dir) == record_keys(straight)


@pytest.mark.slow
def test_a_restart_that_stops_earlier_keeps_no_records_of_steps_it_never_took(
    experiment: Path, tmp_path: Path, straight: Path
) -> None:
    """An attempt without a checkpoint that got to step 6, then `--auto --max-steps 4` in the same
    folder: the records are the straight 4-step run's, none of the first attempt's steps 4 and 5
    (an interrupt that came late left them before)."""
    edit(experiment, "every_steps: 1", "every_steps: 100")
    run_dir = tmp_path / "run"
    first = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "6", timeout=300)
    assert first.code == 0 and max(k[0] for k in record_keys(run_dir)) == 5, first.stderr[-2000:]
    shutil.rmtree(run_dir / "checkpoints")  # as if killed before its first checkpoint, records written
    edit(experiment, "every_steps: 100", "every_steps: 1")
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", "--auto", timeout=300)
    assert done.code == 0 and "starting from step 0" in done.stderr, done.stderr[-2000:]
    assert record_keys(run_dir) == record_keys(straight)
    manifest = json.loads((run_dir / "records" / "manifest.json").read_text())["shards"]
    assert sorted(p.name for p in (run_dir / "records").glob("*.parquet")) == sorted(s["file"] for s in manifest)


@pytest.mark.parametrize("fault", ["disk_full@3", "records_full@2"], ids=["at a checkpoint", "writing records"])
def test_a_full_disk_fails_the_run_with_a_way_forward(
    experiment: Path, tmp_path: Path, straight: Path, fault: str
) -> None:
    run_dir = tmp_path / "run"
    env = {**os.environ, "RLVR_FAULT": fault}
    full = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", env=env, timeout=300)
    assert full.code == 1 and "No space left on device" in full.stderr and "--auto" in full.stderr
    assert "internal error" not in full.stderr
    assert status(run_dir)["state"] == "failed" and "No space" in status(run_dir)["reason"]
    assert "failed" in rlvr("status", run_dir).stdout
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", "--auto", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    assert steps_logged(run_dir) == [0, 1, 2, 3]
    assert same_final(run_dir, straight) and record_keys(run_dir) == record_keys(straight)


def test_a_sigterm_inside_the_checkpoint_writer_pauses_the_run_and_auto_goes_on(
    experiment: Path, tmp_path: Path, straight: Path
) -> None:
    """The signal's handler runs in torch's zip writer's write callback; the writer turns what it
    raises into `unexpected pos`, which must not come out as a bug in rlvr."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "RLVR_FAULT": "term_in_checkpoint@3"}
    term = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", env=env, timeout=300)
    assert term.code == 143 and "interrupted by SIGTERM" in term.stderr, term.stderr[-2000:]
    assert "internal error" not in term.stderr and "unexpected pos" not in term.stderr
    assert status(run_dir)["state"] == "paused" and "SIGTERM" in status(run_dir)["reason"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-1", "step-2"]  # step 3's unpublished
    done = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", "--auto", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    assert steps_logged(run_dir) == [0, 1, 2, 3]
    assert same_final(run_dir, straight) and record_keys(run_dir) == record_keys(straight)


def test_two_trainers_never_share_a_run_folder(experiment: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with (run_dir / ".lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        busy = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "1", timeout=300)
    assert busy.code == 2 and "another rlvr train is running" in busy.stderr


def test_a_verifier_that_prints_never_reaches_stdout(experiment: Path, tmp_path: Path) -> None:
    verifier = experiment / "verifier.py"
    verifier.write_text(
        verifier.read_text().replace(
            "    text = response.strip()", "    print('noise ' * 50)\n    text = response.strip()"
        )
    )
    audited = rlvr("audit", "verifier", experiment / CONTRACT, "--format", "json", timeout=300)
    assert audited.code == 0 and json.loads(audited.stdout)["disagreements"] == 0  # stdout is the report only
    assert "noise" in audited.stderr
    trained = rlvr("train", experiment / CONTRACT, "--run-dir", tmp_path / "run", "--max-steps", "1", timeout=300)
    assert trained.code == 0 and "noise" not in trained.stdout


def test_audits_and_report_survive_a_verifier_that_always_fails(experiment: Path, tmp_path: Path) -> None:
    verifier = experiment / "verifier.py"
    verifier.write_text(verifier.read_text().replace("    text = response.strip()", "    raise RuntimeError('down')"))
    edit(experiment, "holdout_every: 50", "holdout_every: 1")  # holdout rows whose train reward is undefined
    run_dir = tmp_path / "run"
    trained = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "2", timeout=300)
    assert trained.code == 5 and "verifier-broken" in trained.stderr, trained.stderr[-2000:]  # the rule stops it
    audited = rlvr("audit", "rollouts", run_dir)
    assert audited.code == 0 and "verifier errors" in audited.stdout, audited.stderr[-2000:]
    assert rlvr("audit", "rollouts", run_dir, "--format", "json").code == 0
    report = rlvr("report", run_dir, "--out", tmp_path / "r.html")
    assert report.code == 0 and (tmp_path / "r.html").is_file(), report.stderr[-2000:]


BLOCK = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "transformers", "safetensors"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Block())
"""


def test_without_the_train_extra_commands_say_what_to_install(quick: Path, straight: Path, tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    train = rlvr("train", quick / CONTRACT, "--run-dir", tmp_path / "run", env=env)
    assert train.code == 2 and "pip install 'rlvr-cli[train]'" in train.stderr and "internal error" not in train.stderr
    render = rlvr("render", quick / CONTRACT, "-c", ROOT / "contracts" / "arith" / "conversations.jsonl", env=env)
    assert render.code == 2 and "rlvr-cli[train]" in render.stderr
    shown = rlvr("status", straight, env=env)  # reading a run folder needs no torch
    assert shown.code == 0 and "finished" in shown.stdout
    report = rlvr("report", straight, "--out", tmp_path / "r.html", env=env)
    assert report.code == 0, report.stderr[-2000:]


def test_an_edited_metrics_log_is_caught_on_resume(experiment: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "2", timeout=300).code == 0
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["reward_mean"] = 0.99  # a prettier curve
    (run_dir / "metrics.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    resumed = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", "--resume", timeout=300)
    assert resumed.code == 1 and "metrics.jsonl up to checkpoint step-2" in resumed.stderr


def test_a_verifier_that_allocates_too_much_is_a_verifier_error(experiment: Path) -> None:
    verifier = experiment / "verifier.py"
    hog = "    if task['id'] == HOG:\n        block = bytearray(4 << 30)\n    text = response.strip()"
    text = verifier.read_text().replace("    text = response.strip()", hog)
    first = json.loads((experiment / "data" / "train.jsonl").read_text().splitlines()[0])["id"]
    verifier.write_text(
        text.replace("from rlvr_cli.env import Verdict", f"from rlvr_cli.env import Verdict\n\nHOG = {first!r}")
    )
    candidates = experiment / "hog.yaml"
    candidates.write_text(
        f"candidates:\n  - {{name: hog, task: {json.dumps(first)}, kind: correct, expected: accept, response: '1'}}\n"
    )
    audited = rlvr("audit", "verifier", experiment / CONTRACT, "--candidates", candidates, "--format", "json")
    outcomes = json.loads(audited.stdout)["outcomes"]
    hogged = [o for o in outcomes if o["task"] == first and o["name"] == "hog"]
    assert audited.code == 1 and hogged, audited.stderr[-2000:]  # a false reject, with its reason
    assert hogged[0]["verdict"]["status"] == "verifier_error" and "MemoryError" in hogged[0]["verdict"]["detail"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("    import os\n    os._exit(3)", "exited with code 3"),
        ("    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)", "killed by signal SIGKILL"),
        ("    return {'status': 'ok', 'reward': True, 'components': {'correct': 1.0}}", "finite reward, got True"),
    ],
)
def test_a_dying_or_lying_verifier_is_named_in_its_verdict(experiment: Path, body: str, words: str) -> None:
    verifier = experiment / "verifier.py"
    verifier.write_text(
        verifier.read_text().replace("    text = response.strip()", body + "\n    text = response.strip()")
    )
    audited = rlvr("audit", "verifier", experiment / CONTRACT, "--format", "json", "--tasks", "1", timeout=120)
    details = [o["verdict"]["detail"] or "" for o in json.loads(audited.stdout)["outcomes"]]
    assert audited.code == 1 and any(words in d for d in details), details


def test_children_of_the_verifier_die_with_it(experiment: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    child = "subprocess.Popen(['sleep', '300']).pid"
    spawn = f"    import subprocess\n    open({str(pids)!r}, 'a').write(str({child}) + '\\n')"
    verifier = experiment / "verifier.py"
    verifier.write_text(
        verifier.read_text().replace("    text = response.strip()", spawn + "\n    text = response.strip()")
    )
    assert rlvr("audit", "verifier", experiment / CONTRACT, "--tasks", "1", timeout=120).code == 0
    alive = []
    for pid in map(int, pids.read_text().split()):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            continue
        if state != "Z":  # a zombie is dead, only not yet reaped
            alive.append(pid)
    assert pids.read_text() and alive == []


INJECT = """
    import gc, multiprocessing.connection
    for conn in [o for o in gc.get_objects() if isinstance(o, multiprocessing.connection.Connection)]:
        conn.send(("ok", ("ok", 1.2, {"correct": 1.0, "format": 1.0}, None)))  # a forged 'correct'
"""


def test_a_verifier_writing_into_the_pipe_cannot_shift_verdicts(experiment: Path) -> None:
    verifier = experiment / "verifier.py"
    verifier.write_text(
        verifier.read_text().replace("    text = response.strip()", INJECT + "    text = response.strip()")
    )
    audited = rlvr("audit", "verifier", experiment / CONTRACT, "--format", "json", "--tasks", "2", timeout=120)
    outcomes = json.loads(audited.stdout)["outcomes"]
    forged = [o for o in outcomes if o["expected"] == "reject" and o["got"] == "accept"]
    assert forged == []  # no wrong answer was accepted on a forged verdict
    assert any("out of order" in (o["verdict"]["detail"] or "") for o in outcomes)


def test_any_finite_reward_is_the_verifiers_word_and_recorded_as_such(experiment: Path, tmp_path: Path) -> None:
    """Pinned limit (docs/security.md): rlvr does not bound component values; a component of 7 is
    used as 7, and the verifier's own `reward` is recorded beside the contract's weighted sum."""
    verifier = experiment / "verifier.py"
    seven = "    return {'status': 'ok', 'reward': 7.0, 'components': {'correct': 7.0, 'format': 1.0}}\n"
    verifier.write_text(
        verifier.read_text().replace("    text = response.strip()", seven + "    text = response.strip()")
    )
    run_dir = tmp_path / "run"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "1", timeout=300).code == 0
    import pyarrow.parquet as pq

    manifest = json.loads((run_dir / "records" / "manifest.json").read_text())["shards"]
    rows = pq.read_table(run_dir / "records" / manifest[0]["file"]).to_pylist()
    assert {(r["reward"], r["verifier_reward"]) for r in rows} == {(7.0 * 1.0 + 0.2 * 1.0, 7.0)}


def test_checkpoint_include_is_what_a_checkpoint_holds(experiment: Path, tmp_path: Path) -> None:
    text = (experiment / CONTRACT).read_text()
    text = text.replace(
        "include: [model, optimizer, scheduler, rng, sampler, data_cursor, rollout_cursor]",
        "include: [model, scheduler, rng, sampler, data_cursor, rollout_cursor]",
    )
    (experiment / CONTRACT).write_text(
        text + "waivers:\n  - {rule: RLV701, reason: optimizer state too large to keep}\n"
    )
    run_dir = tmp_path / "run"
    assert rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "2", timeout=300).code == 0
    blob = torch.load(run_dir / "checkpoints" / "step-2" / "state.pt", weights_only=True)
    assert sorted(blob) == ["rng", "scheduler"]  # no optimizer state was written
    refused = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", "--resume", timeout=300)
    assert refused.code == 1 and "lacks optimizer" in refused.stderr and "--force" in refused.stderr
    forced = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "3", "--resume", "--force")
    assert forced.code == 0 and status(run_dir)["step"] == 3, forced.stderr[-2000:]


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _can_mount() -> str | None:
    import shutil

    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "needs root and unshare to mount a small tmpfs (a real full disk)"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True)
    return None if probe.returncode == 0 else f"cannot mount a tmpfs here: {probe.stderr.decode()[:200]}"


def test_a_real_full_disk_at_a_checkpoint_says_enospc_and_resumes_exactly(
    experiment: Path, tmp_path: Path, straight: Path
) -> None:
    """torch's zip writer turns ENOSPC into `unexpected pos`: the run must still say what happened."""
    why = _can_mount()
    if why:
        pytest.skip(why)
    checkpoint = _size(straight / "checkpoints" / "step-4")
    before = _size(straight) - _size(straight / "checkpoints") - _size(straight / "final")
    size_kib = (before + checkpoint // 2) // 1024 + 64  # everything before the first checkpoint, half of it
    kept = tmp_path / "kept"
    script = (
        f"mount -t tmpfs -o size={size_kib}k tmpfs {tmp_path / 'disk'} && "
        f"{sys.executable} -m rlvr_cli train {experiment / CONTRACT} --run-dir {tmp_path / 'disk' / 'run'} "
        f"--max-steps 4 2> {tmp_path / 'stderr'}; echo $? > {tmp_path / 'code'}; "
        f"cp -a {tmp_path / 'disk' / 'run'} {kept}"
    )
    (tmp_path / "disk").mkdir()
    subprocess.run(["unshare", "-m", "sh", "-c", script], check=True, timeout=600)
    stderr = (tmp_path / "stderr").read_text()
    assert (tmp_path / "code").read_text().strip() == "1", stderr[-2000:]
    assert "No space left on device" in stderr and "unexpected pos" not in stderr and "internal error" not in stderr
    assert status(kept)["state"] == "failed" and "No space left" in status(kept)["reason"]
    assert not [p for p in kept.rglob("*") if p.name.endswith(".tmp")], "a .tmp left behind"
    done = rlvr("train", experiment / CONTRACT, "--run-dir", kept, "--max-steps", "4", "--auto", timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    assert steps_logged(kept) == [0, 1, 2, 3] and same_final(kept, straight)
    assert record_keys(kept) == record_keys(straight)


def _rechecksum(checkpoint: Path) -> None:
    """Rewrite the COMPLETE marker's checksums, as someone handing over a foreign checkpoint would."""
    sums = json.loads((checkpoint / "COMPLETE").read_text())
    sums["files"] = {name: sha256_file(checkpoint / name) for name in sums["files"]}
    (checkpoint / "COMPLETE").write_text(json.dumps(sums))


@pytest.fixture(scope="module")
def one_step(quick: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1-step run with its checkpoint, trained once: each test damages a copy of it."""
    run_dir = tmp_path_factory.mktemp("one-step") / "run"
    assert rlvr("train", quick / CONTRACT, "--run-dir", run_dir, "--max-steps", "1", timeout=300).code == 0
    return run_dir


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("shapes", "is not of this policy"),
        ("nan", "hold(s) NaN or infinity"),
        ("link", "is a symbolic link"),
        ("folder-link", "is a symbolic link"),
    ],
)
def test_a_foreign_or_poisoned_checkpoint_is_refused_with_its_reason(
    quick: Path, one_step: Path, tmp_path: Path, damage: str, said: str
) -> None:
    import shutil

    from safetensors.torch import save_file

    run_dir = shutil.copytree(one_step, tmp_path / "run")
    checkpoint = run_dir / "checkpoints" / "step-1"
    weights_file = checkpoint / "model" / "model.safetensors"
    weights = load_file(weights_file)
    name = sorted(k for k in weights if weights[k].dim() == 2)[0]
    if damage == "shapes":
        weights[name] = torch.zeros(weights[name].shape[0] + 1, weights[name].shape[1])
        save_file(weights, weights_file)
        _rechecksum(checkpoint)
    elif damage == "nan":
        weights[name] = weights[name].clone()
        weights[name][0, 0] = float("nan")
        save_file(weights, weights_file)
        _rechecksum(checkpoint)
    elif damage == "link":
        outside = tmp_path / "state.pt"
        (checkpoint / "state.pt").rename(outside)
        (checkpoint / "state.pt").symlink_to(outside)
    else:
        moved = tmp_path / "elsewhere"
        checkpoint.rename(moved)
        checkpoint.symlink_to(moved)
    resumed = rlvr("train", quick / CONTRACT, "--run-dir", run_dir, "--max-steps", "2", "--resume", timeout=300)
    assert resumed.code == 1 and said in resumed.stderr, resumed.stderr[-2000:]
    assert "Traceback" not in resumed.stderr and "internal error" not in resumed.stderr


def test_a_policy_with_nan_weights_aborts_at_sampling_with_the_reason(experiment: Path, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    model = experiment / "model" / "model.safetensors"
    weights = load_file(model)
    name = next(k for k in sorted(weights) if "norm" in k)
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, model, metadata={"format": "pt"})
    run_dir = tmp_path / "run"
    run = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "2", timeout=300)
    assert run.code == 5 and "logits are not finite" in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert status(run_dir)["state"] == "aborted" and "logits are not finite" in status(run_dir)["reason"]


def test_updates_skipped_in_a_row_stop_the_run_even_without_a_nan_rule(experiment: Path, tmp_path: Path) -> None:
    """A finite reward of 1.7e308 overflows the advantages: every update is skipped. With a
    nonfinite_count rule of a long window the run would go on skipping; it stops on its own after three."""
    edit(
        experiment,
        'metric: nonfinite_count, when: "> 0", window: 1,',
        'metric: nonfinite_count, when: "> 0", window: 10,',
    )
    verifier = experiment / "verifier.py"
    huge = 'return Verdict("ok", 1.7e308, {"correct": 1.7e308, "format": 1.0})'
    plain = 'return Verdict("ok", correct, {"correct": correct, "format": 1.0})'
    verifier.write_text(verifier.read_text().replace(plain, huge))
    assert huge in verifier.read_text()
    run_dir = tmp_path / "run"
    run = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "12", timeout=300)
    assert run.code == 5 and "3 updates in a row were skipped" in run.stderr, run.stderr[-2000:]
    skipped = [json.loads(line)["nonfinite_count"] > 0 for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert skipped[-3:] == [True] * 3 and skipped[:-3][-1:] != [True]  # stopped at the first three in a row
    assert status(run_dir)["state"] == "aborted" and len(skipped) < 12
    assert "abort after 3 updates in a row" in json.dumps(json.loads((run_dir / "plan.json").read_text()))


def test_auto_on_a_finished_run_does_nothing_and_status_follows_the_steps(experiment: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlvr_cli",
            "train",
            str(experiment / CONTRACT),
            "--run-dir",
            str(run_dir),
            "--max-steps",
            "3",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = set()
    while proc.poll() is None:
        try:
            now = status(run_dir)
        except (OSError, ValueError):
            continue
        if now["state"] == "running":
            seen.add(now["step"])
        time.sleep(0.02)
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    assert {1, 2} & seen, f"status.json never showed a step past 0 while running: {seen}"
    again = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--auto", timeout=300)
    assert again.code == 0 and "already finished at step 3; nothing to do" in again.stderr, again.stderr[-2000:]
    assert steps_logged(run_dir) == [0, 1, 2] and status(run_dir)["state"] == "finished"
    longer = rlvr("train", experiment / CONTRACT, "--run-dir", run_dir, "--auto", "--max-steps", "4", timeout=300)
    assert longer.code == 0 and steps_logged(run_dir) == [0, 1, 2, 3]  # an explicit longer run goes on


ENDING = """
import os, signal, time
from rlvr_cli.commands.train import signals_unwind
from rlvr_cli.errors import Interrupted, ending
with signals_unwind():
    try:
        os.kill(os.getpid(), signal.SIGTERM); time.sleep(1)
    except Interrupted:
        print("unwound", flush=True)
    ending()  # the run now ends on its own: writing its status, saying why
    os.kill(os.getpid(), signal.SIGTERM); time.sleep(1)
    print("absorbed", flush=True)
    os.kill(os.getpid(), signal.SIGTERM); time.sleep(1)
    print("a second one is not absorbed", flush=True)
"""


def test_a_run_that_is_ending_absorbs_one_sigterm_and_a_second_ends_it() -> None:
    """torchrun sends SIGTERM to every rank once one has died, while the others write why in
    status.json: that SIGTERM must not leave the status saying "running" or the reason unsaid
    (rlvr_cli/errors.py `ending`); a second one still ends a shutdown that hangs."""
    done = subprocess.run([sys.executable, "-c", ENDING], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stdout.split() == ["unwound", "absorbed"], done.stdout + done.stderr
    assert done.returncode == -signal.SIGTERM
