"""A lean forward for the Llama family of decoders (Llama, Mistral, Qwen2, Qwen3): the same
arithmetic as transformers' modules, written as a handful of tensor operations per layer over
the model's own parameters, with a KV cache of plain tensors.

For a small model a decode step is mostly Python: transformers' forward builds masks, rotary
tables and cache objects and walks a dozen modules per layer, ~1 ms a step whatever the model
size. This forward does the work and nothing else, and computes logits for the last position
only. Per layer a decode step is one matmul for the queries, keys and values, one for the
MLP's gate and up, each residual add folded into its output projection, one rotation for the
queries and keys together from cos/sin tables built once per prefill, and one attention call
with an additive mask kept with the cache. Where they fit in `COPY_BYTES`, the decoder keeps
the weights it computes side by side stacked in one matrix (and every weight it computes in
another dtype than the model holds, cast); it re-copies them whenever a parameter was written
or replaced (an optimizer step, a load), so it always samples with the model's current
weights. Otherwise it uses the model's own weights as they are, except that weights held in a
wider dtype than it computes in (mixed precision) are cast once per sampling call and freed at
its end (`release`): autocast would cast every weight again at every decode step. A sharded
policy's weights, lent for one sampling phase, are copied layer by layer while each layer alone
is gathered (`Decoder(model, gathered)`, `_lent`), so the copies take the place of the gathered
weights instead of doubling them.

`why_not(model)` says when a model is outside what it reproduces (another architecture, RoPE
whose frequencies follow the sequence's length, a sliding window, a non-SiLU MLP); the sampler
then uses the model's own forward. A test
checks both give the same logits on every supported family.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rlvr_cli.engine import cascade, ragged
from rlvr_cli.engine.adapted import effective_weight, is_adapted, weight_bytes
from rlvr_cli.engine.kv_cache import Cache
from rlvr_cli.engine.limits import COPY_BYTES, FAMILIES, STATIC_ROPE, packed_on_cpu
from rlvr_cli.engine.precision import attention as attend

DECODE_ROWS = 16  # the rows oneDNN lays a packed weight out for (it computes any number of rows)


def packs(device: torch.device, dtype: torch.dtype, elements: int) -> bool:
    """Whether the decoder holds a copied weight in oneDNN's packed layout and multiplies with
    its prepacked product (`torch.ops.mkldnn._linear_pointwise`) instead of `F.linear`: on a CPU
    with oneDNN, in bf16 always, in fp32 from `PACK_FP32` elements. At a decode step's rows the
    default product is far from the machine's peak (benchmarks/README.md, "Lean sampler"), and
    the packed one runs 1.5–3.3× faster from 16 × 512 × 512 up (bf16 1.1–2×). In fp32 below
    that its fixed cost per call outweighs the gain: a 128-wide decode step ran 1.22 ms packed
    against 1.02 plain. The rule is fixed (no timing at start-up), so a resumed run samples
    with the same kernels as the run it continues."""
    name = {torch.bfloat16: "bf16", torch.float32: "fp32"}.get(dtype)
    if name == "bf16" and not ONEDNN_BF16:  # oneDNN refuses to lay bf16 out without the CPU's bf16 support
        return False
    return device.type == "cpu" and ONEDNN and name is not None and packed_on_cpu(name, elements)


def _onednn() -> bool:
    try:
        torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


def _onednn_bf16() -> bool:
    """Whether oneDNN computes bf16 on this CPU (AVX-512 BW/VL/DQ or AVX-NE-CONVERT): without
    them `_reorder_linear_weight` raises on a bf16 weight (an AVX2-only CPU, e.g. AMD Zen 2/3)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


ONEDNN = _onednn()
ONEDNN_BF16 = ONEDNN and _onednn_bf16()


