"""A decoder's weights as its config.json describes them, without loading the model (nor torch).

`rlvr plan` counts parameters, the KV cache and an adapter's size from this. `validate` checks an
adapter's target modules and rank against it. Model families name their fields differently (GPT-2's
`n_embd`, `n_layer`, `n_head`, `n_inner`). Some give heads wider than hidden / heads (Qwen3's and
Gemma's `head_dim`). Some fuse projections (Phi-3's `qkv_proj`, GPT-2's `c_attn`, GPT-NeoX's
`query_key_value`) or learn position embeddings (GPT-2). Each known family's layer is written out
below, with the defaults its config class applies when config.json leaves a field out. Another
model type is counted as a Llama-style layer, and `known` says so, so the plan can say so too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlvr_cli.errors import RlvrError

# config.json's names for each quantity, by family (transformers' `attribute_map`s)
_FIELDS = {
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "heads": ("num_attention_heads", "n_head", "num_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "intermediate": ("intermediate_size", "n_inner", "ffn_dim"),
}
LLAMA_STYLE = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "olmo",
    "olmo2",
    "granite",
    "smollm3",
)
KNOWN = (*LLAMA_STYLE, "phi3", "gpt2", "gpt_neox")
_TIED_BY_DEFAULT = ("gpt2", "gemma", "gemma2", "gemma3_text")  # their config classes' default


def _field(config: dict[str, Any], quantity: str, default: int | None = None) -> int:
    for name in _FIELDS[quantity]:
        if config.get(name) is not None:
            return int(config[name])
    if default is None:
        raise KeyError(" / ".join(_FIELDS[quantity]))
    return default


@dataclass(frozen=True)
class Layout:
    """One decoder layer's linear layers and what surrounds them, from config.json."""

    model_type: str
    known: bool  # False: a model type not written out here, counted as a Llama-style layer
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool
    positions: int  # learned position embeddings (GPT-2); 0 with rotary ones
    attention_bias: bool = False  # Llama-style switches for biases on the projections
    mlp_bias: bool = False

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layout:
        kind = str(config.get("model_type") or "")
        try:
            hidden, heads = _field(config, "hidden"), _field(config, "heads")
            head_dim = int(config.get("head_dim") or hidden // heads)
            return cls(
                model_type=kind,
                known=kind in KNOWN,
                vocab=int(config["vocab_size"]),
                hidden=hidden,
                layers=_field(config, "layers"),
                heads=heads,
                kv_heads=_field(config, "kv_heads", heads),
                head_dim=head_dim,
                intermediate=_field(config, "intermediate", 4 * hidden),
                tied=bool(config.get("tie_word_embeddings", kind in _TIED_BY_DEFAULT)),
                positions=int(config.get("n_positions") or 1024) if kind == "gpt2" else 0,
                attention_bias=bool(config.get("attention_bias")),
                mlp_bias=bool(config.get("mlp_bias")),
            )
        except KeyError as exc:
            raise RlvrError(f"config.json lacks a field the estimate needs: {exc}") from None
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise RlvrError(f"config.json has a field the estimate cannot read: {exc}") from None

    @property
    def linears(self) -> tuple[tuple[str, int, int], ...]:
        """(name, in features, out features) of each linear layer of one decoder layer."""
        h, i = self.hidden, self.intermediate
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        if self.model_type == "phi3":
            return (("qkv_proj", h, q + 2 * kv), ("o_proj", q, h), ("gate_up_proj", h, 2 * i), ("down_proj", i, h))
        if self.model_type == "gpt2":  # Conv1D layers; two are named c_proj (attention's and the MLP's)
            return (("c_attn", h, 3 * h), ("c_proj", h, h), ("c_fc", h, i), ("c_proj", i, h))
        if self.model_type == "gpt_neox":
            return (
                ("query_key_value", h, 3 * h),
                ("dense", h, h),
                ("dense_h_to_4h", h, i),
                ("dense_4h_to_h", i, h),
            )
        return (
            ("q_proj", h, q),
            ("k_proj", h, kv),
            ("v_proj", h, kv),
            ("o_proj", q, h),
            ("gate_proj", h, i),
            ("up_proj", h, i),
            ("down_proj", i, h),
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for name, _, _ in self.linears))

    def sides(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer by name; a name two layers share keeps the narrower."""
        out: dict[str, tuple[int, int]] = {}
        for name, a, b in self.linears:
            if name not in out or min(a, b) < min(out[name]):
                out[name] = (a, b)
        return out

    @property
    def layer_parameters(self) -> int:
        """One decoder layer: its linear layers' weights and biases, and its norms."""
        weights = sum(a * b for _, a, b in self.linears)
        return weights + self._biases() + self._norms()

    def _biases(self) -> int:
        h, i = self.hidden, self.intermediate
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        if self.model_type in ("gpt2", "gpt_neox"):  # every linear layer has one
            return sum(b for _, _, b in self.linears)
        if self.model_type == "qwen2":  # the queries', keys' and values' projections
            return q + 2 * kv
        return (q + 2 * kv + h) * self.attention_bias + (2 * i + h) * self.mlp_bias

    def _norms(self) -> int:
        h, d = self.hidden, self.head_dim
        if self.model_type == "olmo":  # LayerNorms without weights
            return 0
        if self.model_type in ("gpt2", "gpt_neox"):  # two LayerNorms, weight and bias
            return 4 * h
        if self.model_type in ("gemma2", "gemma3_text"):  # a norm before and after each block
            return 4 * h + (2 * d if self.model_type == "gemma3_text" else 0)
        if self.model_type == "qwen3":  # per-head norms of the queries and keys
            return 2 * h + 2 * d
        if self.model_type == "olmo2":  # norms of the whole query and key vectors
            return 2 * h + (self.heads + self.kv_heads) * d
        return 2 * h

    @property
    def embedding(self) -> int:
        """The input table and learned positions: weights that are read, not multiplied."""
        return self.vocab * self.hidden + self.positions * self.hidden

    @property
    def parameters(self) -> int:
        final_norm = {"gpt2": 2, "gpt_neox": 2, "olmo": 0}.get(self.model_type, 1) * self.hidden
        head = 0 if self.tied else self.vocab * self.hidden
        return self.layers * self.layer_parameters + self.embedding + head + final_norm

    @property
    def multiplying(self) -> int:
        """The parameters that multiply (train/flops.py's N): all but the input table and positions;
        a tied output head counts once."""
        return self.parameters - self.embedding + (self.vocab * self.hidden if self.tied else 0)

    def adapter_parameters(self, rank: int, targets: list[str] | str) -> int:
        """LoRA parameters, rank × (in + out) over each targeted linear layer of every decoder
        layer (all-linear: each of them)."""
        chosen = [a + b for name, a, b in self.linears if targets == "all-linear" or name in targets]
        return self.layers * rank * sum(chosen)
