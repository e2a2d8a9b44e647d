"""Rollout engines: what samples groups of responses for the trainer, the evaluations and
the audits.

An engine takes prompt ids, the contract's sampling parameters and stop tokens, and a seed;
it returns, per prompt, the token ids through the first stop token, the per-token sampling
log-probs and the finish reason (`Generation`). `load_weights(model)` gives it the weights
an optimizer step produced (an engine that samples from the trainer's own model has nothing
to do; one holding a copy or living on another device copies them). `describe()` is what the
plan and the records name.

`PolicyEngine` is how the rest of rlvr holds an engine: built once per run (or per evaluation),
it knows which revision of the weights it holds, receives them after every optimizer step
(`sync`), and refuses to sample for any other revision — so a sample's recorded revision is
the one that drew it, whatever the engine.

- `lean`: rlvr's decode loop (`engine/sampler.py`), the default on CPU and small GPUs.
- `transformers`: transformers' `generate`.
- `vllm`: vLLM colocated with the trainer (the `vllm` extra; needs a GPU).
- `vllm` or `sglang` with `sampling.server`: a serving engine already running, over HTTP
  (`engine/served.py`), handed the weights of every optimizer step by files.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Protocol

from rlvr_cli.engine.hf import transformers_generate
from rlvr_cli.engine.types import Generation, SamplingParams


class RolloutEngine(Protocol):
    name: str

    def sample(self, prompts: list[list[int]], params: SamplingParams, seed: int) -> list[Generation]: ...

    def load_weights(self, model: Any) -> None: ...

    def describe(self) -> str: ...


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


class LeanEngine:
    name = "lean"

    def __init__(self, model: Any) -> None:
        self.model = model

    def sample(self, prompts: list[list[int]], params: SamplingParams, seed: int) -> list[Generation]:
        from rlvr_cli.engine.fused import why_not
        from rlvr_cli.engine.sampler import lean_sample

        with _cast_for_call(self.model) if why_not(self.model) is not None else nullcontext():
            rows = lean_sample(
                self.model,
                prompts,
                max_new_tokens=params.max_new_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
                stop_ids=list(params.stop_ids),
                pad_id=params.pad_id,
                seed=seed,
            )
        return [Generation(ids, [1] * len(ids), finish, seed, logps) for ids, logps, finish in rows]

    def load_weights(self, model: Any) -> None:
        from rlvr_cli.engine.sampler import weights_written

        if model is not self.model:
            copy_weights(model, self.model)
        weights_written(self.model)  # an optimizer step may not have counted as a write (fused AdamW)

    def describe(self) -> str:
        from rlvr_cli import __version__
        from rlvr_cli.engine.fused import why_not

        reason = why_not(self.model)
        forward = "fused forward" if reason is None else f"the model's own forward ({reason})"
        return f"lean (rlvr {__version__}, {forward})"


class TransformersEngine:
    name = "transformers"

    def __init__(self, model: Any) -> None:
        self.model = model

    def sample(self, prompts: list[list[int]], params: SamplingParams, seed: int) -> list[Generation]:
        with _cast_for_call(self.model):
            return transformers_generate(self.model, prompts, params, seed)

    def load_weights(self, model: Any) -> None:
        if model is not self.model:
            copy_weights(model, self.model)

    def describe(self) -> str:
        return f"transformers {_version('transformers')} generate"


def _cast_for_call(model: Any) -> Any:
    """The model's own forward under the caller's autocast: its weights cast once for this call
    (engine/precision.py); the lean sampler's fused forward makes its own casts (engine/fused.py)."""
    import torch

    from rlvr_cli.engine.precision import device_type, weights_cast_for_call

    device = device_type(model)
    on = device in ("cpu", "cuda") and torch.is_autocast_enabled(device)
    return weights_cast_for_call(model, torch.get_autocast_dtype(device) if on else None)


def copy_weights(source: Any, target: Any) -> None:
    """The source model's weights into the target's, tensor by tensor. A sharded source (FSDP2)
    gathers each tensor in turn (a collective, so every process syncs its engine at the same
    point) and never holds more than one whole tensor beside the target's copy."""
    import torch

    own = target.state_dict()
    with torch.no_grad():
        for name, tensor in source.state_dict().items():
            if name in own:
                whole = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
                own[name].copy_(whole)