def why_not(model: Any) -> str | None:
    """Why the lean forward cannot stand in for this model's own, or None when it can."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        return f"model type {kind!r} is not one of {', '.join(FAMILIES)}"
    rope = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if rope_type not in STATIC_ROPE:
        return f"RoPE scaling {rope_type!r} (its frequencies change with the sequence's length)"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "tensor-parallel pretraining layout (pretraining_tp > 1)"
    if getattr(config, "use_sliding_window", False) or (kind == "mistral" and getattr(config, "sliding_window", None)):
        return "sliding-window attention"
    if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return f"attention implementation {config._attn_implementation!r}"
    if is_adapted(model) and weight_bytes(model) > COPY_BYTES:
        return "LoRA adapter layers over weights larger than its merged copy may be"
    return None


def _rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """transformers' RMSNorm: computed in float32, the weight applied in the input's dtype."""
    if x.dtype == torch.float32:  # the squares summed in one call, where rms_norm's composite makes six
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        scale = torch.addcmul(norm.new_full((), eps), norm, norm, value=1 / x.size(-1)).rsqrt_()
        return x * scale if weight is None else (x * weight).mul_(scale)
    h = x.to(torch.float32)
    h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return h if weight is None else weight * h


class _Linear:
    """`x @ W.T + b` for one or more of the model's linear layers side by side (their outputs
    concatenated). With `copy`, layers computed side by side share one matrix, their weights
    stacked row after row (one matmul; copying whole rows costs a fifth of a transposed copy,
    made again after every optimizer step), and a weight held in another dtype than it computes
    in, or an adapted layer's merged weight, is copied once per optimizer step too; a single
    plain layer held in the dtype it computes in is read as it is, unless the packed layout pays
    for it (`packs`: on a CPU every copy is held packed). Without `copy`, the model's own weights
    are used as they are. `own`: copied whatever the layers (their weights are freed once read)."""

    def __init__(self, modules: list[Any], copy: bool, dtype: torch.dtype | None = None, own: bool = False) -> None:
        self.modules = modules
        weights = [effective_weight(m) for m in modules]  # an adapted layer's: base + scale·B·A
        biases = [getattr(m, "bias", None) for m in modules]
        self.dtype = dtype = dtype or weights[0].dtype  # under autocast, the dtype it computes in: no cast per step
        adapted = any(hasattr(m, "lora_A") for m in modules)
        packed = packs(weights[0].device, dtype, sum(w.numel() for w in weights))
        self.copied = copy and (own or len(modules) > 1 or weights[0].dtype != dtype or adapted or packed)
        self.packed = False
        if not self.copied:
            self.parts = list(zip(weights, biases, strict=True))
            self.mats = [(w.t(), b) for w, b in self.parts]  # views: in-place writes show through
            return
        rows = sum(w.size(0) for w in weights)
        bias = weights[0].new_empty(rows, dtype=dtype) if any(b is not None for b in biases) else None
        self.packed = packed
        self.parts = [(None if self.packed else weights[0].new_empty((rows, weights[0].size(1)), dtype=dtype), bias)]
        self.mats = [] if self.packed else [(self.parts[0][0].t(), bias)]  # the copy is written in place
        self.load()

    def load(self) -> None:
        """Copy the modules' current weights into the decoder's own (a no-op without copies)."""
        if not self.copied:
            return
        weight, bias = self.parts[0]
        weights = [effective_weight(m) for m in self.modules]
        if self.packed:  # the old layout freed before the new one is made
            self.parts[0] = (None, bias)
            weight = torch.cat([w.to(self.dtype) for w in weights])
        start = 0
        for m, rows in zip(self.modules, weights, strict=True):
            end = start + rows.size(0)
            if not self.packed:
                weight[start:end].copy_(rows)
            if bias is not None and getattr(m, "bias", None) is not None:
                bias[start:end].copy_(m.bias)
            elif bias is not None:
                bias[start:end].zero_()
            start = end
        if self.packed:
            self.parts[0] = (torch.ops.mkldnn._reorder_linear_weight(weight, DECODE_ROWS), bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            weight, bias = self.parts[0]
            return torch.ops.mkldnn._linear_pointwise(x.to(self.dtype), weight, bias, "none", [], "")
        if x.dim() == 2 and len(self.mats) == 1:  # F.linear's own product, one dispatch less
            weight, bias = self.mats[0]
            return torch.mm(x, weight) if bias is None else torch.addmm(bias, x, weight)
        outs = [F.linear(x, w, b) for w, b in self.parts]
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)

    def residual(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """`h + self(x)`, one matmul accumulating into the residual where `x` is 2-D."""
        if self.packed and x.dim() == 2:
            weight, bias = self.parts[0]
            return torch.ops.mkldnn._linear_pointwise.binary(x.to(self.dtype), h.to(self.dtype), weight, bias, "add")
        if len(self.mats) == 1 and x.dim() == 2:
            weight, bias = self.mats[0]
            out = torch.addmm(h, x, weight)
            return out if bias is None else out.add_(bias)
        return h + self(x)


@dataclass
class _Layer:
    norm1: torch.Tensor
    qkv: _Linear
    o: _Linear
    norm2: torch.Tensor
    gate_up: _Linear
    down: _Linear
    qk_norm: torch.Tensor | None  # (heads + kv_heads, D): Qwen3's per-head norms of queries and keys


class Decoder:
    """`prefill(ids, attention, room)` → (last logits, cache); `step(tokens, cache)` → next logits."""

    def __init__(self, model: Any, gathered: Any = None) -> None:
        self._model = weakref.ref(model)  # a decoder kept for a model does not keep it alive
        self.gathered = gathered  # lent layer by layer (`_lent`): a context in which a layer's weights are whole
        config = model.config
        self.eps = config.rms_norm_eps
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        rotary = model.model.rotary_emb
        self.inv_freq, self.rope_scale = rotary.inv_freq, float(getattr(rotary, "attention_scaling", 1.0))
        self.qk_norm = config.model_type == "qwen3"
        self._seen: tuple[tuple[Any, ...], tuple[int, ...]] | None = None
        self.layers: list[_Layer] = []
        self.for_this_call = False  # the copies are casts made for one sampling call (`release`)
        self._refresh()

    @property
    def model(self) -> Any:
        model = self._model()
        if model is None:
            raise RuntimeError("the model this decoder reads was freed")
        return model

    def written(self) -> None:
        """The weights were written in place by something that may not count as a write: PyTorch's
        fused AdamW kernel leaves `Tensor._version` as it was, so the next prefill re-reads them
        whatever the versions say."""
        if self._seen is not None:
            self._seen = (self._seen[0], ())

    def release(self) -> None:
        """The end of a sampling call: casts made for it alone are freed (the next call makes them
        again from the weights as they are then)."""
        if self.for_this_call:
            self.layers, self.head, self._seen, self.for_this_call = [], None, None, False

    def _refresh(self) -> None:
        """Read the weights: copy them again after they were written (an optimizer step, a
        load), build the layers again when a parameter was replaced."""
        if self.gathered is not None:  # lent for one sampling phase: read once, never again
            if not self.layers:
                self._lent()
            return
        params = list(self.model.parameters())
        device = params[0].device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        where = (tuple((id(p), p.data_ptr()) for p in params), dtype)
        # an adapter switched off or on changes the merged weights without writing a parameter
        switches = tuple(bool(m.disable_adapters or m.merged) for m in self.model.modules() if hasattr(m, "lora_A"))
        versions = (*(p._version for p in params), switches)
        if (where, versions) == self._seen:
            return
        with torch.no_grad():
            if self._seen is not None and where == self._seen[0]:
                for layer in self.layers:
                    for linear in (layer.qkv, layer.o, layer.gate_up, layer.down):
                        linear.load()
                self.head.load()
                self._qk_norms()
            else:
                layers, head = self.model.model.layers, self.model.lm_head
                linears = [m for m in self.model.modules() if isinstance(m, torch.nn.Linear)]
                copy = sum(m.weight.numel() * m.weight.element_size() for m in linears) <= COPY_BYTES
                copy = copy and not getattr(self.model, "weights_lent", False)  # gathered for this phase only
                copy = copy or is_adapted(self.model)  # adapted layers compute with a merged weight
                self.for_this_call = not copy and dtype is not None and any(m.weight.dtype != dtype for m in linears)
                copy = copy or self.for_this_call
                self.layers = [self._layer(layer, copy, dtype) for layer in layers]
                self.head = _Linear([head], copy, dtype)
        self._seen = (where, versions)

    def _lent(self) -> None:
        """A sharded policy's weights, lent for one sampling phase: the embeddings, final norm and
        head are whole for the phase, and each decoder layer only inside `gathered(name)`, where
        its weights are copied (stacked, and packed where that pays) before they are freed. So
        the phase holds about one model's weights in the compute dtype, as when every layer is
        gathered at once, and samples at the speed of the decoder's own copies."""
        model = self.model
        device = model.model.embed_tokens.weight.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        names = {id(module): name for name, module in model.named_modules()}
        with torch.no_grad():
            for layer in model.model.layers:
                with self.gathered(names[id(layer)]):
                    self.layers.append(self._layer(layer, True, dtype, own=True))
            self.head = _Linear([model.lm_head], False, dtype)  # whole through the phase

    def _layer(self, layer: Any, copy: bool, dtype: torch.dtype | None, own: bool = False) -> _Layer:
        """`own`: every tensor copied, none read later (a lent layer's weights are freed once read)."""
        attn, mlp = layer.self_attn, layer.mlp
        norm = (lambda m: m.weight.clone()) if own else (lambda m: m.weight)
        return _Layer(
            norm(layer.input_layernorm),
            _Linear([attn.q_proj, attn.k_proj, attn.v_proj], copy, dtype, own),
            _Linear([attn.o_proj], copy, dtype, own),
            norm(layer.post_attention_layernorm),
            _Linear([mlp.gate_proj, mlp.up_proj], copy, dtype, own),
            _Linear([mlp.down_proj], copy, dtype, own),
            self._qk_norm(attn) if self.qk_norm else None,
        )

    def _qk_norms(self) -> None:
        """Qwen3's per-head norms of the queries and keys, read again (a copy: `_qk_norm`)."""
        if self.qk_norm:
            for layer, module in zip(self.layers, self.model.model.layers, strict=True):
                layer.qk_norm = self._qk_norm(module.self_attn)

    def _qk_norm(self, attn: Any) -> torch.Tensor:
        """Qwen3's per-head norms of the queries and keys, side by side `(heads + kv_heads, D)`."""
        return torch.cat([attn.q_norm.weight.expand(self.heads, -1), attn.k_norm.weight.expand(self.kv_heads, -1)])

    def _tables(self, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin `(length, D)` for positions 0..length-1, as transformers
        computes them (position × inverse frequency in float32, scaled, cast)."""
        positions = torch.arange(length, device=self.inv_freq.device, dtype=torch.float)
        freqs = positions[:, None] * self.inv_freq.to(torch.float)[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (emb.cos() * self.rope_scale).to(dtype), (emb.sin() * self.rope_scale).to(dtype)
        half = sin.size(-1) // 2
        return cos, torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)

    def _queries_keys(self, layer: _Layer, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """The queries and keys `(..., heads + kv_heads, D)`, normed (Qwen3) and rotated."""
        D, both = self.head_dim, self.heads + self.kv_heads
        qk = qkv[..., : both * D].unflatten(-1, (both, D))
        if layer.qk_norm is not None:
            qk = _rms(qk, None, self.eps) * layer.qk_norm
        return torch.addcmul(qk * cos, qk.roll(D // 2, dims=-1), sin)  # the halves swapped, the sign in `sin`

    def _mlp(self, h: torch.Tensor, layer: _Layer) -> torch.Tensor:
        gate, up = layer.gate_up(_rms(h, layer.norm2, self.eps)).chunk(2, dim=-1)
        return layer.down.residual(h, F.silu(gate).mul_(up))

    def _logits(self, last: torch.Tensor) -> torch.Tensor:
        return self.head(_rms(last, self.model.model.norm.weight, self.eps)).float()  # (B, V)

    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor, attention: torch.Tensor, room: int = 0) -> tuple[torch.Tensor, Cache]:
        """Left-padded prompts `(B, P)` with their mask → logits of the next token `(B, V)`,
        and a cache with `room` free slots for the tokens to come."""
        self._refresh()
        B, P = ids.shape
        H, D, kv = self.heads, self.head_dim, self.kv_heads
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        h = self.model.model.embed_tokens(ids)
        cos_table, sin_table = self._tables(P + room, h.dtype)
        cos, sin = cos_table[positions][:, :, None], sin_table[positions][:, :, None]  # (B, P, 1, D)
        store_dtype = torch.float32 if ids.device.type == "cpu" else h.dtype  # `attention` reads fp32 there
        mask = torch.full((B, P + room), float("-inf"), device=ids.device, dtype=store_dtype)
        mask[:, :P].masked_fill_(attention.bool(), 0.0)
        cache = Cache([], [], mask, positions[:, -1], P, cos_table, sin_table)
        if ragged.pays(self, attention):  # the padding left out of every product
            return ragged.prefill(self, ids, attention, room, cache, _rms), cache
        seen = torch.ones(P, P, dtype=torch.bool, device=ids.device).tril()[None] & attention.bool()[:, None, :]
        seen = (seen | torch.eye(P, dtype=torch.bool, device=ids.device)[None])[:, None]  # padding sees itself: no NaN
        for layer in self.layers:
            qkv = layer.qkv(_rms(h, layer.norm1, self.eps))  # (B, P, (H + 2kv)·D)
            qk = self._queries_keys(layer, qkv, cos, sin).transpose(1, 2)  # (B, H + kv, P, D)
            q, k = qk[:, :H], qk[:, H:]
            v = qkv[..., (H + kv) * D :].unflatten(-1, (kv, D)).transpose(1, 2)
            for store, new in ((cache.keys, k), (cache.values, v)):
                store.append(new.new_empty((B, kv, P + room, D), dtype=store_dtype))
                store[-1][:, :, :P] = new
            out = attend(q, k, v, seen, kv != H)
            h = layer.o.residual(h, out.transpose(1, 2).reshape(B, P, H * D))
            h = self._mlp(h, layer)
        return self._logits(h[:, -1]), cache

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, cache: Cache) -> torch.Tensor:
        """One new token per row `(B,)` → logits of the next `(B, V)`; the cache grows by one."""
        if cache.length == cache.prefix + cache.mask.size(1):
            raise ValueError("the cache is full: prefill with more room")
        B, L, D = tokens.size(0), cache.length - cache.prefix, self.head_dim  # L: the new token's slot
        H, kv = self.heads, self.kv_heads
        cache.positions = cache.positions + 1
        cache.mask[:, L] = 0.0
        mask = cache.mask[:, None, None, : L + 1]
        h = F.embedding(tokens, self.model.model.embed_tokens.weight)  # (B, hidden)
        cos, sin = cache.cos[cache.positions][:, None], cache.sin[cache.positions][:, None]  # (B, 1, D)
        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(_rms(h, layer.norm1, self.eps))  # (B, (H + 2kv)·D)
            qk = self._queries_keys(layer, qkv, cos, sin)  # (B, H + kv, D)
            keys, values = cache.keys[i], cache.values[i]
            keys[:, :, L] = qk[:, H:]
            values[:, :, L] = qkv[:, (H + kv) * D :].view(B, kv, D)
            if cache.prefix:
                out = cascade.attend(qk[:, :H], cache, i, L + 1)
                out = out if torch.is_autocast_enabled(out.device.type) else out.to(qk.dtype)
            else:
                out = attend(qk[:, :H, None], keys[:, :, : L + 1], values[:, :, : L + 1], mask, kv != H)
                out = out.reshape(B, H * D)
            h = layer.o.residual(h, out)
            h = self._mlp(h, layer)
        cache.length += 1
        return self._logits(h)
