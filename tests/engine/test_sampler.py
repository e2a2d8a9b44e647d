"""The lean sampler against transformers, the reference it replaces: the same logits give the
same sampling probabilities as `generate`'s warpers; the fused forward gives the model's own
logits on every supported family; greedy decoding gives `generate`'s tokens; the returned
log-probs are the training forward's; the same seed gives the same draw; a model outside the
fused families samples through its own forward."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr_cli.engine.forward import make_batch, token_logprobs
from rlvr_cli.engine.fused import Decoder, why_not
from rlvr_cli.engine.generate import generate
from rlvr_cli.engine.sampler import filtered_logits

COMMON = dict(
    vocab_size=64,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)


LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
YARN_ROPE = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
DYNAMIC_ROPE = {"rope_type": "dynamic", "factor": 2.0}


def family(name: str) -> torch.nn.Module:
    import transformers as t

    torch.manual_seed(0)
    build = {
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**COMMON)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**COMMON)),
        "qwen3": lambda: t.Qwen3ForCausalLM(t.Qwen3Config(**COMMON, head_dim=16)),
        "mistral": lambda: t.MistralForCausalLM(t.MistralConfig(**COMMON, sliding_window=None)),
        # Llama 3.x's RoPE: frequencies rescaled when the model is built (the position window is
        # shortened so that the tests' positions reach the rescaled band)
        "llama3-rope": lambda: t.LlamaForCausalLM(t.LlamaConfig(**{**COMMON, "rope_scaling": LLAMA3_ROPE})),
        "yarn-rope": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**{**COMMON, "rope_scaling": YARN_ROPE})),
        "dynamic-rope": lambda: t.LlamaForCausalLM(t.LlamaConfig(**{**COMMON, "rope_scaling": DYNAMIC_ROPE})),
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(vocab_size=64, n_embd=64, n_layer=2, n_head=4, n_positions=256)),
    }
    return build[name]().eval()


PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14], [15, 16, 17, 18]]  # ragged: left padding matters
STOPS = [3]


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.5, 10, 0.5)]
)
def test_same_logits_give_generates_probabilities(temperature: float, top_k: int, top_p: float) -> None:
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(1)
    logits = torch.randn(6, 64) * 3
    logits[0, :4] = logits[0, 4]  # ties at the k-th value
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1:
        warpers.append(TopPLogitsWarper(top_p))
    expected = torch.softmax(warpers(torch.zeros(6, 1, dtype=torch.long), logits.clone()), dim=-1)
    assert torch.equal(torch.softmax(filtered_logits(logits, temperature, top_k, top_p), dim=-1), expected)


def real_tokens_only(monkeypatch, on: bool) -> list[int]:
    """Make the prefill leave the prompts' padding out (engine/ragged.py) or keep it, whatever it
    would pay on this tiny model; the list counts the prefills that left it out."""
    import rlvr_cli.engine.ragged as ragged

    monkeypatch.setattr(ragged, "PADDING_MACS", 0 if on else 1 << 60)
    taken: list[int] = []
    inner = ragged.prefill

    def counted(*args, **kwargs):
        taken.append(1)
        return inner(*args, **kwargs)

    monkeypatch.setattr(ragged, "prefill", counted)
    return taken


@pytest.mark.parametrize("ragged", [False, True], ids=["padded prefill", "prefill of the real tokens"])
@pytest.mark.parametrize(
    "copies", ["copied", "packed", "own"], ids=["weights copied", "copies packed (oneDNN)", "the model's own weights"]
)
@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "mistral", "llama3-rope", "yarn-rope"])
def test_the_fused_forward_gives_the_models_own_logits(monkeypatch, name: str, copies: str, ragged: bool) -> None:
    """The decoder's copies are stacked (`copied`), held in oneDNN's packed layout where it
    speeds the product up (`packed`: on a CPU in fp32 from `PACK_FP32` elements, lowered here to
    this tiny model), or it reads the model's own weights (`own`: a model too big to copy). The
    prefill runs the left-padded rectangle, or the prompts' real tokens only (engine/ragged.py,
    where the padding is worth leaving out; forced here)."""
    import rlvr_cli.engine.fused as fused
    import rlvr_cli.engine.limits as limits

    taken = real_tokens_only(monkeypatch, ragged)
    if copies == "own":
        monkeypatch.setattr(fused, "COPY_BYTES", 0)
    if copies == "packed":
        if not fused.ONEDNN:
            pytest.skip("this PyTorch has no oneDNN")
        monkeypatch.setattr(limits, "PACK_FP32", 0)
    model = family(name)
    assert why_not(model) is None
    batch = make_batch(PROMPTS, [[] for _ in PROMPTS], [[] for _ in PROMPTS], 0, response_width=1)
    P = batch.prompt_width
    ids, attention = batch.input_ids[:, :P], batch.attention_mask[:, :P]
    decoder = Decoder(model)
    packed = {linear.packed for layer in decoder.layers for linear in (layer.qkv, layer.o, layer.gate_up, layer.down)}
    assert packed == {copies == "packed"}
    logits, cache = decoder.prefill(ids, attention, room=2)
    assert len(taken) == ragged
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        own = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits[:, -1].float()
        assert torch.allclose(logits, own, atol=1e-5)
        for token in ([20, 21, 22, 23], [24, 25, 26, 27]):  # two decode steps
            step = decoder.step(torch.tensor(token), cache)
            ids = torch.cat([ids, torch.tensor(token)[:, None]], 1)
            attention = torch.cat([attention, torch.ones(4, 1, dtype=torch.long)], 1)
            positions = (attention.cumsum(1) - 1).clamp(min=0)
            own = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits[:, -1].float()
            assert torch.allclose(step, own, atol=1e-5)


@pytest.mark.parametrize("ragged", [False, True], ids=["padded prefill", "prefill of the real tokens"])
def test_repeated_key_heads_give_the_models_own_logits(monkeypatch, ragged: bool) -> None:
    """The way a GPU runs masked attention with grouped queries (repeated key and value heads,
    engine/precision.py `kernel_maps_heads`), forced on the CPU: the prefill and decoding give
    the model's own logits."""
    import rlvr_cli.engine.precision as precision

    calls = []
    monkeypatch.setattr(precision, "kernel_maps_heads", lambda q, mask: calls.append(mask is None) or False)
    test_the_fused_forward_gives_the_models_own_logits(monkeypatch, "qwen2", "copied", ragged)
    assert False in calls  # a masked call ran with the heads repeated


