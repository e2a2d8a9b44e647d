"""Unit tests of the pieces the end-to-end runs reach: the monitoring rules (`Condition`,
`Monitor`), the budget, the hint advantages and the record store — each in process, each with
the case that makes it fire or fail."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from rlvr_cli.contract.condition import Condition
from rlvr_cli.contract.operations import Rule


def rule(name: str, metric: str, when: str, window: int, action: str = "pause") -> Rule:
    return Rule(name=name, metric=metric, when=when, window=window, action=action, owner="oncall")


def test_a_condition_never_holds_on_a_missing_or_non_finite_value_except_nonfinite() -> None:
    above = Condition.parse("> 0.5")
    assert above.holds(0.6) and not above.holds(0.5) and not above.holds(math.nan) and not above.holds(None)
    assert not above.holds(True)  # a boolean is no number
    nonfinite = Condition.parse("nonfinite")
    assert nonfinite.holds(math.nan) and nonfinite.holds(math.inf) and nonfinite.holds(None)
    assert not nonfinite.holds(1.0)
    with pytest.raises(ValueError, match="bad condition"):
        Condition.parse("=> 1")


def test_a_rule_fires_after_its_window_abort_first_and_acknowledging_restarts_it() -> None:
    from rlvr_cli.train.monitor import Monitor

    contract = SimpleNamespace(
        monitoring=SimpleNamespace(rules=[rule("slow", "kl", "> 1", 2), rule("nan", "loss", "nonfinite", 1, "abort")])
    )
    monitor = Monitor(contract)  # type: ignore[arg-type]
    assert monitor.observe({"step": 0, "kl": 2.0, "loss": 0.1}) is None  # 1 of 2
    assert monitor.observe({"step": 1, "kl": 0.5, "loss": 0.1}) is None  # the streak breaks
    assert monitor.observe({"step": 2, "kl": 2.0, "loss": 0.1}) is None
    fired = monitor.observe({"step": 3, "kl": 3.0, "loss": math.nan})
    assert fired is not None and fired.name == "nan" and fired.action == "abort"  # abort before pause
    saved = monitor.state()
    again = Monitor(contract)  # type: ignore[arg-type]
    again.restore(saved)
    assert again.state() == saved
    again.acknowledge("slow")
    assert again.observe({"step": 4, "kl": 5.0, "loss": 0.1}) is None  # the window starts again
    assert again.observe({"step": 5, "kl": 5.0, "loss": 0.1}).name == "slow"  # type: ignore[union-attr]


def test_the_budget_stops_the_run_at_its_first_spent_limit() -> None:
    from rlvr_cli.train.state import Totals
    from rlvr_cli.train.stops import budget_spent

    budget = SimpleNamespace(max_rollouts=None, max_verifier_calls=10, max_tokens=100)
    run = SimpleNamespace(contract=SimpleNamespace(acceptance=SimpleNamespace(budget=budget)), state=None)
    run.state = SimpleNamespace(totals=Totals(rollouts=50, verifier_calls=9, tokens=99))
    assert budget_spent(run) is None  # type: ignore[arg-type]
    run.state.totals.tokens = 100
    assert budget_spent(run) == "acceptance.budget.max_tokens (100) reached after 100"  # type: ignore[arg-type]
    run.contract.acceptance.budget = None
    assert budget_spent(run) is None  # type: ignore[arg-type]


def test_subgroup_advantages_compare_hinted_samples_only_with_hinted_ones() -> None:
    from rlvr_cli.train.objective import group_advantages, hinted_advantages

    objective = SimpleNamespace(advantage=SimpleNamespace(baseline="group_mean", scale="none", std=None, epsilon=None))
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.float64)  # one group: two hinted, two not
    hinted = torch.tensor([True, True, False, False])
    whole = group_advantages(rewards, 4, objective)  # type: ignore[arg-type]
    assert torch.allclose(whole, torch.tensor([0.25, 0.25, -0.75, 0.25], dtype=torch.float64))
    split = hinted_advantages(rewards, hinted, 4, objective, subgroup=True)  # type: ignore[arg-type]
    assert torch.allclose(split, torch.tensor([0.0, 0.0, -0.5, 0.5], dtype=torch.float64))
    assert torch.equal(hinted_advantages(rewards, hinted, 4, objective, subgroup=False), whole)  # type: ignore[arg-type]


def row(step: int) -> Any:
    """A record row of `step` (the store's tests)."""
    from rlvr_cli.store.records import RecordRow

    values = {f: None for f in RecordRow.__dataclass_fields__}
    values.update(run="r", step=step, round=0, prompt_id="t", group=0, sample=0, session_id="s", policy_revision=0)
    values.update(prompt_ids=[1], response_ids=[2], loss_mask=[1], sampling="{}", seed=0, response_text="x")
    values.update(finish_reason="stop", advantage=0.0, kept=True, split="train", verify_seconds=0.0)
    return RecordRow(**values)


def test_the_record_store_writes_steps_in_order_and_a_failed_write_stops_what_follows(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from rlvr_cli.errors import RlvrError
    from rlvr_cli.store.records import RecordStore, read_manifest

    with RecordStore(tmp_path / "ok", shard_rows=10) as store:
        for step in range(3):
            store.append([row(step)], step)
        store.flush()
        assert store.last_step == 2
    assert read_manifest(tmp_path / "ok") and RecordStore(tmp_path / "ok", shard_rows=10).last_step == 2

    from rlvr_cli.store import records

    written: list[str] = []  # the manifest is not rewritten after every shard: at most once a second, and at flush
    real = records.atomic_write_bytes
    monkeypatch.setattr(
        records, "atomic_write_bytes", lambda path, data: (written.append(path.name), real(path, data))[1]
    )
    monkeypatch.setattr(records, "LIST_EVERY_S", 3600.0)  # steps gather until a shard is full
    with RecordStore(tmp_path / "many", shard_rows=10) as store:
        for step in range(60):
            store.append([row(step)], step)
        store.append([row(60)] * 25, 60)  # a step of more rows than a shard holds spans shards
        assert store.last_step == 60 and store.cursor == 10  # flushed: every shard listed
    listed = [(s["step"], s["last_step"], s["rows"]) for s in read_manifest(tmp_path / "many")]
    # the first step at once; then ten steps a shard; step 60 with the nine before it and in three more
    assert listed == [
        (0, 0, 1),
        *((s, s + 9, 10) for s in range(1, 51, 10)),
        (51, 60, 10),
        (60, 60, 10),
        (60, 60, 10),
        (60, 60, 4),
    ]
    assert written.count("manifest.json") == 2  # the first shard's listing, then the flush's
    rows_read = records.read_records(tmp_path / "many").to_pylist()
    assert [r["step"] for r in rows_read] == sorted(r["step"] for r in rows_read) and len(rows_read) == 85

    monkeypatch.setattr(records, "LIST_EVERY_S", 0.0)  # steps slower than it: a shard a step, written at once
    with RecordStore(tmp_path / "slow steps", shard_rows=10) as store:
        for step in range(3):
            store.append([row(step)] * 2, step)
            store._collect(wait=True)  # nothing left gathered: the writer had the step at once
            assert [s["last_step"] for s in store.shards] == list(range(step + 1))
    monkeypatch.setattr(records, "LIST_EVERY_S", 1.0)

    def full(step: int) -> None:
        if step == 1:
            raise OSError(errno.ENOSPC, "No space left on device")

    broken = RecordStore(tmp_path / "full", shard_rows=10, before_write=full)
    broken.append([row(0)], 0)
    broken.append([row(1)], 1)
    with pytest.raises(OSError):
        broken.flush()
    with pytest.raises((OSError, RlvrError)):
        broken.append([row(2)], 2)
        broken.flush()
    with contextlib.suppress(OSError, RlvrError):
        broken.close()
    assert RecordStore(tmp_path / "full", shard_rows=10).last_step == 0  # a prefix of the steps, nothing after

    # a signal raised in the main thread while it waits for a write (SIGTERM just as a checkpoint's
    # flush began): closing the store still waits for that write and lists it (the writer thread
    # lists at most once a second, so without the wait the shard stayed written and unlisted)
    class Stop(BaseException):
        pass

    def interrupt(*_: Any) -> None:
        raise Stop

    slow = RecordStore(tmp_path / "slow", shard_rows=10, before_write=lambda step: time.sleep(0.5 * step))
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        slow.append([row(0)], 0)
        slow.flush()  # listed just now
        slow.append([row(1)], 1)
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(Stop):
            slow.flush()
        slow.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert [s["step"] for s in read_manifest(tmp_path / "slow")] == [0, 1]
    assert RecordStore(tmp_path / "slow", shard_rows=10).last_step == 1  # the shard kept, not an orphan


def test_a_run_that_goes_less_far_than_an_earlier_attempt_cuts_the_shard_across_its_end(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from rlvr_cli.files import sha256_bytes
    from rlvr_cli.store import records
    from rlvr_cli.store.record_checks import verify_manifest
    from rlvr_cli.store.records import RecordStore, read_manifest, shards_sha256

    monkeypatch.setattr(records, "LIST_EVERY_S", 3600.0)
    with RecordStore(tmp_path, shard_rows=100) as store:
        for step in range(10):
            store.append([row(step)] * 2, step)
    assert [(s["step"], s["last_step"]) for s in read_manifest(tmp_path)] == [(0, 0), (1, 9)]
    store = RecordStore(tmp_path, shard_rows=100)
    store.keep_before(5)
    assert [(s["step"], s["last_step"], s["rows"]) for s in read_manifest(tmp_path)] == [(0, 0, 2), (1, 4, 8)]
    assert store.last_step == 4 and verify_manifest(tmp_path) == []  # the old shard's file is gone
    assert [r["step"] for r in records.read_records(tmp_path).to_pylist()] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    store.append([row(5)], 5)
    store.close()
    assert [(s["step"], s["last_step"]) for s in read_manifest(tmp_path)] == [(0, 0), (1, 4), (5, 5)]

    # a checkpoint of a run written when every shard held one step pinned its entries without
    # `last_step`; the pin reads the same, and a changed `last_step` is a changed entry
    old = [{"file": "shard-000000.parquet", "rows": 2, "sha256": "ab", "step": 0}]
    assert shards_sha256(old) == sha256_bytes(json.dumps(old, sort_keys=True).encode())
    assert shards_sha256([{**old[0], "last_step": 0}]) != shards_sha256([{**old[0], "last_step": 1}])


def test_status_on_a_full_disk_is_written_in_place_and_leaves_no_tmp(tmp_path: Path, monkeypatch: Any) -> None:
    import json

    from rlvr_cli.store import run as run_module
    from rlvr_cli.store.run import RunFolder, Status

    folder = RunFolder(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    folder.write_status(Status("running", step=11, max_steps=100))

    def full(path: Path, text: str, durable: bool = True) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_module, "atomic_write_text", full)
    folder.write_status(Status("failed", step=11, reason="No space left on device " + "x" * 500, next="free space"))
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["state"] == "failed" and status["step"] == 11 and status["reason"].startswith("No space left")
    assert not list(tmp_path.glob("*.tmp"))


def test_a_failed_atomic_write_leaves_the_old_file_and_no_tmp(tmp_path: Path, monkeypatch: Any) -> None:
    import os

    from rlvr_cli.files import atomic_write_text

    target = tmp_path / "f.json"
    atomic_write_text(target, "old")

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    try:
        atomic_write_text(target, "new")
    except OSError as exc:
        assert exc.errno == 28
    assert target.read_text() == "old" and not (tmp_path / "f.json.tmp").exists()


@pytest.mark.parametrize("ends", ["returns", "raises"])
def test_the_heap_frozen_for_the_steps_is_collectable_again_however_they_end(ends: str) -> None:
    import gc

    from rlvr_cli.train.loop import _steady_heap

    with contextlib.suppress(RuntimeError), _steady_heap():
        assert gc.get_freeze_count() > 0  # what was alive before the steps is out of the generations
        if ends == "raises":
            raise RuntimeError("a step failed")
    assert gc.get_freeze_count() == 0  # collectable again, for the process that goes on
