"""Rollout engines: what samples groups of responses for the trainer, the evaluations and
the audits.

An engine takes prompt ids, the contract's sampling parameters and stop tokens, and a seed;
it returns, per prompt, the token ids through the first stop token, the per-token sampling
log-probs and the finish reason (`Generation`). `load_weights(model)` gives it the weights
an optimizer step produced (an engine that samples from the trainer's own model has nothing
to do; one holding a copy or living on another device copies them). `describe()` is what the
plan and the records name.

- `lean`: rlvr's decode loop (`engine/sampler.py`), the default on CPU and small GPUs.
- `transformers`: transformers' `generate`.
- `vllm`: vLLM colocated with the trainer (the `vllm` extra; needs a GPU).
"""

from __future__ import annotations

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
        from rlvr_cli.engine.sampler import lean_sample

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
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())

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
        return transformers_generate(self.model, prompts, params, seed)

    def load_weights(self, model: Any) -> None:
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())

    def describe(self) -> str:
        return f"transformers {_version('transformers')} generate"


def engine_for(name: str, model: Any) -> RolloutEngine:
    """The engine the contract names, sampling from `model`."""
    if name == "lean":
        return LeanEngine(model)
    if name == "transformers":
        return TransformersEngine(model)
    if name == "vllm":
        from rlvr_cli.engine.vllm_engine import VllmEngine

        return VllmEngine.colocated(model)
    raise ValueError(f"unknown rollout engine {name!r}")
