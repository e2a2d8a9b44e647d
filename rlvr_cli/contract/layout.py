"""A decoder's weights as its config.json describes them, without loading the model (nor torch).

`rlvr plan` counts parameters, the KV cache and an adapter's size from this. `validate` checks an
adapter's target modules and rank against it. Model families name their fields differently (GPT-2's
`n_embd`, `n_layer`, `n_head`, `n_inner`). Some give heads wider than hidden / heads (Qwen3's and
Gemma's `head_dim`). Some fuse projections (Phi-3's `qkv_proj`, GPT-2's `c_attn`, GPT-NeoX's
`query_key_value`) or learn position embeddings (GPT-2). Mixtures of experts (Mixtral, Qwen2-MoE,
Qwen3-MoE, OLMoE) hold every expert's weights but run `num_experts_per_tok` of them per token:
`parameters` counts them all (memory), `multiplying` only the active ones (FLOPs). Each known
family's layer is written out below, with the defaults its config class applies when config.json
leaves a field out. Another model type is counted as a Llama-style layer, and `known` says so, so
the plan can say so too (and that its experts, if it has some, are left out).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError, UsageProblem

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
# mixtures of experts with Llama-style attention: (experts, active per token) when config.json omits them
MIXTURES = {"mixtral": (8, 2), "qwen2_moe": (60, 4), "qwen3_moe": (128, 8), "olmoe": (64, 8)}
EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts")
# transformers 5 holds a mixture's experts as 3-D parameters and its router as a module of its own;
# peft (utils/transformers_weight_conversion.py) still takes the linear layers' older names as
# targets, all-linear included, and maps them onto those: (router, the fused gate and up, down).
# peft 0.17-0.21 does so for the families transformers converts, not for qwen2_moe itself, and moves
# those names off the linear layers that bear them too (a dense layer's MLP, a shared expert). peft
# 0.22 converts qwen2_moe as well and keeps every linear layer a name matches as a target besides.
_OLD_NAMES = {"mixtral": ("gate", ("w1", "w3"), "w2"), "qwen2": ("gate", ("gate_proj", "up_proj"), "down_proj")}
_CONVERTED = {"mixtral": "mixtral", "qwen3_moe": "qwen2", "olmoe": "qwen2"}
_CONVERTED_SINCE_0_22 = {**_CONVERTED, "qwen2_moe": "qwen2"}
NEWEST_PEFT = (0, 22)  # the behaviour assumed where peft is not installed
KNOWN = (*LLAMA_STYLE, *MIXTURES, "phi3", "gpt2", "gpt_neox")
_TIED_BY_DEFAULT = ("gpt2", "gemma", "gemma2", "gemma3_text")  # their config classes' default


@cache
def peft_version() -> tuple[int, int]:
    """(major, minor) of the installed peft, whose version decides what an adapter on a mixture of
    experts holds (`_OLD_NAMES`); NEWEST_PEFT where it is not installed or its version is unreadable."""
    try:
        major, minor = metadata.version("peft").split(".")[:2]
        return int(major), int(minor)
    except (metadata.PackageNotFoundError, ValueError):
        return NEWEST_PEFT


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
    experts: int = 0  # a mixture of experts: experts per layer,
    active_experts: int = 0  # how many of them each token runs through,
    expert_intermediate: int = 0  # each expert's MLP width,
    shared_intermediate: int = 0  # a shared expert's (Qwen2-MoE), 0 without one,
    sparse_layers: int = 0  # and how many layers hold experts (the others have a dense MLP)
    peft: tuple[int, int] = field(default_factory=peft_version)  # whose mapping onto experts applies

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layout:
        kind = str(config.get("model_type") or "")
        try:
            hidden, heads = _field(config, "hidden"), _field(config, "heads")
            head_dim = int(config.get("head_dim") or hidden // heads)
            layout = cls(
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
                attention_bias=bool(
                    config.get("qkv_bias", True) if kind == "qwen2_moe" else config.get("attention_bias")
                ),
                mlp_bias=bool(config.get("mlp_bias")),
            )
            if kind in MIXTURES:
                return _with_experts(layout, config)
            counted = next((int(config[f]) for f in EXPERT_FIELDS if config.get(f)), 0)
            return layout if kind in KNOWN or not counted else replace(layout, experts=counted)
        except KeyError as exc:
            raise RlvrError(f"config.json lacks a field the estimate needs: {exc}") from None
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise RlvrError(f"config.json has a field the estimate cannot read: {exc}") from None

    @property
    def unknown_experts(self) -> int:
        """Experts of a model type not written out here (left out of every count), else 0."""
        return 0 if self.known else self.experts

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

    def layer_linears(self, sparse: bool) -> tuple[tuple[str, int, int], ...]:
        """A layer's linear layers (what an adapter can target): a dense layer's `linears`; a layer
        of experts has its attention's and its shared expert's (the experts are 3-D parameters)."""
        if not sparse:
            return self.linears
        h, s = self.hidden, self.shared_intermediate
        shared = (("gate_proj", h, s), ("up_proj", h, s), ("down_proj", s, h), ("shared_expert_gate", h, 1))
        return self.linears[:4] + (shared if s else ())

    def _kinds(self) -> tuple[tuple[int, bool], ...]:
        """(how many layers, whether they hold experts) of each kind of layer there is."""
        kinds = ((self.layers - self.sparse_layers, False), (self.sparse_layers, True))
        return tuple(k for k in kinds if k[0] > 0)

    @property
    def _old_names(self) -> tuple[str, tuple[str, str], str] | None:
        """The names peft maps onto this mixture's router and experts, when it does (`_OLD_NAMES`)."""
        converted = _CONVERTED_SINCE_0_22 if self.peft >= (0, 22) else _CONVERTED
        return _OLD_NAMES[converted[self.model_type]] if self.sparse_layers and self.model_type in converted else None

    @property
    def adapts_experts(self) -> bool:
        """Whether an adapter's older names reach this mixture's experts (which peft version decides)."""
        return self._old_names is not None

    @property
    def fused_expert_names(self) -> tuple[str, ...]:
        """The older names peft fuses into a mixture's experts' gate_up_proj (both or neither)."""
        old = self._old_names
        return tuple(old[1]) if old else ()

    @property
    def names(self) -> tuple[str, ...]:
        linears = (name for _, sparse in self._kinds() for name, _, _ in self.layer_linears(sparse))
        old = self._old_names
        return tuple(dict.fromkeys([*linears, *((old[0], *old[1], old[2]) if old else ())]))

    def sides(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer by name; a name two layers share keeps the narrower. An
        expert's projections by their older names (one expert's); a router's, never (its rank is
        not limited by its number of experts)."""
        out: dict[str, tuple[int, int]] = {}
        old = self._old_names
        experts = [(name, self.hidden, self.expert_intermediate) for name in old[1]] if old else []
        experts += [(old[2], self.expert_intermediate, self.hidden)] if old else []
        for name, a, b in [*(x for _, sparse in self._kinds() for x in self.layer_linears(sparse)), *experts]:
            if name not in out or min(a, b) < min(out[name]):
                out[name] = (a, b)
        return out

    @property
    def expert_weights(self) -> int:
        """One layer's experts: each a gated MLP (gate and up, then down) of its own width."""
        return self.experts * 3 * self.hidden * self.expert_intermediate

    def _layer(self, sparse: bool) -> int:
        weights = sum(a * b for _, a, b in self.layer_linears(sparse))
        router = self.experts * self.hidden if sparse else 0
        return weights + self._biases(sparse) + self._norms() + (self.expert_weights + router if sparse else 0)

    @property
    def layer_parameters(self) -> int:
        """The largest decoder layer: its linear layers' weights and biases, its norms, its experts."""
        return max(self._layer(sparse) for _, sparse in self._kinds())

    @property
    def linear_weights(self) -> int:
        """Every decoder layer's linear layers' weights, and the output head's."""
        layers = sum(n * sum(a * b for _, a, b in self.layer_linears(sparse)) for n, sparse in self._kinds())
        return layers + self.vocab * self.hidden

    def _biases(self, sparse: bool = False) -> int:
        h, i = self.hidden, self.intermediate
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        if self.model_type in ("gpt2", "gpt_neox"):  # every linear layer has one
            return sum(b for _, _, b in self.linears)
        if self.model_type == "qwen2":  # the queries', keys' and values' projections
            return q + 2 * kv
        if self.model_type == "qwen2_moe":  # the same, switched by qkv_bias
            return (q + 2 * kv) * self.attention_bias
        return (q + 2 * kv + h) * self.attention_bias + (2 * i + h) * self.mlp_bias * (not sparse)

    def _norms(self) -> int:
        h, d = self.hidden, self.head_dim
        if self.model_type == "olmo":  # LayerNorms without weights
            return 0
        if self.model_type in ("gpt2", "gpt_neox"):  # two LayerNorms, weight and bias
            return 4 * h
        if self.model_type in ("gemma2", "gemma3_text"):  # a norm before and after each block
            return 4 * h + (2 * d if self.model_type == "gemma3_text" else 0)
        if self.model_type in ("qwen3", "qwen3_moe"):  # per-head norms of the queries and keys
            return 2 * h + 2 * d
        if self.model_type in ("olmo2", "olmoe"):  # norms of the whole query and key vectors
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
        layers = sum(n * self._layer(sparse) for n, sparse in self._kinds())
        return layers + self.embedding + head + final_norm

    @property
    def multiplying(self) -> int:
        """The parameters that multiply (train/flops.py's N): all but the input table and positions;
        a tied output head counts once; of a layer's experts, only the ones a token runs through."""
        idle = self.sparse_layers * self.expert_weights * (self.experts - self.active_experts) // max(self.experts, 1)
        return self.parameters - self.embedding + (self.vocab * self.hidden if self.tied else 0) - idle

    def adapter_parameters(self, rank: int, targets: list[str] | str) -> int:
        """LoRA parameters, rank × (in + out) over each targeted linear layer of every decoder
        layer (all-linear: each of them). Where peft maps older names onto a mixture's router and
        experts (`_OLD_NAMES`), those names adapt the router and every expert: rank × experts on
        each 3-D weight, twice the rank on the fused gate and up; before peft 0.22 they also left the
        linear layers of the same names (a dense layer's MLP, a shared expert) unadapted."""
        old, every = self._old_names, targets == "all-linear"
        moved = {old[0], *old[1], old[2]} if old and self.peft < (0, 22) else set()
        total = 0
        for n, sparse in self._kinds():
            chosen = [
                a + b for name, a, b in self.layer_linears(sparse) if (every or name in targets) and name not in moved
            ]
            total += n * rank * sum(chosen)
        if old:
            h, e, w = self.hidden, self.experts, self.expert_intermediate
            router = every or old[0] in targets
            fused = every or all(name in targets for name in old[1])
            down = every or old[2] in targets
            total += self.sparse_layers * rank * (router * (h + e) + fused * 2 * e * (h + 2 * w) + down * e * (w + h))
        return total


