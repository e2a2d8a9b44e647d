"""The update's shared-prompt forward against the model's own: the same log-probs, entropies
and gradients on every supported family, with groups of rows sharing ragged prompts and
responses of different lengths."""

from __future__ import annotations

import sys

import pytest
import torch

import rlvr_cli.engine.limits as limits
from rlvr_cli.engine.forward import distinct_prompts, make_batch, token_logprobs
from rlvr_cli.engine.shared import shared_prompt_logprobs, why_not_shared
from tests.engine.test_sampler import family

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]
RESPONSES = [[20, 21, 22, 3], [23], [24, 25, 26, 27, 28], [29, 30], [31, 32, 33, 34, 35, 36], [37, 3]]


def batch():
    prompts = [PROMPTS[i % 3] for i in range(len(RESPONSES))]  # rows 0/3, 1/4, 2/5 share a prompt
    masks = [[1] * len(r) for r in RESPONSES]
    return make_batch(prompts, RESPONSES, masks, 0)


def test_rows_that_share_a_prompt_are_found() -> None:
    first, owner = distinct_prompts(batch())
    assert first.tolist() == [0, 1, 2] and owner.tolist() == [0, 1, 2, 0, 1, 2]  # in order of appearance
    alone = make_batch([[9, 9], [4], [7, 8, 9]], [[1], [1], [1]], [[1], [1], [1]], 0)
    assert [t.tolist() for t in distinct_prompts(alone)] == [[0, 1, 2], [0, 1, 2]]


def assert_same_as_own_forward(model: torch.nn.Module, forward, temperature: float) -> None:
    """`forward` gives the model's own log-probs, entropies and gradients on the grouped batch."""
    b = batch()
    weights = torch.randn(b.response_mask.shape) * b.response_mask  # a loss that reaches every token

    def grads(forward):
        model.zero_grad()
        logp, entropy = forward(model, b, temperature, with_entropy=True)
        ((logp * weights).sum() + (entropy * weights).sum()).backward()
        return logp.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    own_logp, own_entropy, own_grads = grads(token_logprobs)
    logp, entropy, other_grads = grads(forward)
    real = b.response_mask.bool()
    assert torch.allclose(logp[real], own_logp[real], atol=1e-5)
    assert torch.allclose(entropy[real], own_entropy[real], atol=1e-5)
    for n, g in own_grads.items():
        assert torch.allclose(other_grads[n], g, atol=1e-5, rtol=1e-4), n


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "mistral", "llama3-rope", "yarn-rope"])
def test_log_probs_entropies_and_gradients_are_the_models_own(name: str, temperature: float) -> None:
    model = family(name).train()
    assert why_not_shared(model) is None
    assert_same_as_own_forward(model, shared_prompt_logprobs, temperature)


@pytest.mark.parametrize("prompts", [PROMPTS, [[5, 6, 7], [8, 9, 10], [11, 12, 13]]], ids=["ragged", "equal"])
@pytest.mark.parametrize("alone", [True, False], ids=["each prompt alone", "one padded call"])
@pytest.mark.parametrize("two_part", [True, False], ids=["responses in two parts", "over copies"])
@pytest.mark.parametrize("compact", [True, False], ids=["prompt padding left out", "kept where it can be"])
@pytest.mark.parametrize("name", ["qwen2", "qwen3"])
def test_every_way_the_prompts_and_responses_attend_gives_the_models_own(
    monkeypatch: pytest.MonkeyPatch, prompts: list[list[int]], alone: bool, two_part: bool, compact: bool, name: str
) -> None:
    """Prompts attend to themselves in one padded call, or each in its own causal call where
    padding would cost more; responses attend over copies of their prompt's keys, or in two
    parts merged by their log-sum-exp (engine/two_part.py) where the copies would be large; the
    prompts' padding goes through the matrix products where leaving it out costs more. Each
    choice is forced here; prompts of one length have no padding at all. Each key head serves
    two query heads in both families; Qwen3 normalises queries and keys."""
    import rlvr_cli.engine.shared as shared

    monkeypatch.setattr(shared, "ONE_CALL_PAIRS", 0 if alone else 1 << 40)
    monkeypatch.setattr(limits, "TWO_PART_BYTES", 0 if two_part else 1 << 40)
    monkeypatch.setattr(shared, "COMPACT_MACS", 0 if compact else 1 << 40)
    monkeypatch.setattr(sys.modules[__name__], "PROMPTS", prompts)
    assert_same_as_own_forward(family(name).train(), shared_prompt_logprobs, 1.0)