@pytest.mark.parametrize("compute", [None, torch.bfloat16], ids=["fp32", "autocast bf16"])
@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "mistral"])
@pytest.mark.parametrize("ragged", [False, True], ids=["padded prefill", "prefill of the real tokens"])
def test_rows_that_share_a_prompt_read_it_once_and_get_what_their_own_copies_give(
    monkeypatch, name: str, compute, ragged: bool
) -> None:
    """A group's rows fanned out from one prefill keep the prompt's keys once (engine/cascade.py):
    every decode step's logits equal those of rows each holding a copy of the prompt, as rows
    finish and leave, over ragged (left-padded) prompts, and in bf16 compute. (Only where the
    copies would be large, `cascade.SHARED_BYTES` a layer; here, lowered to this tiny model.)"""
    import rlvr_cli.engine.cascade as cascade
    from rlvr_cli.engine.fused import Cache
    from rlvr_cli.engine.precision import autocast

    monkeypatch.setattr(cascade, "SHARED_BYTES", 1)
    real_tokens_only(monkeypatch, ragged)

    model = family(name)
    batch = make_batch(PROMPTS[:3], [[] for _ in range(3)], [[] for _ in range(3)], 0, response_width=1)
    P = batch.prompt_width
    ids, attention = batch.input_ids[:, :P], batch.attention_mask[:, :P]
    owner = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])  # groups of 3, 2 and 4 rows
    with torch.no_grad(), autocast(compute, "cpu"):
        decoder = Decoder(model)
        _, shared = decoder.prefill(ids, attention, room=4)
        shared.select(owner)
        assert shared.prefix == P and shared.prompt_keys[0].size(0) == 3  # each prompt's keys once
        _, copies = decoder.prefill(ids[owner], attention[owner], room=4)
        assert isinstance(copies, Cache) and not copies.prefix
        torch.manual_seed(1)
        steps = [torch.randint(20, 60, (9,)), torch.randint(20, 60, (9,))]
        for tokens in steps:
            a, b = decoder.step(tokens, shared), decoder.step(tokens, copies)
            assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
        keep = torch.tensor([1, 2, 4, 6, 8])  # rows of every group finish; group 1 keeps one row
        shared.select(keep)
        copies.select(keep)
        for tokens in (torch.tensor([30, 31, 32, 33, 34]), torch.tensor([40, 41, 42, 43, 44])):
            a, b = decoder.step(tokens, shared), decoder.step(tokens, copies)
            assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
        with pytest.raises(ValueError, match="the cache is full"):
            decoder.step(torch.tensor([1, 2, 3, 4, 5]), shared)
        monkeypatch.setattr(cascade, "SHARED_BYTES", 4 << 20)
        _, small = decoder.prefill(ids, attention, room=4)
        small.select(owner)
        assert not small.prefix  # a few KB of copies: each row keeps its own


