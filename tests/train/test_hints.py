"""Hint-assisted rollouts through the real `rlvr train` on the shipped hints example: hinted
subgroups carry the learning signal while unhinted ones are all zero; the hint is never
trained; the hinted share decays as declared; advantages follow `hints.advantage`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, edit, rlvr

CONTRACT = "hints-cpu.rlvr.yaml"


@pytest.fixture
def example(tmp_path: Path) -> Path:
    from rlvr_cli.toy.tiny import DIGITS, build_tiny

    shutil.copytree(ROOT / "contracts" / "spell", tmp_path / "spell", ignore=shutil.ignore_patterns("model"))
    build_tiny(tmp_path / "spell" / "model", "chatml", alphabet=DIGITS)
    shutil.copyfile(ROOT / "contracts" / CONTRACT, tmp_path / CONTRACT)
    return tmp_path


def train(folder: Path, steps: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    import pyarrow.parquet as pq

    run_dir = folder / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    done = rlvr("train", folder / CONTRACT, "--run-dir", run_dir, "--max-steps", str(steps), timeout=300)
    assert done.code == 0, done.stderr[-2000:]
    records = [
        row for shard in sorted((run_dir / "records").glob("*.parquet")) for row in pq.read_table(shard).to_pylist()
    ]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return records, metrics


@pytest.mark.slow
def test_hinted_groups_give_a_signal_where_unhinted_ones_are_all_zero(example: Path) -> None:
    from transformers import AutoTokenizer

    edit(example, "until_step: 100 ", "until_step: 24 ", CONTRACT)  # the whole decay within the test run
    records, metrics = train(example, 24)
    hinted = [r for r in records if r["hint"] is not None]
    plain = [r for r in records if r["hint"] is None]
    assert plain and all(r["reward"] == 0 for r in plain)  # three digits by chance: never here
    assert all(r["advantage"] == 0 for r in plain)  # subgroup advantages: no signal from all-zero
    won = [r for r in hinted if r["reward"] == 1]
    assert won and all(r["advantage"] > 0 for r in won)  # the hinted subgroup learns
    tokenizer = AutoTokenizer.from_pretrained(example / "spell" / "model")
    for r in hinted[:20]:  # the hint sits before the sampled tokens, outside what is trained
        assert tokenizer.decode(r["prompt_ids"][-2:]) == r["hint"] and len(r["loss_mask"]) == len(r["response_ids"])
    shares = [m["hint_share"] for m in metrics]
    assert shares[0] == 0.5 and shares == sorted(shares, reverse=True) and shares[-1] == 0.0
    assert all(m["reward_unhinted_mean"] in (0.0, None) for m in metrics)
    from rlvr_cli.metrics import METRICS

    assert {m.name for m in METRICS if m.needs == "hints"} <= set(metrics[0])
    audited = rlvr("audit", "rollouts", example / "run", "--format", "json")
    hints = audited.json()["hints"]
    assert audited.code == 0 and hints["used"] and hints["hinted_samples"] == len(hinted)
    assert hints["reward_unhinted"] == 0.0 and hints["reward_hinted"] > 0


@pytest.mark.slow
def test_group_advantages_compare_unhinted_samples_with_hinted_winners(example: Path) -> None:
    edit(example, "advantage: subgroup", "advantage: group", CONTRACT)
    records, _ = train(example, 12)
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["step"], r["group"]), []).append(r)
    mixed = [g for g in groups.values() if any(r["reward"] == 1 for r in g)]
    assert mixed and all(r["advantage"] < 0 for g in mixed for r in g if r["hint"] is None)


@pytest.mark.slow
def test_prompt_hints_are_written_into_the_user_message_as_the_format_says(example: Path) -> None:
    from transformers import AutoTokenizer

    edit(example, "placement: response_prefix ", 'placement: prompt\n    format: "{prompt} ss {hint}"\n   ', CONTRACT)
    records, _ = train(example, 2)
    tokenizer = AutoTokenizer.from_pretrained(example / "spell" / "model")
    hinted = [r for r in records if r["hint"] is not None]
    plain = [r for r in records if r["hint"] is None]
    assert hinted and plain
    for r in hinted[:8]:
        shown = tokenizer.decode(r["prompt_ids"])
        assert f"spell {r['prompt_id'][6:]} ss {r['hint']}" in shown  # the rewritten user message
    assert all(" ss " not in tokenizer.decode(r["prompt_ids"]) for r in plain[:8])
