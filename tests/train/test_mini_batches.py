"""`hyperparameters.mini_batches`: a pass over a step's batch takes one optimizer step per
mini-batch (group j in mini-batch j mod mini_batches), each aggregated over its own tokens, with
the old log-probs of the weights that sampled. The same update, written out by hand: one
optimizer step on the even groups, then one on the odd groups with the old log-probs computed
before the first. 2 processes = 1 process with mini-batches: tests/train/test_distributed.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import copy_experiment, rlvr

CONTRACT = "experiment.rlvr.yaml"


def _setup(folder: Path, mini_batches: int):  # type: ignore[no-untyped-def]
    from rlvr_cli.contract.load import load
    from rlvr_cli.train.faults import Fault
    from rlvr_cli.train.setup import build

    text = (folder / CONTRACT).read_text().replace("max_policy_lag: 0", "max_policy_lag: 1")
    text = text.replace("  updates_per_batch: 1\n", f"  updates_per_batch: 1\n  mini_batches: {mini_batches}\n")
    (folder / CONTRACT).write_text(text.replace("clip: {low: 0.2, high: 0.2}", "clip: {low: 0.05, high: 0.05}"))
    return build(load(folder / CONTRACT), folder, Fault.none())


def _samples(vocab: int, groups: int = 8, size: int = 8) -> list:
    from rlvr_cli.env.sample import Sample

    g = torch.Generator().manual_seed(3)
    out = []
    for group in range(groups):
        prompt = torch.randint(10, vocab, (5,), generator=g).tolist()
        for index in range(size):
            length = int(torch.randint(1, 4, (1,), generator=g))  # answers of unequal lengths: token counts matter
            response = torch.randint(10, vocab, (length,), generator=g).tolist()
            out.append(
                Sample(
                    task={},
                    group=group,
                    index=index,
                    prompt_ids=prompt,
                    response_ids=response,
                    mask=[1] * length,
                    finish="stop",
                    seed=group * size + index,
                )
            )
    return out


def _trained(setup, samples: list, adv: torch.Tensor, old: torch.Tensor | None = None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from rlvr_cli.train import update
    from rlvr_cli.train.state import TrainState

    fwd = update.Forward.of(setup, samples)
    ref = update.reference_logprobs(setup, fwd)
    state = TrainState.fresh(8, 0)
    metrics = update.optimizer_passes(setup, state, samples, adv, fwd, old, ref)
    return {**metrics, "optimizer_steps": state.optimizer_steps}


def test_each_mini_batch_is_an_optimizer_step_on_its_own_tokens(single_turn: Path, tmp_path: Path) -> None:
    from rlvr_cli.train import update

    two = _setup(copy_experiment(single_turn, tmp_path / "two"), 2)
    samples = _samples(len(two.renderer.tokenizer))
    adv = torch.linspace(-1.5, 1.5, len(samples))[
        torch.randperm(len(samples), generator=torch.Generator().manual_seed(5))
    ]
    metrics = _trained(two, samples, adv)
    assert metrics["optimizer_steps"] == 2 and metrics["policy_lag"] == 1.0  # the odd groups trained one step late

    by_hand = _setup(copy_experiment(single_turn, tmp_path / "by-hand"), 1)
    fwd = update.Forward.of(by_hand, samples)
    old = fwd.logprobs(by_hand.policy, 1.0)  # the weights that sampled, before either step
    ref = update.reference_logprobs(by_hand, fwd)
    from rlvr_cli.train.state import TrainState

    state = TrainState.fresh(8, 0)
    for j in (0, 1):
        rows = [k for k, s in enumerate(samples) if s.group % 2 == j]
        part = [samples[k] for k in rows]
        sub = update.Forward.of(by_hand, part)
        width = sub.batch.response_mask.shape[1]
        index = torch.tensor(rows)
        update.optimizer_passes(
            by_hand, state, part, adv[index], sub, old[index][:, :width], None if ref is None else ref[index][:, :width]
        )
    for (name, a), b in zip(two.policy.named_parameters(), by_hand.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)

    whole = _setup(copy_experiment(single_turn, tmp_path / "one"), 1)  # one step on the whole batch: not the same
    assert _trained(whole, samples, adv)["optimizer_steps"] == 1
    moved = [
        float((a - b).detach().abs().max())
        for a, b in zip(two.policy.parameters(), whole.policy.parameters(), strict=True)
    ]
    assert max(moved) > 1e-4


def test_a_mini_batch_no_group_falls_in_takes_no_step(single_turn: Path, tmp_path: Path) -> None:
    """Dynamic sampling may keep fewer groups than there are mini-batches: an empty mini-batch
    is no optimizer step (AdamW's moments would move the weights on a zero gradient)."""
    setup = _setup(copy_experiment(single_turn, tmp_path / "exp"), 2)
    samples = [s for s in _samples(len(setup.renderer.tokenizer)) if s.group == 5]  # one group kept
    before = [p.detach().clone() for p in setup.policy.parameters()]
    metrics = _trained(setup, samples, torch.linspace(-1.0, 1.0, len(samples)))
    assert metrics["optimizer_steps"] == 1 and metrics["policy_lag"] == 0.0
    assert any(not torch.equal(a, b) for a, b in zip(before, setup.policy.parameters(), strict=True))


@pytest.mark.parametrize(
    ("lines", "code"),
    [
        ("  mini_batches: 3\n", "RLV302"),  # 8 groups do not split in 3
        ("  mini_batches: 8\n", "RLV302"),  # one group (8 sequences) a mini-batch, micro-batches of 16
        ("  mini_batches: 2\n", "RLV303"),  # the odd groups train one step late: max_policy_lag 0
        ("  mini_batches: 2\n  sample_ahead: true\n", "RLV303"),  # and sampling ahead adds one step more
    ],
)
def test_mini_batches_that_do_not_divide_the_batch_or_outrun_the_lag_are_refused(
    single_turn: Path, tmp_path: Path, lines: str, code: str
) -> None:
    folder = copy_experiment(single_turn, tmp_path / "exp")
    text = (folder / CONTRACT).read_text().replace("  updates_per_batch: 1\n", f"  updates_per_batch: 1\n{lines}")
    (folder / CONTRACT).write_text(text)
    done = rlvr("validate", folder / CONTRACT)
    assert done.code == 1 and code in done.stdout + done.stderr, done.stdout + done.stderr
    (folder / CONTRACT).write_text(
        text.replace("max_policy_lag: 0", "max_policy_lag: 7")
        .replace("  mini_batches: 3\n", "  mini_batches: 4\n")
        .replace("micro_batch_sequences: 16", "micro_batch_sequences: 8")
        .replace("  sample_ahead: true\n", "")  # (sampling ahead also needs objective.ratio stated)
    )
    assert rlvr("validate", folder / CONTRACT).code == 0  # divisible, within the lag: valid
