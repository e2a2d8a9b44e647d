"""The update's shared-prompt forward against the model's own: the same log-probs, entropies
and gradients on every supported family, with groups of rows sharing ragged prompts and
responses of different lengths."""

from __future__ import annotations

import pytest
import torch

from rlvr_cli.engine.forward import make_batch, token_logprobs
from rlvr_cli.engine.shared import distinct_prompts, shared_prompt_logprobs, why_not_shared
from tests.engine.test_sampler import family

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]
RESPONSES = [[20, 21, 22, 3], [23], [24, 25, 26, 27, 28], [29, 30], [31, 32, 33, 34, 35, 36], [37, 3]]


def batch():
    prompts = [PROMPTS[i % 3] for i in range(len(RESPONSES))]  # rows 0/3, 1/4, 2/5 share a prompt
    masks = [[1] * len(r) for r in RESPONSES]
    return make_batch(prompts, RESPONSES, masks, 0)


def test_rows_that_share_a_prompt_are_found() -> None:
    first, owner = distinct_prompts(batch())
    assert len(first) == 3 and owner.tolist()[:3] == owner.tolist()[3:]
    assert sorted(first.tolist()) == [0, 1, 2]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "mistral"])
def test_log_probs_entropies_and_gradients_are_the_models_own(name: str, temperature: float) -> None:
    model = family(name).train()
    assert why_not_shared(model) is None
    b = batch()
    weights = torch.randn(b.response_mask.shape) * b.response_mask  # a loss that reaches every token

    def grads(forward):
        model.zero_grad()
        logp, entropy = forward(model, b, temperature, with_entropy=True)
        ((logp * weights).sum() + (entropy * weights).sum()).backward()
        return logp.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    own_logp, own_entropy, own_grads = grads(token_logprobs)
    logp, entropy, shared_grads = grads(shared_prompt_logprobs)
    real = b.response_mask.bool()
    assert torch.allclose(logp[real], own_logp[real], atol=1e-5)
    assert torch.allclose(entropy[real], own_entropy[real], atol=1e-5)
    for n, g in own_grads.items():
        assert torch.allclose(shared_grads[n], g, atol=1e-5, rtol=1e-4), n


def test_a_model_outside_the_family_or_with_checkpointing_is_not_taken() -> None:
    assert "gpt2" in why_not_shared(family("gpt2"))
    model = family("llama")
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    assert "checkpointing" in why_not_shared(model)