def test_a_gpu_repeats_key_heads_where_its_kernels_cannot_map_them() -> None:
    """On a GPU only flash attention maps query heads to key heads, and only unmasked in 16 bits:
    elsewhere the key and value heads are repeated, or the math kernel would hold every score.
    A meta tensor stands in for a GPU's (any device but the CPU)."""
    from rlvr_cli.engine.precision import kernel_maps_heads

    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    for device, dtype, masked, maps in [
        ("cpu", torch.float32, True, True),
        ("meta", torch.bfloat16, False, True),
        ("meta", torch.bfloat16, True, False),
        ("meta", torch.float32, False, False),
    ]:
        q = torch.zeros(1, 4, 4, 8, dtype=dtype, device=device)
        assert kernel_maps_heads(q, mask if masked else None) is maps, (device, dtype, masked)
    assert not kernel_maps_heads(torch.zeros(1, 4, 4, 512, dtype=torch.bfloat16, device="meta"), None)  # too wide
    q = torch.zeros(1, 4, 4, 8, device="meta")
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast on another device does not count
        assert not kernel_maps_heads(q, None)


@pytest.mark.parametrize("two_part", [True, False], ids=["responses in two parts", "over copies"])
@pytest.mark.parametrize("alone", [True, False], ids=["each prompt alone", "one padded call"])
def test_repeated_key_heads_give_the_models_own(monkeypatch: pytest.MonkeyPatch, alone: bool, two_part: bool) -> None:
    """The way a GPU runs masked attention with grouped queries (repeated key and value heads),
    forced on the CPU: the same log-probs, entropies and gradients."""
    import rlvr_cli.engine.precision as precision
    import rlvr_cli.engine.shared as shared

    calls = []
    monkeypatch.setattr(precision, "kernel_maps_heads", lambda q, mask: calls.append(mask is None) or False)
    monkeypatch.setattr(shared, "ONE_CALL_PAIRS", 0 if alone else 1 << 40)
    monkeypatch.setattr(limits, "TWO_PART_BYTES", 0 if two_part else 1 << 40)
    assert_same_as_own_forward(family("qwen2").train(), shared_prompt_logprobs, 1.0)
    assert calls  # the repeated heads ran


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("compute", [None, torch.bfloat16], ids=["fp32", "autocast bf16"])
def test_on_a_gpu_no_attention_falls_to_the_math_kernel(compute: torch.dtype | None) -> None:
    """The math kernel (which holds every score) is switched off: the update's shared-prompt
    forward and backward, and the sampler's prefill and a decode step, still run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from rlvr_cli.engine.fused import Decoder

    model = family("qwen2").train().cuda()
    b = batch().to(torch.device("cuda"))
    kernels = sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])
    with kernels, torch.autocast("cuda", dtype=compute or torch.float32, enabled=compute is not None):
        logp, _ = shared_prompt_logprobs(model, b, 1.0, with_entropy=False)
        (logp * b.response_mask).sum().backward()
        decoder = Decoder(model)
        P = b.prompt_width
        logits, cache = decoder.prefill(b.input_ids[:, :P], b.attention_mask[:, :P], room=2)
        decoder.step(logits.argmax(-1), cache)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_a_model_outside_the_family_or_with_checkpointing_is_not_taken() -> None:
    assert "gpt2" in why_not_shared(family("gpt2"))
    assert "dynamic" in why_not_shared(family("dynamic-rope"))  # its frequencies follow the length
    model = family("llama")
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    assert "checkpointing" in why_not_shared(model)


@pytest.mark.parametrize(
    "config",
    [
        {"kind": "Qwen3", "head_dim": 32},  # heads × head_dim ≠ hidden, as in released Qwen3 models
        {"kind": "Llama", "attention_bias": True, "mlp_bias": True},
        {"kind": "Qwen2", "tie_word_embeddings": True},
    ],
    ids=["qwen3 wide heads", "llama with biases", "qwen2 tied embeddings"],
)
def test_layouts_of_released_models_sample_and_train_as_their_own_forward(config: dict) -> None:
    import transformers as t

    from rlvr_cli.engine.generate import generate
    from tests.engine.test_sampler import COMMON
    from tests.engine.test_sampler import PROMPTS as SAMPLED

    kind, extra = config["kind"], {k: v for k, v in config.items() if k != "kind"}
    torch.manual_seed(0)
    model = getattr(t, f"{kind}ForCausalLM")(getattr(t, f"{kind}Config")(**COMMON, **extra)).eval()
    with torch.no_grad():  # biases away from their zero init
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    kw = dict(max_new_tokens=10, temperature=0.0, top_p=1.0, top_k=0, stop_ids=[3], pad_id=0, seed=0)
    lean = [g.response_ids for g in generate(model, SAMPLED, **kw)]
    assert lean == [g.response_ids for g in generate(model, SAMPLED, **kw, engine="transformers")]
    b = batch()
    own, _ = token_logprobs(model.train(), b, 1.0)
    shared, _ = shared_prompt_logprobs(model, b, 1.0)
    assert torch.allclose(shared[b.response_mask.bool()], own[b.response_mask.bool()], atol=1e-5)


@pytest.mark.parametrize("compact", [True, False], ids=["prompt padding left out", "prompt padding kept"])
def test_padding_never_reaches_a_matrix_product(monkeypatch: pytest.MonkeyPatch, compact: bool) -> None:
    """Every projection sees each distinct prompt once and each response's real tokens once, in
    one call: the responses' right padding (here 4 + 0 + 3 + 2 + 5 + 4 slots) costs no FLOPs,
    nor the prompts' left padding (3 + 0 + 5 slots) where it is worth leaving out (forced here;
    on this tiny model gathering the real tokens would cost more than the padding)."""
    import rlvr_cli.engine.shared as shared

    if compact:
        monkeypatch.setattr(shared, "COMPACT_MACS", 0)
    model, b = family("qwen2").train(), batch()
    seen: list[int] = []
    hook = model.model.layers[0].self_attn.q_proj.register_forward_hook(
        lambda _m, args, _out: seen.append(args[0].shape[:-1].numel())
    )
    shared_prompt_logprobs(model, b, 1.0)
    hook.remove()
    prompt_rows = sum(len(p) for p in PROMPTS) if compact else 3 * max(len(p) for p in PROMPTS)
    assert seen == [prompt_rows + sum(len(r) for r in RESPONSES)]
    assert b.response_mask.numel() > sum(len(r) for r in RESPONSES)  # the rectangle has padding to skip


@pytest.mark.parametrize("two_part", [True, False], ids=["responses in two parts", "over copies"])
@pytest.mark.parametrize("name", ["qwen2", "qwen3"])
def test_under_bf16_autocast_log_probs_and_gradients_stay_the_models_own(
    monkeypatch: pytest.MonkeyPatch, name: str, two_part: bool
) -> None:
    """Mixed precision (autocast bf16 over fp32 weights): attention runs in fp32 on the CPU
    (engine/precision.py, engine/two_part.py) and the rest as the model's own forward does; both
    agree to bf16's rounding, gradients included."""
    from rlvr_cli.engine.precision import autocast

    monkeypatch.setattr(limits, "TWO_PART_BYTES", 0 if two_part else 1 << 40)
    model, b = family(name).train(), batch()
    real = b.response_mask.bool()

    def run(forward):
        model.zero_grad()
        with autocast(torch.bfloat16, "cpu"):
            logp, _ = forward(model, b, 1.0)
        (logp * b.response_mask).sum().backward()
        return logp.detach()[real], torch.cat([p.grad.flatten() for p in model.parameters()])

    (own, own_grad), (shared, grad) = run(token_logprobs), run(shared_prompt_logprobs)
    assert (shared - own).abs().max() < 0.05 and shared.dtype == torch.float32
    assert torch.nn.functional.cosine_similarity(grad, own_grad, dim=0) > 0.99


