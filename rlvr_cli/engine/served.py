"""A serving engine already running (`vllm serve`, SGLang) as the rollout engine
(`hyperparameters.sampling.server`): prompts go as token ids, one request per response with a
seed of its own, many in flight; token ids and per-token log-probs come back.

Weights reach the server by files: after each optimizer step the policy (an adapter merged in)
is written as safetensors to a new folder of `server.weights_dir`, the server is asked to load
it (engine/served_api.py names the routes), and the previous folder is removed. The plan says
so, and `time_engine_weights_s` measures what it costs every step.

Nothing the server says is trusted: an answer for another model, a wrong number of tokens or
log-probs, a token outside the vocabulary, a log-prob that is not one, tokens past a stop
token, a response that ends without a stop token before the limit — each stops the run
(`EngineFailed`, exit 1) with what the server said, as do a refused connection (after
`server.retries` attempts) and a request that outlasts `server.timeout_s`.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlvr_cli.engine.served_api import Answer, api_for
from rlvr_cli.engine.types import EngineFailed, Generation, SamplingParams

TRANSIENT = (502, 503, 504)


class ServedEngine:
    remote = True  # samples from its own copy of the weights: every new revision must be handed over
    holds_weights = True  # (so a sharded policy hands them over at each sync, never lends them)

    def __init__(self, engine: str, server: Any, model: Any, weights_dir: Path | None = None) -> None:
        import httpx

        self.name, self.api, self.policy = engine, api_for(engine), model
        self.url, self.served, self.settings = server.url.rstrip("/"), server.model, server
        self.http = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(server.timeout_s, connect=min(server.timeout_s, 10.0)),
            limits=httpx.Limits(max_connections=server.concurrency, max_keepalive_connections=server.concurrency),
        )
        if weights_dir is None:  # an evaluation: a folder of its own, removed with the engine
            weights_dir = Path(tempfile.mkdtemp(prefix="rlvr-engine-weights-"))
            weakref.finalize(self, shutil.rmtree, weights_dir, True)
        self.weights_dir = Path(weights_dir).resolve()
        self.vocab = int(getattr(model.config, "vocab_size", 0) or 0)
        self.pool: ThreadPoolExecutor | None = None
        self.held: Path | None = None  # the folder whose weights the server holds (None: not handed any yet)
        self.pushes, self.push_seconds = 0, 0.0
        # whether this process hands the server its weights: under torchrun process 0 does, and the
        # others sample from what it handed over (PolicyEngine.sync waits for it); a sharded
        # policy's are written by `write_sharded(model, folder, writer)`, which every process calls
        self.writer = True
        self.write_sharded: Any = None
        self.version = self._identify()

    def _identify(self) -> str:
        try:
            return self.api.identify(self)
        except EngineFailed as exc:
            raise EngineFailed(f"the {self.name} server at {self.url}: {exc}") from None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request, again on a refused connection or a 502/503/504 (server.retries times)."""
        import httpx

        last = ""
        for attempt in range(self.settings.retries + 1):
            if attempt:
                time.sleep(min(0.25 * 2**attempt, 8.0))
            try:
                reply = self.http.request(method, path, json=body)
            except httpx.TimeoutException:
                raise EngineFailed(
                    f"{path} did not answer within {self.settings.timeout_s:g} s (server.timeout_s)"
                ) from None
            except httpx.TransportError as exc:
                last = f"{path} could not be reached ({type(exc).__name__}: {exc})"
                continue
            if reply.status_code in TRANSIENT:
                last = f"{path} answered HTTP {reply.status_code}"
                continue
            if reply.status_code >= 400:
                raise EngineFailed(f"{path} answered HTTP {reply.status_code}: {reply.text[:300]}")
            try:
                return reply.json()
            except ValueError:
                raise EngineFailed(f"{path} answered with something that is not JSON: {reply.text[:200]!r}") from None
        tries = self.settings.retries + 1
        raise EngineFailed(f"{last}, {tries} attempt{'s' * (tries > 1)} (server.retries)")

    # ── sampling ──────────────────────────────────────────────────────────────────────

    def sample(self, prompts: list[list[int]], params: SamplingParams, seed: int) -> list[Generation]:
        if self.held is None:  # nothing handed over yet (an evaluation): the weights it was built with
            self.load_weights(self.policy)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="rlvr-served")
        seeds = [seed * 1_000_003 + i for i in range(len(prompts))]  # per row: a draw never depends on its neighbours
        try:
            return list(self.pool.map(lambda row: self._one(*row, params), zip(prompts, seeds, strict=True)))
        except EngineFailed as exc:
            raise EngineFailed(f"the {self.name} server at {self.url}: {exc}") from None

    def _one(self, prompt: list[int], seed: int, params: SamplingParams) -> Generation:
        path, body = self.api.request(self.served, prompt, params, seed)
        ids, logprobs, finish = self._checked(self.api.answer(self.served, self.call("POST", path, body)), params)
        return Generation(ids, [1] * len(ids), finish, seed, logprobs)

    def _checked(self, answer: Answer, params: SamplingParams) -> tuple[list[int], list[float], str]:
        """The answer's tokens and log-probs, or EngineFailed saying what is wrong with them."""
        ids, logps = answer.ids, answer.logprobs
        if not isinstance(ids, list) or not isinstance(logps, list):
            raise EngineFailed("its answer lacks a list of token ids or of log-probs")
        if len(ids) != len(logps):
            raise EngineFailed(f"it returned {len(ids)} tokens with {len(logps)} log-probs")
        if not 1 <= len(ids) <= params.max_new_tokens:
            raise EngineFailed(f"it returned {len(ids)} tokens; 1 to {params.max_new_tokens} were asked for")
        for token in ids:
            if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < (self.vocab or token + 1):
                raise EngineFailed(f"it returned the token {token!r}, outside the policy's {self.vocab} ids")
        for value in logps:
            if not isinstance(value, int | float) or not math.isfinite(value) or value > 1e-3:
                raise EngineFailed(f"it returned the log-prob {value!r}, which no probability has")
        stops = set(params.stop_ids)
        first = next((i for i, token in enumerate(ids) if token in stops), None)
        if first is not None and first < len(ids) - 1:
            raise EngineFailed(f"it went on {len(ids) - 1 - first} tokens past the stop token {ids[first]}")
        if first is None and len(ids) < params.max_new_tokens:
            raise EngineFailed(
                f"it stopped after {len(ids)} of {params.max_new_tokens} tokens without a stop token "
                f"(finish reason {answer.finish!r})"
            )
        return ids, [float(v) for v in logps], "stop" if first is not None else "length"

    # ── weights ───────────────────────────────────────────────────────────────────────

    def load_weights(self, model: Any) -> None:
        """The policy's weights into a new folder, loaded by the server; the previous folder goes.
        A sharded policy's (FSDP2) are written weight by weight as every process gathers each one
        (train/final_shards.py): every process calls this, the writer alone writes and hands over."""
        from rlvr_cli.engine.adapted import is_adapted, merged_state

        sharded = any(hasattr(p, "full_tensor") for p in model.parameters())
        if not self.writer and not sharded:  # another process of the run hands them over
            self.held, self.policy = self.weights_dir, model
            return
        started = time.perf_counter()
        self.pushes += 1
        name = f"revision-{os.getpid()}-{self.pushes:06d}"
        folder, partial = self.weights_dir / name, self.weights_dir / f".{name}.partial"
        if self.writer:
            self.weights_dir.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(partial, ignore_errors=True)
        if sharded:
            self.write_sharded(model, partial, self.writer)  # every process gathers each weight, the writer writes
            if not self.writer:
                self.held, self.policy = self.weights_dir, model
                return
        else:
            state = merged_state(model) if is_adapted(model) else None  # the base's names, the adapter merged in
            model.save_pretrained(partial, state_dict=state, safe_serialization=True)
        partial.rename(folder)  # the server never sees a half-written folder
        try:
            self.api.load(self, str(folder))
        except EngineFailed as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise EngineFailed(f"the {self.name} server at {self.url}: {exc}") from None
        if self.held is not None:
            shutil.rmtree(self.held, ignore_errors=True)
        self.held, self.policy = folder, model
        self.push_seconds += time.perf_counter() - started

    def take_push_seconds(self) -> float:
        """Seconds spent handing weights over since the last call (a step's `time_engine_weights_s`)."""
        spent, self.push_seconds = self.push_seconds, 0.0
        return spent

    def describe(self) -> str:
        from rlvr_cli.engine.adapted import weight_bytes

        size = weight_bytes(self.policy) / 2**30  # (an adapter's own tensors are left out: slightly less)
        return (
            f"{self.name} {self.version} server at {self.url} (model {self.served}; weights handed over by files "
            f"after every optimizer step, {size:.3g} GiB written to {self.weights_dir} and loaded by "
            f"{self.api.routes}: time_engine_weights_s says what it costs)"
        )

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(Exception):
            self.http.close()