@pytest.mark.parametrize("ragged", [False, True], ids=["padded prefill", "prefill of the real tokens"])
@pytest.mark.parametrize("mode", ["autocast bf16", "pure bf16"])
@pytest.mark.parametrize("cpu", ["this CPU", "a CPU without oneDNN bf16"])
def test_the_fused_forward_in_bf16_gives_the_models_own_logits_to_bf16_rounding(
    monkeypatch, mode: str, ragged: bool, cpu: str
) -> None:
    """bf16 compute, over fp32 weights (autocast) or bf16 weights: the decoder keeps its cache
    and attention in fp32 on a CPU (engine/precision.py `attention`), the model its own way;
    they agree to bf16's rounding through prefill and decode steps. On a CPU whose oneDNN has no
    bf16 (AVX2 only: it refuses to lay a bf16 weight out) the decoder multiplies unpacked."""
    import rlvr_cli.engine.fused as fused
    from rlvr_cli.engine.precision import autocast

    if cpu != "this CPU":
        monkeypatch.setattr(fused, "ONEDNN_BF16", False)
    assert fused.packs(torch.device("cpu"), torch.bfloat16, 1 << 20) == (fused.ONEDNN_BF16 and fused.ONEDNN)
    taken = real_tokens_only(monkeypatch, ragged)

    model = family("qwen2")
    if mode == "pure bf16":
        model = model.to(torch.bfloat16)
    batch = make_batch(PROMPTS, [[] for _ in PROMPTS], [[] for _ in PROMPTS], 0, response_width=1)
    P = batch.prompt_width
    ids, attention = batch.input_ids[:, :P], batch.attention_mask[:, :P]
    with torch.no_grad(), autocast(torch.bfloat16 if mode == "autocast bf16" else None, "cpu"):
        decoder = Decoder(model)
        logits, cache = decoder.prefill(ids, attention, room=1)
        step = decoder.step(torch.tensor([20, 21, 22, 23]), cache)
        ids = torch.cat([ids, torch.tensor([20, 21, 22, 23])[:, None]], 1)
        attention = torch.cat([attention, torch.ones(4, 1, dtype=torch.long)], 1)
        positions = (attention.cumsum(1) - 1).clamp(min=0)
        own = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits.float()
    assert cache.keys[0].dtype == torch.float32 and len(taken) == ragged
    assert (logits - own[:, -2]).abs().max() < 0.02 and (step - own[:, -1]).abs().max() < 0.02