def test_a_row_without_a_prompt_token_is_left_to_the_models_own_forward() -> None:
    from rlvr_cli.engine.shared import shares_prompts

    model = family("qwen2").train()
    assert shares_prompts(model, batch())
    empty = make_batch([[], [], [5, 6]], [[7], [8], [9]], [[1], [1], [1]], 0)
    assert not shares_prompts(model, empty)  # two rows share the empty prompt: nothing predicts their first token


def test_pure_bf16_weights_attend_in_two_parts_and_stay_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 weights without autocast (`precision: {params: bf16, ...}` written out): the two-part
    attention computes in fp32 and hands bf16 on, as the model's own forward keeps its dtype."""

    monkeypatch.setattr(limits, "TWO_PART_BYTES", 0)
    model, b = family("qwen2").train().to(torch.bfloat16), batch()
    real = b.response_mask.bool()
    own, _ = token_logprobs(model, b, 1.0)
    logp, _ = shared_prompt_logprobs(model, b, 1.0)
    (logp * b.response_mask).sum().backward()
    assert (logp[real] - own[real]).abs().max() < 0.1
    assert all(p.grad.dtype == torch.bfloat16 for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("two_part", [True, False], ids=["responses in two parts", "over copies"])
def test_a_group_whose_responses_are_all_empty_trains_the_others_as_the_models_own(
    monkeypatch: pytest.MonkeyPatch, two_part: bool
) -> None:

    monkeypatch.setattr(limits, "TWO_PART_BYTES", 0 if two_part else 1 << 40)
    responses = [r if i % 3 != 1 else [] for i, r in enumerate(RESPONSES)]  # prompt 1's rows say nothing
    monkeypatch.setattr(sys.modules[__name__], "RESPONSES", responses)
    assert_same_as_own_forward(family("qwen2").train(), shared_prompt_logprobs, 1.0)


def test_two_parts_with_a_key_head_for_every_query_head(monkeypatch: pytest.MonkeyPatch) -> None:
    """No grouped queries (Llama-2's layout): each key head serves one query head."""
    import transformers as t

    import rlvr_cli.engine.shared as shared
    from tests.engine.test_sampler import COMMON

    monkeypatch.setattr(limits, "TWO_PART_BYTES", 0)
    monkeypatch.setattr(shared, "ONE_CALL_PAIRS", 0)
    torch.manual_seed(0)
    model = t.LlamaForCausalLM(t.LlamaConfig(**{**COMMON, "num_key_value_heads": COMMON["num_attention_heads"]}))
    assert_same_as_own_forward(model.train(), shared_prompt_logprobs, 1.0)
