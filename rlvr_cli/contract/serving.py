"""`hyperparameters.sampling.server`: a serving engine already running (`vllm serve`, SGLang)
that samples the rollouts over HTTP, and receives the weights after every optimizer step.
engine/served.py speaks to it; docs/contract.md says which routes each engine is asked."""

from collections.abc import Iterator
from typing import Any

from pydantic import Field

from rlvr_cli.contract.sections import Int, Section

SERVED_ENGINES = ("vllm", "sglang")


class Server(Section):
    url: str = Field(
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        description="Where the engine listens, e.g. http://127.0.0.1:8000 (vLLM: its OpenAI-compatible server; "
        "SGLang: its native server).",
    )
    model: str = Field(
        min_length=1,
        description="The name the server answers for: vLLM's served model name (`--served-model-name`, else the "
        "path `vllm serve` was given); SGLang's model_path. An answer for another model stops the run.",
    )
    weights_dir: str | None = Field(
        None,
        min_length=1,
        description="Where the weights of each optimizer step are written for the server to load (safetensors); the "
        "server must read it at the same path. Absent: RUN/engine_weights.",
    )
    timeout_s: float = Field(
        600.0, gt=0, description="The longest one request (a response, a weight update) may take before the run stops."
    )
    concurrency: Int = Field(256, ge=1, le=65536, description="Requests in flight at once (the server batches them).")
    retries: Int = Field(
        2,
        ge=0,
        le=20,
        description="Attempts again on a refused connection or a 502/503/504, with backoff, before the run stops.",
    )


def findings(hyperparameters: Any) -> Iterator[tuple[str, tuple[str, ...], str]]:
    """(code, path, message) of each finding the serving keys make: a server no engine reads,
    an engine reachable only as a server, and what does not run with one yet."""
    sampling, where = hyperparameters.sampling, ("hyperparameters", "sampling")
    if sampling.server is not None and sampling.engine not in SERVED_ENGINES:
        yield (
            "RLV003",
            (*where, "server"),
            f"engine {sampling.engine} samples in the trainer's process: a server would never be asked "
            "(engine vllm or sglang reads it)",
        )
    if sampling.server is None and sampling.engine == "sglang":
        yield "RLV003", where, "missing required key 'server' (required when engine is sglang: rlvr reaches it by URL)"
    if sampling.server is not None and hyperparameters.ahead_steps > 1:
        yield (
            "RLV010",
            ("hyperparameters", "max_policy_lag"),
            f"a served engine holds one revision of the weights, so it samples one step ahead at most; "
            f"max_policy_lag − (optimizer steps a batch − 1) = {hyperparameters.ahead_steps} steps in flight here: "
            f"lower max_policy_lag to {hyperparameters.steps_per_batch}",
        )
