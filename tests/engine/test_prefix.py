"""The prefix forward (each distinct prompt once, its answers after it in one row, through the
model's own forward) against the model's own forward on one row per answer: the same log-probs,
entropies and gradients."""

from __future__ import annotations

import pytest
import torch

from rlvr_cli.engine.forward import make_batch, token_logprobs
from rlvr_cli.engine.prefix import pays, prefix_logprobs, why_not_prefix
from tests.engine.test_sampler import family
from tests.engine.test_shared import assert_same_as_own_forward, batch


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "mistral", "gpt2"])
def test_log_probs_entropies_and_gradients_are_the_models_own(name: str, temperature: float) -> None:
    model = family(name)  # in eval mode, as the trainer runs it (GPT-2's dropout is not 0)
    assert why_not_prefix(model) is None
    assert_same_as_own_forward(model, prefix_logprobs, temperature)


def test_a_model_with_a_sliding_window_is_not_taken() -> None:
    import transformers as t

    from tests.engine.test_sampler import COMMON

    windowed = t.MistralForCausalLM(t.MistralConfig(**COMMON, sliding_window=4)).eval()
    assert "sliding-window" in why_not_prefix(windowed)
    b = batch()
    own, _ = token_logprobs(windowed, b, 1.0)
    forced, _ = prefix_logprobs(windowed, b, 1.0)
    real = b.response_mask.bool()
    assert not torch.allclose(forced[real], own[real], atol=1e-3)  # why it is refused: the window is lost


def test_it_pays_for_long_shared_prompts_and_not_for_long_answers_or_distinct_prompts() -> None:
    prompt = list(range(5, 69))  # 64 tokens
    short = make_batch([prompt] * 8, [[70, 71]] * 8, [[1, 1]] * 8, 0)
    assert pays(short)  # one row of 64 + 16 tokens instead of 8 rows of 66
    long = make_batch([prompt[:4]] * 8, [list(range(5, 300))] * 8, [[1] * 295] * 8, 0)
    assert not pays(long)  # one row of 2,364 tokens costs more attention than 8 rows of 299
    alone = make_batch([[5, 6], [7, 8], [9, 10]], [[1], [1], [1]], [[1], [1], [1]], 0)
    assert not pays(alone)
