"""`POST /batch`: many session operations in one request, as the trainer needs them.

A training step opens, steps, verifies and closes `prompts_per_step × group_size` sessions;
one HTTP request per operation costs more than the operations themselves. A batch carries
them all:

    POST /batch {"ops": [{"op": "seed", "task": {...}},
                         {"op": "tool", "session_id", "name", "arguments"},
                         {"op": "verify", "session_id", "final_message", "log"?, "snapshots"?},
                         {"op": "snapshot", "session_id"}, {"op": "close", "session_id"}, ...],
                 "timeout_s": 30}
    → {"results": [{"status": 200, "body": {...}} | {"status": 404, "detail": "..."}, ...]}

Each result is what the single endpoint would have answered (same body, same status and
message). Operations on one session run in the order given (so `verify` then `close` is safe
in one batch); different sessions run concurrently. An operation still running after
`timeout_s` is answered 504 — a hung tool does not hold the others back — and so is every
later operation of its session.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from pydantic import ValidationError

from rlvr_cli.env.ops import (
    CloseRequest,
    Failure,
    SeedRequest,
    ToolRequest,
    VerifyRequest,
    close_op,
    seed_op,
    snapshot_op,
    tool_op,
    verify_op,
)

WORKERS = 32
_POOLS: dict[int, ThreadPoolExecutor] = {}  # one per server, kept between batches
_POOLS_LOCK = threading.Lock()


def _pool(server: Any) -> ThreadPoolExecutor:
    with _POOLS_LOCK:
        pool = _POOLS.get(id(server))
        if pool is None:
            pool = _POOLS[id(server)] = ThreadPoolExecutor(WORKERS, thread_name_prefix="rlvr-batch")
        return pool


def run_batch(server: Any, ops: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    """The results of `ops`, in order (see the module's docstring)."""
    results: list[dict[str, Any] | None] = [None] * len(ops)
    lanes: dict[str, list[int]] = {}
    for index, op in enumerate(ops):
        session = op.get("session_id") if isinstance(op, dict) else None
        key = session if isinstance(session, str) and op.get("op") != "seed" else f"#{index}"
        lanes.setdefault(key, []).append(index)
    done = threading.Lock()

    def lane(indices: list[int]) -> None:
        for index in indices:
            result = one(server, ops[index])
            with done:
                if results[index] is None:
                    results[index] = result

    pool = _pool(server)
    _, unfinished = wait([pool.submit(lane, indices) for indices in lanes.values()], timeout=timeout_s)
    if unfinished:  # a hung operation keeps its thread; later batches get a fresh pool
        with _POOLS_LOCK:
            _POOLS.pop(id(server), None)
        pool.shutdown(wait=False, cancel_futures=True)
    late = {"status": 504, "detail": f"no answer within {timeout_s} s"}
    with done:
        for index, result in enumerate(results):
            if result is None:
                results[index] = dict(late)
    return results  # type: ignore[return-value]


def one(server: Any, op: Any) -> dict[str, Any]:
    """One operation's result, as its single endpoint would answer it."""
    if not isinstance(op, dict) or not isinstance(op.get("op"), str):
        return {"status": 422, "detail": "each operation is an object with an 'op' string"}
    fields = {k: v for k, v in op.items() if k != "op"}
    try:
        body = _run(server, op["op"], fields)
    except Failure as failure:
        return {"status": failure.status, "detail": failure.detail}
    except ValidationError as exc:
        return {"status": 422, "detail": f"{op['op']}: {_first_error(exc)}"}
    except Exception as exc:  # the environment's bug: a 500, as alone, and the batch goes on
        return {"status": 500, "detail": f"{op['op']} raised {type(exc).__name__}: {str(exc)[:500]}"}
    return {"status": 200, "body": body}


def _run(server: Any, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    if kind == "seed":
        return seed_op(server, SeedRequest(**fields))
    if kind == "tool":
        name = fields.pop("name", None)
        if not isinstance(name, str):
            raise Failure(422, "tool: 'name' (a string) is required")
        return tool_op(server, name, ToolRequest(**fields))
    if kind == "verify":
        return verify_op(server, VerifyRequest(**fields))
    if kind == "snapshot":
        return snapshot_op(server, CloseRequest(**fields))
    if kind == "close":
        return close_op(server, CloseRequest(**fields))
    raise Failure(422, f"unknown operation {kind!r}; one of seed, tool, verify, snapshot, close")


def _first_error(exc: ValidationError) -> str:
    with contextlib.suppress(Exception):
        error = exc.errors()[0]
        return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
    return str(exc)[:300]