class StaleWeights(RuntimeError):
    """An engine was asked to sample for a revision it was not given (a bug, never user input)."""


class PolicyEngine:
    """A rollout engine and the revision of the policy's weights it holds (optimizer steps)."""

    def __init__(self, engine: RolloutEngine, revision: int = 0, compute: Any = None, device: str = "cpu") -> None:
        self.engine, self.revision = engine, revision
        self.compute, self.device = compute, device  # autocast dtype (None: the weights' own) and device type
        self.lender: Any = None  # a sharded policy's (train/sharding.py `Lender`): weights lent per phase

    def lent(self) -> Any:
        """The scope of one sampling phase. A sharded policy's engine holds its weights only
        inside it (a collective: every process enters it at the same points of a step); any
        other engine holds them always, and this is a null scope."""
        import contextlib

        return self.lender(isinstance(self.engine, LeanEngine)) if self._borrows() else contextlib.nullcontext()

    def _borrows(self) -> bool:
        """It samples from its model's tensors, lent per phase (an engine that holds weights of
        its own, vLLM's, is given them at each sync instead)."""
        return self.lender is not None and not getattr(self.engine, "holds_weights", False)

    @classmethod
    def of(
        cls, name: str, model: Any, revision: int = 0, compute: Any = None, server: Any = None, weights: Any = None
    ) -> PolicyEngine:
        """`compute`: the dtype matrix products run in when it differs from the weights' (mixed
        precision); a vLLM engine holds its own weights in its own dtype and ignores it.
        `server`: the contract's `sampling.server` (a served engine), `weights` the folder it is
        handed the weights in (None: a temporary one)."""
        from rlvr_cli.engine.precision import device_type

        return cls(engine_for(name, model, server, weights), revision, compute, device_type(model))

    def sync(self, model: Any, revision: int) -> None:
        """The trainer's weights after the optimizer step that made `revision`. A served engine
        already given this revision is not given it again (writing the weights costs seconds)."""
        if getattr(self.engine, "remote", False) and self.engine.held is not None and revision == self.revision:
            return
        if self.lender is None:
            self.engine.load_weights(model)
        elif not self._borrows():  # a sharded policy's weights, gathered to be handed over (a collective)
            with self.lender() as whole:
                self.engine.load_weights(whole)
        # else: it reads the weights as they are when it is lent them, at each sampling phase
        if getattr(self.engine, "remote", False):
            _all_handed_over()
        self.revision = revision

    def sample(self, prompts: list[list[int]], params: SamplingParams, seed: int, revision: int) -> list[Generation]:
        if revision != self.revision:
            raise StaleWeights(f"the rollout engine holds weights of revision {self.revision}, asked for {revision}")
        if self._borrows() and not self.lender.active:
            raise StaleWeights("the rollout engine of a sharded policy samples only inside `lent()`")
        from rlvr_cli.engine.precision import autocast

        with autocast(self.compute, self.device):
            return self.engine.sample(prompts, params, seed)

    def describe(self) -> str:
        return self.engine.describe()

    def handover(self) -> dict[str, float]:
        """A served engine's `time_engine_weights_s` since the last call; nothing for the others."""
        take = getattr(self.engine, "take_push_seconds", None)
        return {"time_engine_weights_s": take()} if take is not None else {}


def _all_handed_over() -> None:
    """Under torchrun one process hands a served engine the weights; no process samples before
    the server holds them."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def engine_for(name: str, model: Any, server: Any = None, weights: Any = None) -> RolloutEngine:
    """The engine the contract names, sampling from `model` (or from a server holding its weights)."""
    if server is not None:
        from rlvr_cli.engine.served import ServedEngine

        return ServedEngine(name, server, model, weights)
    if name == "lean":
        return LeanEngine(model)
    if name == "transformers":
        return TransformersEngine(model)
    if name == "vllm":
        from rlvr_cli.engine.vllm_engine import VllmEngine

        return VllmEngine(model)
    raise ValueError(f"unknown rollout engine {name!r}")
