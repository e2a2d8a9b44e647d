"""FSDP2: each process holds 1/N of the weights, gradients and optimizer state
(`torch.distributed.fsdp.fully_shard`, one unit per decoder layer and one for the rest).

What changes when the model is sharded, and how rlvr keeps the run the same run:
- **Gradients are summed, not averaged**, over processes (divide factor 1): the loss already
  divides by global counts (train/distributed.py), as with `ddp`.
- **Every process runs the same number of forwards and backwards**, because each layer's
  weights are gathered by a collective: a process with fewer micro-batches than another runs
  empty ones (`Lockstep`), whose loss is 0 and whose gradient is 0.
- **Sampling reads the policy's whole weights, gathered once per sampling phase** (`Lender`):
  sampling lengths differ between processes and cannot run in lockstep through the units'
  hooks, so every unit is gathered before the phase (one all-gather each) and the engine's
  model, a skeleton on the meta device, samples from those tensors (the lean decoder: from its
  own copy of each layer, made while that layer alone is gathered). They are freed again
  before the update, whose peak never holds them.
- **The update's shared-prompt forward** (engine/shared.py: each group's prompt once) runs
  as forward methods of the same units, so a layer's weights are gathered around its step there
  as around its own forward.
- **Only the main process reads the weights from disk**: the others build the model on the meta
  device (no memory), shard it, and receive their shard from the main process tensor by tensor
  (`set_model_state_dict(..., broadcast_from_rank0=True)`); buffers that are not saved (rotary
  tables) are broadcast too. With 8 processes on a node, a 70B policy in fp32 is 280 GB of host
  memory once, not eight times.
- **Checkpoints are written as shards** by every process (train/shards.py, DCP), and DCP
  reshards them on load, so a run resumes with another number of processes; `final/` is
  gathered weight by weight and written by the main process (train/final_shards.py: a
  `save_pretrained` folder, never the whole model on one process).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch

from rlvr_cli.engine.precision import DTYPES
from rlvr_cli.engine.shared import register_units


def shard(model: Any, parallel: Any, compute: torch.dtype | None, reduce: str) -> Any:
    """Shard `model` in place over every process, one unit per decoder layer (the classes the
    model names in `_no_split_modules`) and one for the embeddings, final norm and head."""
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    if parallel.cpu_offload and not torch.cuda.is_available():
        from rlvr_cli.errors import RlvrError

        raise RlvrError(
            "parallel.cpu_offload moves the sharded state from GPU to CPU memory; this run has no GPU, its state "
            "is in CPU memory already: drop cpu_offload for CPU runs"
        )
    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    options: dict[str, Any] = {
        "mp_policy": MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=DTYPES[reduce]),
        "offload_policy": CPUOffloadPolicy() if parallel.cpu_offload else OffloadPolicy(),
        "reshard_after_forward": parallel.reshard_after_forward,
    }
    layers = [m for m in model.modules() if type(m).__name__ in layer_classes]
    for layer in layers:
        fully_shard(layer, **options)
    fully_shard(model, **options)
    register_units(model, layers)  # the update's shared-prompt forward runs through the same units
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # a plain sum (gloo has no pre-multiplied sum)
    return model


def units(model: Any) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def whole_for_pass(model: Any, after: bool) -> Iterator[None]:
    """A pass of forwards without a backward over several micro-batches (the reference's log-probs,
    the old ones): each unit is gathered at its first forward and kept for the pass, one
    all-gather a unit instead of one a micro-batch, then resharded (`after`: the contract's
    `reshard_after_forward` again). Its memory is the whole weights in the compute dtype, which
    every sampling phase gathers anyway (`Lender`)."""
    if not is_sharded(model):
        yield
        return
    model.set_reshard_after_forward(False)
    try:
        yield
    finally:
        model.set_reshard_after_forward(after)
        for unit in units(model):
            unit.reshard()


def before_backward(model: Any, parallel: Any, last: bool) -> None:
    """Before each backward of a training pass of a sharded policy. `reshard_after_forward: false`:
    a unit gathered for the first micro-batch's forward stays gathered through every backward of
    the pass but the `last` (one all-gather a unit a pass); otherwise FSDP2 gathers it again for
    each forward and each backward. `accumulate_whole_gradients`: the gradients of every
    micro-batch but the last accumulate whole, and the last's backward reduce-scatters the sum
    (one reduce-scatter a unit a pass, not one a micro-batch)."""
    if not parallel.reshard_after_forward:
        model.set_reshard_after_backward(last)
    if parallel.accumulate_whole_gradients:
        model.set_requires_gradient_sync(last)


def is_sharded(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def meta_model(source: str, revision: str | None, dtype: torch.dtype) -> Any:
    """The model `source` describes, on the meta device: its structure without memory or a read of
    its weights (what every process but the main one starts from)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(source, revision=revision, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def meta_loader(source: str, revision: str | None, dtype: torch.dtype, _device: torch.device) -> Any:
    """`setup.load_model`'s stand-in on every process but the main one."""
    return meta_model(source, revision, dtype)


def shard_loaded(models: list[Any], main: bool, hp: Any, compute: torch.dtype | None, device: torch.device) -> None:
    """Shard each model (`hp.strategy`), then give every process its shard of what the main
    process loaded (a collective). The main process keeps its loaded tensors until then."""
    for model in models:
        whole = model.state_dict() if main else None
        shard(model, hp.strategy, compute, hp.dtypes.reduce)
        fill_from_main(model, whole, device)
        del whole


def unsaved_buffers(model: Any) -> list[str]:
    """Buffers a state dict leaves out (rotary tables): rebuilt by each process from its config
    normally, broadcast here because a meta model holds none."""
    saved = set(model.state_dict())
    return sorted(name for name, _ in model.named_buffers() if name not in saved)


def fill_from_main(model: Any, whole: dict[str, torch.Tensor] | None, device: torch.device) -> None:
    """After `shard`: every process's shard of the main process's weights (`whole`, its state dict
    taken before sharding; None on the others, whose model is on the meta device), and the
    buffers a state dict leaves out. Strict: a weight the main process does not send is an
    error, never left as the empty memory it was allocated as. A collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if whole is None:
        model.to_empty(device=device)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=True)
    set_model_state_dict(model, whole or {}, options=options)
    for name in unsaved_buffers(model):
        torch.distributed.broadcast(model.get_buffer(name), src=0)


class Lender:
    """The policy's own weights lent to the rollout engine for one sampling phase (a collective,
    the same number of times on every process): every unit gathered (`unshard`, one all-gather
    each, in the compute dtype), its whole tensors set on `own` (the engine's model: a skeleton
    on the meta device with the policy's buffers), then taken back and every unit resharded.
    Between phases nothing whole is held: the update's peak never meets the rollout weights.

    `layer_by_layer` (the lean engine asks for it): where its fused decoder reads `own`, only the
    root unit (embeddings, final norm, head) stays gathered for the phase; each decoder layer is
    gathered, copied by the decoder into the layout it computes fastest with (stacked, packed on
    a CPU), and resharded at once (engine/fused.py `Decoder._lent`). The phase then holds about
    as much as with every unit gathered, and samples as an unsharded run's decoder does."""

    def __init__(self, policy: Any, own: Any) -> None:
        self.policy, self.own, self.active = policy, own, False
        self.units = units(policy)
        self.empty = dict(own.named_parameters(remove_duplicate=False))  # meta: restored after each phase
        for name, buffer in policy.named_buffers(remove_duplicate=False):  # never sharded, never trained
            _place(own, name, buffer, "_buffers")

    @contextlib.contextmanager
    def __call__(self, layer_by_layer: bool = False) -> Iterator[Any]:
        from rlvr_cli.engine.sampler import forget, lend

        self.policy._get_fsdp_state()._lazy_init()  # the root's streams, before any forward has run
        try:
            if layer_by_layer and self._by_layer():
                self.policy.unshard()  # the root unit's own weights alone
                self._lend(self.policy.named_parameters(remove_duplicate=False))
                lend(self.own, self._layer)
            else:
                for unit in self.units:
                    unit.unshard()
                self._lend(self.policy.named_parameters(remove_duplicate=False))  # whole now: set by `unshard`
            self.active = True
            yield self.own
        finally:
            self.active = False
            forget(self.own)  # the decoder's copies of these weights go with them
            for name, empty in self.empty.items():
                _place(self.own, name, empty, "_parameters")
            for unit in self.units:
                unit.reshard()

    def whole_copy(self, device: torch.device) -> Any:
        """A model of the policy's structure with whole weights of its own, in the dtype it is lent
        them in (`sample_ahead` under fsdp2: it samples during the update, while every unit is
        sharded). Empty until its engine's `sync` gathers the policy into it, a tensor at a time
        on every process (engine/engines.py `copy_weights`); tied weights stay tied."""
        model = copy.deepcopy(self.own)  # the policy's buffers copied with it
        made: dict[int, torch.nn.Parameter] = {}
        for name, meta in list(model.named_parameters(remove_duplicate=False)):
            if id(meta) not in made:
                made[id(meta)] = torch.nn.Parameter(torch.empty(meta.shape, dtype=meta.dtype, device=device), False)
            _place(model, name, made[id(meta)], "_parameters")
        model.weights_lent = False  # its own: the lean decoder may copy them into its layout
        return model

    def _by_layer(self) -> bool:
        """Whether the lean decoder reads `own` (not the model's own forward) and every decoder
        layer of it is a unit of its own here."""
        from torch.distributed.fsdp import FSDPModule

        from rlvr_cli.engine.fused import why_not

        if why_not(self.own) is not None or self.policy not in self.units:
            return False
        names = {id(m): n for n, m in self.own.named_modules()}
        layers = [names[id(layer)] for layer in self.own.model.layers]
        return all(isinstance(self.policy.get_submodule(name), FSDPModule) for name in layers)

    def _lend(self, named: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Set the whole tensors among `named` on `own` (the others are still shards)."""
        from torch.distributed.tensor import DTensor

        for name, tensor in named:
            if not isinstance(tensor, DTensor):
                _place(self.own, name, tensor, "_parameters")

    @contextlib.contextmanager
    def _layer(self, name: str) -> Iterator[None]:
        """One decoder layer's unit gathered and set on `own`, then taken back and resharded."""
        unit = self.policy.get_submodule(name)
        unit.unshard()
        try:
            self._lend(unit.named_parameters(prefix=name, remove_duplicate=False))
            yield
        finally:
            for param, _ in unit.named_parameters(prefix=name, remove_duplicate=False):
                _place(self.own, param, self.empty[param], "_parameters")
            unit.reshard()


def _place(model: Any, name: str, tensor: torch.Tensor, where: str) -> None:
    owner, _, leaf = name.rpartition(".")
    getattr(model.get_submodule(owner), where)[leaf] = tensor


def rollout_model(
    policy: Any, source: str, revision: str | None, dtype: torch.dtype, adapt: Any = None
) -> tuple[Any, Lender]:
    """The rollout engine's model for a sharded policy: its structure on the meta device (`adapt`:
    with the policy's adapter layers attached), which holds the policy's own whole weights only
    while they are lent (`Lender`)."""
    own = meta_model(source, revision, dtype)
    if adapt is not None:
        adapt(own)
    own.requires_grad_(False)
    own.weights_lent = True  # the lean sampler reads them as they are (engine/fused.py): no copy
    return own, Lender(policy, own)


class Lockstep:
    """Empty forwards and backwards for a process with fewer micro-batches than the others."""

    def __init__(self, pad_id: int, device: torch.device) -> None:
        from rlvr_cli.engine.forward import Batch

        ids = torch.full((1, 2), pad_id, dtype=torch.long, device=device)
        self.batch = Batch(ids, torch.ones_like(ids), 1, torch.ones(1, 1, device=device))

    def forward(self, model: Any) -> torch.Tensor:
        from rlvr_cli.engine.forward import token_logprobs

        logp, _ = token_logprobs(model, self.batch, 1.0)
        return logp.sum() * 0.0  # a loss of 0 whose gradient, summed with the others', adds 0
