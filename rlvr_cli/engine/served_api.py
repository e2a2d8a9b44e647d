"""How rlvr asks each serving engine, over HTTP, for what every rollout engine returns.

- **vLLM** (`vllm serve`, its OpenAI-compatible server): `GET /v1/models` names the served
  model; `POST /v1/completions` with the prompt as token ids, `return_token_ids` and
  `logprobs: 0` returns the sampled ids and each one's log-prob; weights are loaded from a
  folder by `POST /collective_rpc` (`update_config` to the folder, then `reload_weights`) and
  `POST /reset_prefix_cache` — routes vLLM serves with `VLLM_SERVER_DEV_MODE=1`.
- **SGLang** (its native server): `GET /get_model_info` names the model path; `POST /generate`
  with `input_ids` and `return_logprob` returns `meta_info.output_token_logprobs`
  (`[log-prob, id, text]` per token); weights are loaded by `POST /update_weights_from_disk`,
  and `/get_model_info` then names the folder loaded.

Both are asked for exactly the trainer's distribution: the contract's temperature, top-p and
top-k, its stop tokens and no others (`ignore_eos`: the model's own end token stops a response
only when the renderer lists it), special tokens kept, one seed per response.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from rlvr_cli.engine.types import EngineFailed, SamplingParams


class Caller(Protocol):
    url: str
    served: str  # the name the server answers for (server.model)
    weights_dir: Path  # where rlvr writes the weights it hands the server

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...


class Answer:
    """One response as the server sent it: token ids, log-probs and its own finish reason."""

    def __init__(self, ids: Any, logprobs: Any, finish: Any) -> None:
        self.ids, self.logprobs, self.finish = ids, logprobs, finish


def _field(data: Any, *keys: str | int) -> Any:
    """data[k0][k1]…, or EngineFailed naming the first key the answer lacks."""
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            raise EngineFailed(f"its answer has no {'.'.join(map(str, keys))}") from None
    return data


class VllmApi:
    name = "vllm"
    routes = "POST /collective_rpc update_config + reload_weights, /reset_prefix_cache (VLLM_SERVER_DEV_MODE=1)"

    def identify(self, server: Caller) -> str:
        served = [m.get("id") for m in _field(server.call("GET", "/v1/models"), "data") if isinstance(m, dict)]
        if server.served not in served:
            raise EngineFailed(
                f"it serves {', '.join(map(str, served)) or 'no model'}, not {server.served} (server.model)"
            )
        try:
            return str(server.call("GET", "/version").get("version", "unknown"))
        except (EngineFailed, AttributeError):
            return "unknown"

    def request(self, model: str, prompt: list[int], params: SamplingParams, seed: int) -> tuple[str, dict[str, Any]]:
        greedy = params.temperature == 0
        return "/v1/completions", {
            "model": model,
            "prompt": list(prompt),
            "n": 1,
            "max_tokens": params.max_new_tokens,
            "temperature": 0.0 if greedy else params.temperature,
            "top_p": 1.0 if greedy else params.top_p,
            "top_k": -1 if greedy or not params.top_k else params.top_k,
            **NEUTRAL,  # what the request leaves out, the server takes from generation_config.json
            "seed": seed,
            "stop_token_ids": list(params.stop_ids),
            "ignore_eos": True,
            "skip_special_tokens": False,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }

    def answer(self, model: str, data: Any) -> Answer:
        if isinstance(data, dict) and data.get("model", model) != model:
            raise EngineFailed(f"it answered as model {data.get('model')!r}, not {model} (server.model)")
        choices = _field(data, "choices")
        if not isinstance(choices, list) or len(choices) != 1:
            raise EngineFailed(f"it returned {len(choices) if isinstance(choices, list) else 'no'} choices for 1 asked")
        choice = choices[0]
        logprobs = _field(choice, "logprobs", "token_logprobs")
        ids = choice.get("token_ids") if isinstance(choice, dict) else None
        if ids is None:  # older servers: ids only as "token_id:N" strings
            ids = [_token_id(t) for t in _field(choice, "logprobs", "tokens")]
        return Answer(ids, logprobs, choice.get("finish_reason"))

    def load(self, server: Caller, folder: str) -> None:
        for method, args in (("update_config", [{"model_config": {"model": folder}}]), ("reload_weights", [])):
            try:
                server.call("POST", "/collective_rpc", {"method": method, "args": args})
            except EngineFailed as exc:
                if "HTTP 404" in str(exc):
                    raise EngineFailed(
                        "it has no /collective_rpc route, so it cannot load the weights of each optimizer step: "
                        "start `vllm serve` with VLLM_SERVER_DEV_MODE=1"
                    ) from None
                raise
        server.call("POST", "/reset_prefix_cache")  # cached prefixes hold the old weights' keys and values


#: Settings that reshape the distribution, each at the value that leaves it as the model gives it.
#: A request must say them: vLLM (`--generation-config auto`, its default) and SGLang fill what a
#: request leaves out from the model's generation_config.json (Qwen2.5-Instruct's repetition_penalty
#: 1.05), and the sampled tokens would no longer follow the log-probs the trainer counts.
NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_p": 0.0}


def _token_id(token: Any) -> int:
    text = str(token)
    if not text.startswith("token_id:"):
        raise EngineFailed(f"its tokens are not ids ({text[:40]!r}): it ignored return_tokens_as_token_ids")
    try:
        return int(text.removeprefix("token_id:"))
    except ValueError:
        raise EngineFailed(f"its token {text[:40]!r} is not an id") from None


class SglangApi:
    name = "sglang"
    routes = "POST /update_weights_from_disk"

    def identify(self, server: Caller) -> str:
        path = _field(server.call("GET", "/get_model_info"), "model_path")
        if path != server.served and Path(str(path)).parent != server.weights_dir:  # (weights a run handed it)
            raise EngineFailed(f"it serves {path}, not {server.served} (server.model)")
        try:
            return str(server.call("GET", "/get_server_info").get("version", "unknown"))
        except (EngineFailed, AttributeError):
            return "unknown"

    def request(self, model: str, prompt: list[int], params: SamplingParams, seed: int) -> tuple[str, dict[str, Any]]:
        greedy = params.temperature == 0
        sampling = {
            "max_new_tokens": params.max_new_tokens,
            "temperature": 0.0 if greedy else params.temperature,
            "top_p": 1.0 if greedy else params.top_p,
            "top_k": -1 if greedy or not params.top_k else params.top_k,
            **NEUTRAL,
            "stop_token_ids": list(params.stop_ids),
            "ignore_eos": True,
            "skip_special_tokens": False,
            "no_stop_trim": True,
            "sampling_seed": seed,
        }
        return "/generate", {"input_ids": list(prompt), "sampling_params": sampling, "return_logprob": True}

    def answer(self, model: str, data: Any) -> Answer:
        tokens = _field(data, "meta_info", "output_token_logprobs")
        if not isinstance(tokens, list) or not all(isinstance(t, list | tuple) and len(t) >= 2 for t in tokens):
            raise EngineFailed("its output_token_logprobs are not [log-prob, id, …] per token")
        ids, logprobs = [t[1] for t in tokens], [t[0] for t in tokens]
        output = data.get("output_ids")
        if isinstance(output, list) and len(output) != len(ids):
            ids = output  # as many tokens as it says it sampled, and fewer log-probs: refused as such
        elif isinstance(output, list) and output != ids:
            raise EngineFailed("its output_ids disagree with the ids of its output_token_logprobs")
        finish = _field(data, "meta_info").get("finish_reason")
        return Answer(ids, logprobs, finish.get("type") if isinstance(finish, dict) else finish)

    def load(self, server: Caller, folder: str) -> None:
        done = server.call("POST", "/update_weights_from_disk", {"model_path": folder})
        if not isinstance(done, dict) or done.get("success") is not True:
            message = done.get("message") if isinstance(done, dict) else done
            raise EngineFailed(f"it did not load the weights in {folder}: {message}")
        loaded = _field(server.call("GET", "/get_model_info"), "model_path")
        if loaded != folder:
            raise EngineFailed(f"it reports the weights of {loaded} after loading {folder}")


def api_for(engine: str) -> VllmApi | SglangApi:
    return VllmApi() if engine == "vllm" else SglangApi()
