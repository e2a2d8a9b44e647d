"""A stand-in serving engine for CPU tests and benchmarks: the HTTP API of `vllm serve` (its
OpenAI-compatible completions with token ids and log-probs, `/v1/models`, `/version`, the
dev-mode `/collective_rpc` weight reload and `/reset_prefix_cache`) or of SGLang's native
server (`/generate`, `/get_model_info`, `/update_weights_from_disk`), over a tiny local model
loaded with `from_pretrained`, sampling with rlvr's lean decode loop.

Requests that arrive together are sampled as one batch (as a real server batches them), so the
draw of a request depends on its neighbours, as on a real server. `POST /standin/fault`
makes it misbehave after a number of further sampling requests: the fault cases a run must
survive with a clear error (tests/engine/test_served.py).

    python -m tests.engine.standin --model DIR --served NAME --api vllm --port 8000
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request  # (module level: the routes' annotations are resolved here)
from fastapi.responses import JSONResponse, PlainTextResponse

from rlvr_cli.engine.served_api import NEUTRAL

FAULTS = (
    "hang",  # never answers
    "http_500",  # answers 500
    "unavailable",  # answers 503, every time
    "short_logprobs",  # one log-prob fewer than tokens
    "extra_tokens",  # more tokens than asked for
    "past_stop",  # goes on after a stop token
    "wrong_model",  # answers for another model
    "bad_token",  # a token outside the vocabulary
    "not_json",  # answers with text
    "stale",  # says it loaded new weights and keeps the old ones
    "load_fails",  # refuses to load weights
)


class StandIn:
    def __init__(self, folder: Path, served: str, api: str = "vllm", dev_mode: bool = True) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        torch.manual_seed(0)
        self.model = AutoModelForCausalLM.from_pretrained(folder).eval().requires_grad_(False)
        self.served, self.api, self.dev_mode = served, api, dev_mode
        self.path = str(folder)  # the folder of the weights it holds (SGLang's model_path)
        self.pending_path: str | None = None
        self.fault: str | None = None
        self.fault_after = 0
        self.sampled = 0  # sampling requests answered
        self.loads: list[str] = []  # folders loaded, in order
        self.spans: list[tuple[int, int]] = []  # each sampling request: the loads done when it came and when answered
        self.slow = 0.0  # seconds each batch takes at least (a server busy for longer than the trainer's update)
        self.lock = threading.Lock()  # the model: sampling and loading never overlap
        self.stopping = threading.Event()
        self.counting = threading.Lock()
        self.queue: queue.Queue[tuple[list[int], dict[str, Any], Future]] = queue.Queue()
        threading.Thread(target=self._batcher, daemon=True).start()

    # ── faults ──
    def answered(self) -> None:
        with self.counting:
            self.sampled += 1

    def active(self, fault: str) -> bool:
        return self.fault == fault and self.sampled >= self.fault_after

    # ── sampling, batched ──
    def _batcher(self) -> None:
        while True:
            first = self.queue.get()
            time.sleep(0.002)  # let the requests sent together arrive
            batch = [first]
            while not self.queue.empty() and len(batch) < 512:
                batch.append(self.queue.get_nowait())
            by_params: dict[str, list[Any]] = {}
            for item in batch:
                by_params.setdefault(repr(sorted(item[1].items())), []).append(item)
            for items in by_params.values():
                self._sample(items)

    def _sample(self, items: list[Any]) -> None:
        from rlvr_cli.engine.sampler import lean_sample

        p = items[0][1]
        try:
            with self.lock:
                time.sleep(self.slow)
                rows = lean_sample(
                    self.model,
                    [prompt for prompt, _, _ in items],
                    max_new_tokens=p["max_tokens"],
                    temperature=p["temperature"],
                    top_p=p["top_p"],
                    top_k=max(p["top_k"], 0),
                    stop_ids=p["stop_ids"],
                    pad_id=0,
                    seed=p["seed"],
                )
            for (_, _, future), row in zip(items, rows, strict=True):
                future.set_result(row)
        except Exception as exc:
            for _, _, future in items:
                future.set_exception(exc)

    def sample(self, prompt: list[int], params: dict[str, Any], seed: int) -> tuple[list[int], list[float]]:
        future: Future = Future()
        came = len(self.loads)
        self.queue.put((prompt, {**params, "seed": seed - seed % 1_000_003}, future))  # one seed per batch
        ids, logps, _ = future.result()
        self.spans.append((came, len(self.loads)))
        return ids, logps

    # ── weights ──
    def load(self, folder: str) -> None:
        from safetensors.torch import load_file

        if self.active("stale"):
            self.loads.append(folder)
            return
        state: dict[str, Any] = {}
        for shard in sorted(Path(folder).glob("*.safetensors")):
            state.update(load_file(shard))
        with self.lock:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:
                raise ValueError(f"weights of another model: missing {missing[:3]}, unexpected {unexpected[:3]}")
            if "lm_head.weight" not in state and getattr(self.model.config, "tie_word_embeddings", False):
                self.model.tie_weights()
        self.path = folder
        self.loads.append(folder)


def app(standin: StandIn) -> Any:
    api = FastAPI()

    def misbehaving() -> Any:
        if standin.active("hang"):
            standin.stopping.wait(600)  # until the stand-in stops
        if standin.active("http_500"):
            return JSONResponse({"error": "engine dead"}, status_code=500)
        if standin.active("unavailable"):
            return JSONResponse({"error": "overloaded"}, status_code=503)
        if standin.active("not_json"):
            return PlainTextResponse("<html>502 Bad Gateway</html>")
        return None

    def reshaped(sampling: dict[str, Any]) -> Any:
        """Like vLLM (`--generation-config auto`) and SGLang, a setting a request leaves out would be
        the model's generation_config.json's; this stand-in samples only the distribution as the
        model gives it, so it refuses a request that does not pin each reshaping setting."""
        loose = {k: sampling.get(k) for k, v in NEUTRAL.items() if sampling.get(k) != v}
        return JSONResponse({"error": f"unpinned sampling settings {loose}"}, status_code=400) if loose else None

    def bend(ids: list[int], logps: list[float], max_tokens: int, stops: list[int]) -> tuple[list[int], list[float]]:
        if standin.active("short_logprobs"):
            return ids, logps[:-1]
        if standin.active("extra_tokens"):
            return ids + [ids[-1]] * (max_tokens + 1 - len(ids)), logps + [-1.0] * (max_tokens + 1 - len(ids))
        if standin.active("past_stop") and len(ids) > 1:
            return [stops[0], *ids[1:]], logps
        if standin.active("bad_token"):
            return [standin.model.config.vocab_size + 5, *ids[1:]], logps
        return ids, logps

    @api.post("/standin/fault")
    def set_fault(body: dict[str, Any]) -> dict[str, Any]:
        fault = body.get("fault")
        if fault is not None and fault not in FAULTS:
            return JSONResponse({"error": f"unknown fault {fault}"}, status_code=400)  # type: ignore[return-value]
        standin.fault, standin.fault_after = fault, standin.sampled + int(body.get("after", 0))
        return {"fault": fault, "after": standin.fault_after}

    if standin.api == "vllm":

        @api.get("/v1/models")
        def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": standin.served, "object": "model"}]}

        @api.get("/version")
        def version() -> dict[str, str]:
            return {"version": "standin"}

        @api.post("/v1/completions")
        def completions(body: dict[str, Any]) -> Any:
            if (wrong := misbehaving() or reshaped(body)) is not None:
                return wrong
            greedy = body["temperature"] == 0
            params = {
                "max_tokens": body["max_tokens"],
                "temperature": body["temperature"],
                "top_p": 1.0 if greedy else body["top_p"],
                "top_k": body["top_k"],
                "stop_ids": body["stop_token_ids"],
            }
            ids, logps = standin.sample(body["prompt"], params, body["seed"])
            ids, logps = bend(ids, logps, body["max_tokens"], body["stop_token_ids"])
            standin.answered()  # (after the fault checks: a fault after n requests spares n)
            finish = "stop" if ids and ids[-1] in body["stop_token_ids"] else "length"
            model = "another-model" if standin.active("wrong_model") else standin.served
            choice = {
                "index": 0,
                "text": "",
                "token_ids": ids,
                "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": logps},
                "finish_reason": finish,
            }
            return {"id": "cmpl-standin", "object": "text_completion", "model": model, "choices": [choice]}

        @api.post("/collective_rpc")
        async def collective_rpc(request: Request) -> Any:
            if not standin.dev_mode:
                return JSONResponse({"detail": "Not Found"}, status_code=404)
            body = await request.json()
            if standin.active("load_fails"):
                return JSONResponse({"error": "RuntimeError: shapes do not match"}, status_code=500)
            if body["method"] == "update_config":
                standin.pending_path = body["args"][0]["model_config"]["model"]
            elif body["method"] == "reload_weights":
                standin.load(standin.pending_path or standin.path)
            else:
                return JSONResponse({"error": f"unknown method {body['method']}"}, status_code=400)
            return {"results": [None]}

        @api.post("/reset_prefix_cache")
        def reset_prefix_cache() -> dict[str, bool]:
            if not standin.dev_mode:
                return JSONResponse({"detail": "Not Found"}, status_code=404)  # type: ignore[return-value]
            return {"success": True}

    else:

        @api.get("/get_model_info")
        def model_info() -> dict[str, Any]:
            return {"model_path": standin.path, "tokenizer_path": standin.path, "is_generation": True}

        @api.get("/get_server_info")
        def server_info() -> dict[str, str]:
            return {"version": "standin"}

        @api.post("/generate")
        def generate(body: dict[str, Any]) -> Any:
            if (wrong := misbehaving() or reshaped(body["sampling_params"])) is not None:
                return wrong
            sp = body["sampling_params"]
            params = {
                "max_tokens": sp["max_new_tokens"],
                "temperature": sp["temperature"],
                "top_p": sp["top_p"],
                "top_k": sp["top_k"],
                "stop_ids": sp["stop_token_ids"],
            }
            ids, logps = standin.sample(body["input_ids"], params, sp["sampling_seed"])
            ids, logps = bend(ids, logps, sp["max_new_tokens"], sp["stop_token_ids"])
            standin.answered()
            finish = {"type": "stop", "matched": ids[-1]} if ids[-1] in sp["stop_token_ids"] else {"type": "length"}
            meta = {
                "output_token_logprobs": [[lp, i, None] for lp, i in zip(logps, ids, strict=False)],
                "finish_reason": finish,
                "completion_tokens": len(ids),
            }
            return {"text": "", "output_ids": ids, "meta_info": meta}

        @api.post("/update_weights_from_disk")
        def update_weights_from_disk(body: dict[str, Any]) -> Any:
            if standin.active("load_fails"):
                return JSONResponse({"success": False, "message": "shapes do not match"}, status_code=400)
            standin.load(body["model_path"])
            return {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}

    return api


class Running:
    """The stand-in served by uvicorn on 127.0.0.1 in a thread of this process."""

    def __init__(self, standin: StandIn, port: int = 0) -> None:
        import socket

        import uvicorn

        self.standin = standin
        sock = socket.socket()
        sock.bind(("127.0.0.1", port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app(standin), log_level="error", lifespan="off", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the stand-in server did not start")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.standin.stopping.set()
        self.server.should_exit = True
        self.thread.join(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--served", required=True)
    parser.add_argument("--api", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    import torch
    import uvicorn

    if args.threads:
        torch.set_num_threads(args.threads)
    uvicorn.run(app(StandIn(args.model, args.served, args.api)), host="127.0.0.1", port=args.port, log_level="error")


if __name__ == "__main__":
    main()