def test_rope_whose_frequencies_follow_the_length_samples_through_the_models_own_forward() -> None:
    assert why_not(family("llama3-rope")) is None and why_not(family("yarn-rope")) is None
    assert "dynamic" in str(why_not(family("dynamic-rope")))


@pytest.mark.parametrize("name", ["llama", "qwen3", "gpt2", "llama3-rope", "dynamic-rope"])
def test_greedy_lean_decoding_is_generates_and_its_logprobs_are_the_training_forwards(name: str) -> None:
    model = family(name)
    kw = dict(max_new_tokens=12, temperature=0.0, top_p=1.0, top_k=0, stop_ids=STOPS, pad_id=0, seed=0)
    lean = generate(model, PROMPTS, **kw)
    reference = generate(model, PROMPTS, **kw, engine="transformers")
    assert [g.response_ids for g in lean] == [g.response_ids for g in reference]
    sampled = generate(model, PROMPTS, **{**kw, "temperature": 0.8, "seed": 5})
    batch = make_batch(PROMPTS, [g.response_ids for g in sampled], [g.mask for g in sampled], 0)
    with torch.no_grad():
        trained, _ = token_logprobs(model, batch, 0.8)
    for row, g in enumerate(sampled):
        assert torch.allclose(torch.tensor(g.logprobs), trained[row, : len(g.logprobs)], atol=1e-4)


def test_the_same_seed_gives_the_same_draw_and_finished_rows_stop() -> None:
    model = family("llama")
    kw = dict(max_new_tokens=30, temperature=1.0, top_p=0.95, top_k=20, stop_ids=[3, 4, 5, 6, 7, 8], pad_id=0)
    first, again = generate(model, PROMPTS, seed=11, **kw), generate(model, PROMPTS, seed=11, **kw)
    other = generate(model, PROMPTS, seed=12, **kw)
    assert [g.response_ids for g in first] == [g.response_ids for g in again]
    assert [g.response_ids for g in first] != [g.response_ids for g in other]
    for g in first:  # a stopped row ends at its first stop token; the others ran to the limit
        assert (g.finish == "stop") == (g.response_ids[-1] in kw["stop_ids"])
        assert g.finish == "stop" or len(g.response_ids) == 30
        assert all(t not in kw["stop_ids"] for t in g.response_ids[:-1])
    assert {g.finish for g in first} == {"stop", "length"} or len(first) == 4


def test_sampled_frequencies_follow_the_filtered_distribution() -> None:
    model = family("qwen2")
    prompt, draws = [[5, 6, 7]], 3000
    kw = dict(max_new_tokens=1, temperature=0.9, top_p=0.9, top_k=8, stop_ids=STOPS, pad_id=0)
    counts = torch.zeros(64)
    rows = generate(model, prompt * draws, seed=3, **kw)
    for g in rows:
        counts[g.response_ids[0]] += 1
    with torch.no_grad():
        logits = model(torch.tensor(prompt)).logits[0, -1].float()
    expected = torch.softmax(filtered_logits(logits[None], 0.9, 8, 0.9), dim=-1)[0]
    assert counts[expected == 0].sum() == 0  # nothing outside top-k / top-p
    observed = counts / draws
    assert float((observed - expected).abs().max()) < 4 * math.sqrt(0.25 / draws)


@pytest.mark.parametrize("uniform", [0.0, 1 - 2**-53])
def test_a_draw_at_either_end_of_the_unit_interval_lands_on_an_allowed_token(monkeypatch, uniform: float) -> None:
    from rlvr_cli.engine.sampler import draw

    logits = torch.tensor([[0.0, 5.0, 4.0, 3.0, -1.0, 2.0]] * 3)  # top-3 keeps entries 1, 2, 3
    real = torch.rand
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.full(shape, uniform, dtype=kw["dtype"]))
    token, logp = draw(logits, 1.0, 3, 1.0, torch.Generator())
    monkeypatch.setattr(torch, "rand", real)
    assert token.tolist() == [1] * 3 if uniform == 0 else [3] * 3  # the first / the last allowed entry
    assert torch.allclose(logp, torch.log_softmax(logits, -1)[0, token])


