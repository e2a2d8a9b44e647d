"""`length.packing` and `length.padding_side`: the update forward on packed rows, or padded on
the right, gives the same log-probs, entropies and gradients as the left-padded rectangle, and
such runs train alike."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from rlvr_cli.engine.forward import make_batch, token_logprobs
from rlvr_cli.engine.packed import PackedBatch, packed_logprobs
from tests.conftest import copy_experiment, edit, rlvr


@pytest.fixture(scope="module")
def model(tiny_chatml: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_chatml).eval()


def sequences(seed: int, n: int = 12) -> tuple[list, list, list]:
    rng = random.Random(seed)
    prompts = [[rng.randrange(5, 60) for _ in range(rng.randrange(3, 10))] for _ in range(n)]
    responses = [[rng.randrange(5, 60) for _ in range(rng.randrange(1, 25))] for _ in range(n)]
    masks = [[1] * (len(r) - 1) + [rng.randrange(2)] for r in responses]
    return prompts, responses, masks


def test_packed_rows_give_the_padded_numbers_and_gradients(model) -> None:
    prompts, responses, masks = sequences(0)
    batch = make_batch(prompts, responses, masks, 0)
    packed = PackedBatch.of(prompts, responses, masks, 0)
    assert len(packed.packs) < len(prompts)  # short sequences really share rows
    grads = []
    for compute in (
        lambda: token_logprobs(model, batch, 0.7, with_entropy=True),
        lambda: packed_logprobs(model, packed, 0.7, with_entropy=True),
    ):
        model.zero_grad()
        logp, entropy = compute()
        mask = batch.response_mask.bool()
        (logp[mask].sum() + 0.1 * entropy[mask].sum()).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        kept = (logp[mask].detach(), entropy[mask].detach())
        if len(grads) == 1:
            first = kept
    assert torch.allclose(first[0], kept[0], atol=1e-5) and torch.allclose(first[1], kept[1], atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*grads, strict=True))


@pytest.mark.slow  # trains or runs rlvr train: make test runs it, make test-fast does not
def test_packed_and_right_padded_runs_train_like_the_left_padded_one(single_turn: Path, tmp_path: Path) -> None:
    layouts = {
        "padded-left": "  padding_side: left\n",
        "packed": "  padding_side: left\n  packing: {enabled: true, isolate_episodes: true}\n",
        "padded-right": "  padding_side: right\n",
    }
    runs = {}
    for name, text in layouts.items():
        folder = copy_experiment(single_turn, tmp_path / f"exp-{name}")
        edit(folder, "  padding_side: left\n", text)
        run_dir = tmp_path / f"run-{name}"
        done = rlvr("train", folder / "experiment.rlvr.yaml", "--run-dir", run_dir, "--max-steps", "2", timeout=300)
        assert done.code == 0, done.stderr[-2000:]
        runs[name] = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        plan = json.loads((run_dir / "plan.json").read_text())
        assert plan["length"]["padding_side"] == ("right" if name == "padded-right" else "left")
    for name in ("packed", "padded-right"):
        for key in ("loss", "entropy", "kl", "grad_norm"):  # step 0: the same samples, the same update
            assert abs(runs["padded-left"][0][key] - runs[name][0][key]) < 1e-4, (name, key)
