"""Model FLOPs (train/flops.py) by hand on a tiny model, and MFU in a run's metrics."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlvr_cli.train.flops import Shape, groups, measured_peak, step_flops


@pytest.fixture(scope="module")
def tiny() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def test_the_parameters_that_multiply_leave_out_the_embedding_table_alone(tiny: torch.nn.Module) -> None:
    shape = Shape.of(tiny)
    total = sum(p.numel() for p in tiny.parameters())
    assert shape.multiplying == total - 50 * 32  # the lm head multiplies; the lookup table does not
    assert (shape.layers, shape.attention_width, shape.adapter) == (3, 32, 0)


def test_a_tied_head_counts_once(tiny: torch.nn.Module) -> None:
    from transformers import LlamaForCausalLM

    tied = LlamaForCausalLM(tiny.config.__class__(**{**tiny.config.to_dict(), "tie_word_embeddings": True}))
    assert Shape.of(tied).multiplying == sum(p.numel() for p in tied.parameters())  # the table is the head


def test_forward_flops_by_hand() -> None:
    shape = Shape(multiplying=1000, layers=2, attention_width=8)
    # 3 tokens at positions 5, 6, 7: 2·N each, and 4·L·d·p for attending to the p earlier positions
    assert shape.forward(5, 3) == 3 * 2000 + 4 * 2 * 8 * (5 + 6 + 7)
    # a group: the prompt once, each response after it
    assert shape.group(4, [2, 3]) == shape.forward(0, 4) + shape.forward(4, 2) + shape.forward(4, 3)
    assert shape.training(4, [2, 3]) == 3 * shape.group(4, [2, 3])
    lora = Shape(multiplying=1000, layers=2, attention_width=8, adapter=10)
    assert lora.training(4, [2, 3]) == 2 * lora.group(4, [2, 3]) + 2 * 10 * 9  # no weight gradient for the base


def test_a_step_counts_sampling_every_group_and_training_the_kept_ones() -> None:
    def sample(group: int, prompt: int, response: int, kept: bool) -> SimpleNamespace:
        return SimpleNamespace(round=0, group=group, prompt_ids=[0] * prompt, response_ids=[0] * response, kept=kept)

    generated = [sample(0, 4, 2, True), sample(0, 4, 3, True), sample(1, 6, 1, False), sample(1, 6, 1, False)]
    assert groups(generated) == [(4, [2, 3]), (6, [1, 1])]
    shape = Shape(multiplying=1000, layers=2, attention_width=8)
    trained = [s for s in generated if s.kept]
    want = shape.group(4, [2, 3]) + shape.group(6, [1, 1]) + 2 * shape.training(4, [2, 3]) + shape.group(4, [2, 3])
    assert step_flops(shape, generated, trained, passes=2, reference=True) == want
    assert step_flops(shape, generated, [], passes=2, reference=True) == shape.group(4, [2, 3]) + shape.group(6, [1, 1])
    # the entropy mask's threshold: one more forward of the trained groups at each pass
    masked = step_flops(shape, generated, trained, passes=2, reference=True, entropy_mask=True)
    assert masked == want + 2 * shape.group(4, [2, 3])


def test_the_measured_peak_is_a_plausible_rate() -> None:
    peak = measured_peak(torch.device("cpu"), torch.float32)
    assert 1e8 < peak < 1e14  # between 0.1 GFLOP/s and 100 TFLOP/s on any CPU


def test_the_peak_stops_growing_the_product_once_one_takes_long_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dtype the CPU multiplies slowly (fp16, bf16 without its kernels: ~1 GFLOP/s) is measured
    on a small product instead of four 1024² ones (12 s at the start of every run)."""
    from rlvr_cli.train import flops

    sizes: list[int] = []

    def product(device, dtype, n):  # type: ignore[no-untyped-def]
        sizes.append(n)
        return 2.0 * n**3 / (1e9 if dtype == torch.float16 else 1e11)  # 1 GFLOP/s, 100 GFLOP/s

    monkeypatch.setattr(flops, "_best_product", product)
    assert flops.measured_peak(torch.device("cpu"), torch.float16) == pytest.approx(1e9)
    assert sizes == [256]  # 34 ms: enough
    sizes.clear()
    assert flops.measured_peak(torch.device("cpu"), torch.float32) == pytest.approx(1e11)
    assert sizes == [256, 512]  # fast products grow to the CPU's quick size (the first run's calibration: 2048)


def test_a_child_session_is_counted_with_its_own_prompt() -> None:
    """An episode's later sessions (rollout/sessions.py) each have their own prompt: never the
    group's shared one, and never one another's."""
    from rlvr_cli.env.sample import Sample

    def session(index: int, number: int, prompt: int, response: int) -> Sample:
        return Sample(
            task={},
            group=0,
            index=index,
            prompt_ids=[0] * prompt,
            response_ids=[0] * response,
            mask=[1] * response,
            finish="stop",
            seed=0,
            session=number,
        )

    parts = [session(0, 0, 4, 2), session(1, 0, 4, 3), session(0, 1, 9, 5), session(1, 1, 7, 1)]
    assert groups(parts) == [(4, [2, 3]), (9, [5]), (7, [1])]


def test_the_plans_compute_line_counts_the_entropy_masks_forward_and_names_the_rejections() -> None:
    from rlvr_cli.train.flops import planned

    shape = Shape(multiplying=10**9, layers=8, attention_width=512)
    plain = planned(shape, 4, 8, 100, 200, passes=2, reference=False, kl_in_reward=False)
    masked = planned(shape, 4, 8, 100, 200, passes=2, reference=False, kl_in_reward=False, entropy_mask=True)
    one = shape.group(100, [200] * 8) * 4

    def total(line: str) -> float:
        return float(line.split("tokens): ")[1].split(" TFLOP")[0].replace(",", ""))

    assert total(masked) == pytest.approx(total(plain) + 2 * one / 1e12, rel=1e-2)
    assert "entropy mask's threshold" in masked and "entropy mask" not in plain
    rejecting = planned(shape, 4, 8, 100, 200, passes=2, reference=False, kl_in_reward=False, rejection=True)
    assert "for the rejection" in rejecting and "rejection" not in plain