def _with_experts(layout: Layout, config: dict[str, Any]) -> Layout:
    """A mixture of experts' counts, with its config class's defaults. Qwen's MoE families put
    experts in layer i unless i is in `mlp_only_layers` or (i + 1) is not a multiple of
    `decoder_sparse_step`; the others, in every layer."""
    kind = layout.model_type
    experts, active = MIXTURES[kind]
    experts = int(next((config[f] for f in EXPERT_FIELDS if config.get(f) is not None), experts))
    active = int(config.get("num_experts_per_tok") or active)
    sparse = layout.layers
    width = layout.intermediate
    if kind in ("qwen2_moe", "qwen3_moe"):
        width = int(config.get("moe_intermediate_size") or (1408 if kind == "qwen2_moe" else 768))
        step, dense = int(config.get("decoder_sparse_step") or 1), set(config.get("mlp_only_layers") or ())
        sparse = sum(1 for i in range(layout.layers) if i not in dense and experts > 0 and (i + 1) % step == 0)
    shared = int(config.get("shared_expert_intermediate_size") or 5632) if kind == "qwen2_moe" else 0
    return replace(
        layout,
        experts=experts,
        active_experts=active,
        expert_intermediate=width,
        shared_intermediate=shared,
        sparse_layers=sparse,
    )


def load_shape(contract: Any, folder: Path) -> Layout:
    """The layout of the contract's policy, from its config.json on disk (`rlvr plan`, `train`)."""
    policy = contract.artifacts.policy
    if policy.path is None:
        raise UsageProblem("rlvr plan reads the model's config.json from disk; artifacts.policy is a hub id")
    path = folder / policy.path / "config.json"
    if not path.is_file():
        raise UsageProblem(f"{path} does not exist")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RlvrError(f"{path} cannot be read: {exc}") from None
    if not isinstance(config, dict):
        raise RlvrError(f"{path} is not a JSON object")
    return Layout.from_config(config)