@pytest.mark.parametrize("poison", [float("nan"), float("inf"), -float("inf"), None])
@pytest.mark.parametrize("top_k", [0, 3])
def test_a_row_whose_logits_give_no_distribution_stops_the_draw(poison: float | None, top_k: int) -> None:
    from rlvr_cli.engine.sampler import draw
    from rlvr_cli.engine.types import NonFiniteLogits

    logits = torch.tensor([[0.0, 5.0, 4.0, 3.0, -1.0, 2.0]] * 3)
    if poison is None:  # finite logits: the paired case, which draws
        token, logp = draw(logits, 1.0, top_k, 1.0, torch.Generator().manual_seed(0))
        assert token.shape == (3,) and bool(torch.isfinite(logp).all())
        return
    if poison == -float("inf"):
        logits[1] = poison  # no token left to draw
    else:
        logits[1, 2] = poison  # NaN, or an inf whose softmax is NaN
    with pytest.raises(NonFiniteLogits):
        draw(logits, 1.0, top_k, 1.0, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("packed", [False, True], ids=["copies", "packed copies"])
def test_a_decoder_kept_across_calls_samples_with_the_weights_an_optimizer_step_wrote(monkeypatch, packed) -> None:
    import rlvr_cli.engine.fused as fused
    import rlvr_cli.engine.limits as limits

    if packed and not fused.ONEDNN:
        pytest.skip("this PyTorch has no oneDNN")
    monkeypatch.setattr(limits, "PACK_FP32", 0 if packed else 1 << 62)
    model = family("qwen2")
    kw = dict(max_new_tokens=8, temperature=0.0, top_p=1.0, top_k=0, stop_ids=STOPS, pad_id=0, seed=0)
    before = [g.response_ids for g in generate(model, PROMPTS, **kw)]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(3):
        logits = model(torch.tensor([PROMPTS[0]])).logits
        (-logits[0, -1, 40]).backward()  # push every prompt's answer towards token 40
        optimizer.step()
        optimizer.zero_grad()
    after = [g.response_ids for g in generate(model, PROMPTS, **kw)]
    reference = [g.response_ids for g in generate(model, PROMPTS, **kw, engine="transformers")]
    assert after == reference and after != before
    with torch.no_grad():  # a load replaces values too
        model.load_state_dict(family("qwen2").state_dict())
    assert [g.response_ids for g in generate(model, PROMPTS, **kw)] == before


def test_the_engine_samples_with_the_weights_of_a_fused_adamw_step_once_synced() -> None:
    """PyTorch's fused AdamW writes the weights without counting a write (`Tensor._version`
    stays), so the decoder's own check cannot see the step; the trainer's sync after every step
    (`PolicyEngine.sync`) tells it, and the next samples are the new weights' own."""
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.engine.types import SamplingParams

    model = family("qwen2")
    engine = PolicyEngine.of("lean", model)
    params = SamplingParams(max_new_tokens=8, temperature=0.0, top_p=1.0, top_k=0, stop_ids=tuple(STOPS), pad_id=0)
    before = [g.response_ids for g in engine.sample(PROMPTS, params, 0, 0)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    versions = [p._version for p in model.parameters()]
    for _ in range(3):
        (-model(torch.tensor([PROMPTS[0]])).logits[0, -1, 40]).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert [p._version for p in model.parameters()] == versions  # the step is invisible to the version check
    engine.sync(model, 1)
    after = [g.response_ids for g in engine.sample(PROMPTS, params, 0, 1)]
    kw = dict(max_new_tokens=8, temperature=0.0, top_p=1.0, top_k=0, stop_ids=STOPS, pad_id=0, seed=0)
    assert after == [g.response_ids for g in generate(model, PROMPTS, **kw, engine="transformers")] != before


def test_a_decoder_kept_for_a_model_does_not_keep_it_alive() -> None:
    import gc
    import weakref

    model = family("llama")
    generate(model, PROMPTS, max_new_tokens=2, temperature=1.0, top_p=1.0, top_k=0, stop_ids=STOPS, pad_id=0, seed=0)
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None


def test_the_transformers_engine_samples_what_the_contract_says_not_the_models_generation_config() -> None:
    """A checkpoint's generation_config.json (Qwen2.5-Instruct's: top_k 20, repetition_penalty 1.05)
    is what `generate` falls back on for every setting it is not given. Here one that forbids any
    token already in the sequence: the contract says nothing of the kind, so the prompt's own
    tokens must still be drawn about as often as the distribution gives them, and the model's
    own settings stay as they were."""
    from transformers import GenerationConfig

    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.engine.types import SamplingParams

    model = family("qwen2")
    model.generation_config = GenerationConfig(repetition_penalty=100.0, no_repeat_ngram_size=1)
    params = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=0, stop_ids=(), pad_id=0)
    prompt = [5, 6, 7]
    drawn = PolicyEngine.of("transformers", model).sample([prompt] * 64, params, seed=0, revision=0)
    repeats = sum(token in prompt for g in drawn for token in g.response_ids)
    assert repeats >= 5, repeats  # 512 draws over 64 tokens; forbidden, there would be none
    assert model.generation_config.no_repeat_ngram_size == 1  # the model's own config is left as it was


def test_a_prompt_without_a_token_keeps_the_padded_prefill(monkeypatch) -> None:
    """The real-token prefill reads each prompt's last token; a row with none keeps the padded way."""
    taken = real_tokens_only(monkeypatch, True)
    model = family("qwen2")
    decoder = Decoder(model)
    ids = torch.tensor([[0, 0, 5], [0, 0, 0], [6, 7, 8]])
    decoder.prefill(ids, (ids != 0).long(), room=1)
    assert not taken
    decoder.prefill(ids[[0, 2]], (ids[[0, 2]] != 0).long(), room=1)
    assert taken == [1]


def test_weights_too_large_to_keep_a_copy_of_are_cast_once_a_call_and_freed_after_it(monkeypatch) -> None:
    """Mixed precision (fp32 weights, bf16 compute) on a model whose copies would pass
    COPY_BYTES: the decoder casts the weights once when a sampling call begins, decodes every
    step with those casts (autocast would cast every weight again at each step), and frees them
    when the call ends; it samples what the lasting copies of a smaller model sample, before and
    after an optimizer step."""
    import copy

    import rlvr_cli.engine.fused as fused
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.engine.sampler import _DECODERS
    from rlvr_cli.engine.types import SamplingParams

    params = SamplingParams(max_new_tokens=8, temperature=0.0, top_p=1.0, top_k=0, stop_ids=tuple(STOPS), pad_id=0)
    kept, large = family("qwen2"), family("qwen2")
    seen: list[tuple[bool, torch.dtype]] = []
    step = fused.Decoder.step

    def watched(self: fused.Decoder, tokens: torch.Tensor, cache: fused.Cache) -> torch.Tensor:
        for linear in (
            *(x for layer in self.layers for x in (layer.qkv, layer.o, layer.gate_up, layer.down)),
            self.head,
        ):
            seen.append((linear.copied, linear.dtype))
        return step(self, tokens, cache)

    def sample(model: torch.nn.Module, revision: int, engine: PolicyEngine) -> list[list[int]]:
        engine.sync(model, revision)
        return [g.response_ids for g in engine.sample(PROMPTS, params, 0, revision)]

    with_copies = PolicyEngine.of("lean", kept, compute=torch.bfloat16)
    first = sample(kept, 0, with_copies)
    monkeypatch.setattr(fused, "COPY_BYTES", 0)
    monkeypatch.setattr(fused.Decoder, "step", watched)
    cast = PolicyEngine.of("lean", large, compute=torch.bfloat16)
    assert sample(large, 0, cast) == first
    assert seen and all(copied and dtype == torch.bfloat16 for copied, dtype in seen)
    assert _DECODERS[large].layers == [] and _DECODERS[large].head is None  # freed with the call
    for model in (kept, large):  # the same step on both
        torch.manual_seed(1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        (-model(torch.tensor([PROMPTS[0]])).logits[0, -1, 40]).backward()
        optimizer.step()
    assert sample(large, 1, cast) == sample(kept, 1, with_copies) != first
    assert _DECODERS[large].layers == []
    monkeypatch.setattr(fused, "COPY_BYTES", 1 << 40)  # the paired case: copies that fit are kept
    kept_again = copy.deepcopy(kept)
    sample(kept_again, 1, PolicyEngine.of("lean", kept_again, compute=torch.bfloat16))
    assert _DECODERS[kept_again].layers != []


@pytest.mark.parametrize(("name", "engine"), [("gpt2", "lean"), ("llama", "transformers")])
def test_the_models_own_forward_in_mixed_precision_reads_weights_cast_once_a_call(name: str, engine: str) -> None:
    """Where sampling runs through the model's own forward (a family the fused forward does not
    reproduce, or the transformers engine) with fp32 weights and bf16 compute: each projection
    (Linear, GPT-2's Conv1D) reads a bf16 weight cast for the call, not cast again at each step;
    a head tied to the input table stays fp32; the call samples what autocast's per-step casts
    sample; the fp32 weights are back after the call, and after a call that fails."""
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.engine.hf import transformers_generate
    from rlvr_cli.engine.precision import autocast
    from rlvr_cli.engine.sampler import lean_sample
    from rlvr_cli.engine.types import SamplingParams

    model = family(name)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=0, stop_ids=tuple(STOPS), pad_id=0)
    before = {n: (p.dtype, p.data_ptr()) for n, p in model.named_parameters()}
    with autocast(torch.bfloat16, "cpu"):  # autocast alone: every weight cast at every step
        if engine == "lean":
            kw = dict(temperature=1.0, top_p=1.0, top_k=0, stop_ids=STOPS, pad_id=0, seed=4)
            per_step = [ids for ids, _, _ in lean_sample(model, PROMPTS, max_new_tokens=6, **kw)]
        else:
            per_step = [g.response_ids for g in transformers_generate(model, PROMPTS, params, 4)]
    first = next(m for m in model.modules() if type(m).__name__ in ("Linear", "Conv1D"))
    head = model.get_output_embeddings()
    tied = head.weight is model.get_input_embeddings().weight
    seen: list[tuple[torch.dtype, torch.dtype]] = []
    hook = first.register_forward_pre_hook(lambda module, args: seen.append((module.weight.dtype, head.weight.dtype)))
    sampler = PolicyEngine.of(engine, model, compute=torch.bfloat16)
    once = [g.response_ids for g in sampler.sample(PROMPTS, params, 4, 0)]
    assert once == per_step and len(seen) >= 6
    assert all(w == torch.bfloat16 and h == (torch.float32 if tied else torch.bfloat16) for w, h in seen), seen
    assert {n: (p.dtype, p.data_ptr()) for n, p in model.named_parameters()} == before
    hook.remove()

    def fail(module: torch.nn.Module, args: object) -> None:
        raise RuntimeError("a fault mid-call")

    first.register_forward_pre_hook(fail)
    with pytest.raises(RuntimeError, match="mid-call"):
        sampler.sample(PROMPTS, params, 4, 0)
    assert {n: (p.dtype, p.data_ptr()) for n, p in model.named_parameters()} == before
