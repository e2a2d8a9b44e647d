"""`rlvr tasks generate SPEC --out FILE`: tasks written by a generator model behind an
OpenAI-compatible endpoint, their reference checks built deterministically — a code task's test
cases are what its reference solution returns on the generated inputs, run in the same sandbox
the verifier uses; an answer task's answer is what its reference program prints — each row with
its provenance. Every reply is cached by the hash of its request (a rerun asks nothing again);
rows are appended and synced one by one with a cursor, so a stopped run resumes where it stopped
and only a finished file takes the output's name."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError, UsageProblem
from rlvr_cli.files import atomic_write_json

BUILDER = {"unit_tests": "rlvr-unit-tests/1", "answer_check": "rlvr-answer-program/1", "tool_use": "rlvr-golden-path/1"}
_FENCED = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Spec:
    url: str
    model: str
    temperature: float
    seed: int
    retries: int
    timeout_s: float
    kind: str
    count: int
    prompt: str
    examples: int
    id_prefix: str

    @classmethod
    def read(cls, path: Path) -> Spec:
        from rlvr_cli.contract import yaml12

        try:
            data = yaml12.parse(path.read_text(encoding="utf-8")).data
        except (OSError, yaml12.YamlError) as error:
            raise UsageProblem(f"{path}: {getattr(error, 'message', error)}") from None
        gen = data.get("generator") if isinstance(data, dict) else None
        if not isinstance(gen, dict) or not {"url", "model"} <= set(gen):
            raise UsageProblem(f"{path}: needs generator: {{url, model}} (an OpenAI-compatible endpoint)")
        if data.get("kind") not in BUILDER:
            raise UsageProblem(f"{path}: kind must be unit_tests, answer_check or tool_use")
        if not isinstance(data.get("prompt"), str) or "{examples}" not in data["prompt"]:
            raise UsageProblem(f"{path}: prompt must be text holding {{examples}} (the seed tasks shown)")
        return cls(
            url=str(gen["url"]),
            model=str(gen["model"]),
            temperature=float(gen.get("temperature", 0.8)),
            seed=int(gen.get("seed", 0)),
            retries=int(gen.get("retries", 2)),
            timeout_s=float(gen.get("timeout_s", 120)),
            kind=data["kind"],
            count=int(data.get("count", 10)),
            prompt=data["prompt"],
            examples=int(data.get("examples", 3)),
            id_prefix=str(data.get("id_prefix", "gen")),
        )


def _reply(spec: Spec, messages: list[dict[str, str]], seed: int, cache: Path) -> tuple[str, bool]:
    """The generator's reply text and whether it came from the cache."""
    import openai

    request = {  # the generator is its model: the same model served elsewhere answers from the cache
        "model": spec.model,
        "messages": messages,
        "temperature": spec.temperature,
        "seed": seed,
    }
    key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
    cached = cache / f"{key}.json"
    if cached.is_file():
        return str(json.loads(cached.read_text(encoding="utf-8"))["reply"]), True
    client = openai.OpenAI(
        base_url=spec.url, api_key=os.environ.get("OPENAI_API_KEY", "unused"), timeout=spec.timeout_s
    )
    try:
        answer = client.with_options(max_retries=spec.retries).chat.completions.create(
            model=spec.model,
            messages=messages,
            temperature=spec.temperature,
            seed=seed,  # type: ignore[arg-type]
        )
        text = answer.choices[0].message.content  # type: ignore[union-attr]
    except Exception as error:
        from rlvr_cli.audit.endpoint import said

        raise said(spec.url, spec.timeout_s, error) from None
    cache.mkdir(parents=True, exist_ok=True)
    atomic_write_json(cached, {"request": request, "reply": text or ""}, durable=False)
    return text or "", False


def parse_reply(text: str) -> dict[str, Any]:
    """The one JSON object a reply holds (bare, or in a ```json block)."""
    found = _FENCED.findall(text)
    try:
        data = json.loads(found[-1] if found else text)
    except ValueError:
        raise ValueError("the reply is not one JSON object") from None
    if not isinstance(data, dict) or not isinstance(data.get("prompt"), str) or not data["prompt"].strip():
        raise ValueError("the reply's JSON has no prompt")
    return data


def golden_path(client: Any, data: dict[str, Any], best: float, weigh: Any) -> dict[str, Any]:
    """A tool-use task whose reference solution (its calls and final message) is replayed against
    the resources server: the calls with their outputs are its golden path, the server's snapshot
    after them its expected final state; a solution that does not earn the best reward is refused."""
    fields, solution = data.get("fields") or {}, data.get("solution")
    calls = solution.get("calls") if isinstance(solution, dict) else None
    if not isinstance(fields, dict) or not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise ValueError("a tool-use task needs fields (an object) and solution: {calls, final_message}")
    task = {"id": "generated", "prompt": data["prompt"], **fields}
    session = client.seed(task)
    try:
        path = [{**c, "output": client.call(session, str(c.get("tool")), c.get("arguments") or {})} for c in calls]
        _, verdict, after = client.verify_observed(session, str(solution.get("final_message", "")))
    except Exception as error:  # the server's refusal of a call is the reference's failure
        raise ValueError(f"its reference solution fails on the server ({error})") from None
    finally:
        client.close_session(session)
    try:
        reward = weigh(verdict) if verdict.valid else None
    except KeyError as missing:
        raise ValueError(f"its verdict lacks component {missing}") from None
    if reward is None or reward < best - 1e-9:
        raise ValueError(f"its reference solution does not solve it ({verdict.status}: {verdict.detail})")
    final = str(solution.get("final_message", ""))
    return {
        "prompt": data["prompt"],
        **fields,
        "golden_path": path,
        "golden_final_message": final,
        "expected_state": after,
    }


def build(kind: str, data: dict[str, Any], limits: Any, server: Any = None) -> dict[str, Any]:
    """The task's reference check from its reference code, run in the verifier's sandbox (or, for
    tool use, replayed against the resources server)."""
    from rlvr_cli.env.sandbox import run

    if kind == "tool_use":
        if server is None:
            raise ValueError("tool-use tasks are replayed against a resources server")
        client, best, weigh = server
        return golden_path(client, data, best, weigh)

    if kind == "answer_check":
        program = data.get("program")
        if not isinstance(program, str):
            raise ValueError("an answer task needs program: code that prints the answer")
        outcome = run({"mode": "stdio", "cases": [{"stdin": ""}], "code": program}, limits, 30.0)
        result = outcome.cases.get(0) or {}
        answer = str(result.get("stdout", "")).strip()
        if result.get("status") != "done" or result.get("exit") != 0 or not answer:
            raise ValueError("its program printed no answer")
        return {"prompt": data["prompt"], "answer": answer, "solution": program}
    function, solution, inputs = data.get("function"), data.get("solution"), data.get("inputs")
    if not (isinstance(function, str) and isinstance(solution, str) and isinstance(inputs, list) and inputs):
        raise ValueError("a code task needs function, solution and inputs (a list of argument lists)")
    claimed = data.get("cases")  # the generator's own expected values, kept as the claim to check
    if isinstance(claimed, list) and claimed and all(isinstance(c, dict) and "args" in c for c in claimed):
        tests = {"kind": "call", "function": function, "cases": claimed}
        return {"prompt": data["prompt"], "tests": tests, "solution": solution}
    cases = [{"args": a if isinstance(a, list) else [a], "kwargs": {}} for a in inputs]
    outcome = run({"mode": "call", "function": function, "cases": cases, "code": solution}, limits, 30.0)
    built = []
    for i, case in enumerate(cases):
        result = outcome.cases.get(i) or {}
        answer = json.loads(result["value"]) if result.get("status") == "done" and result.get("value") else {}
        if "value" not in answer or answer.get("raised") is not None:
            raise ValueError(f"its solution gave no value for input {case['args']}")
        built.append({"args": case["args"], "expected": answer["value"]})
    tests: dict[str, Any] = {"kind": "call", "function": function, "cases": built}
    if any(isinstance(c["expected"], float) for c in built):
        tests["tolerance"] = 1e-9
    return {"prompt": data["prompt"], "tests": tests, "solution": solution}


def _limits(contract: Any) -> Any:
    from rlvr_cli.env.sandbox import Limits

    ut = contract.environment.unit_tests
    if ut is None:
        return Limits()
    return Limits(ut.case_timeout_s, ut.memory_mb, ut.processes, ut.file_mb, ut.output_kb)


@contextmanager
def _server(contract: Any, folder: Path, kind: str) -> Iterator[Any]:
    """For tool-use tasks, the contract's resources server (client, best reward, weighing)."""
    if kind != "tool_use":
        yield None
        return
    from rlvr_cli.env.scoring import weighted_reward
    from rlvr_cli.env.tool_env import ToolEnv

    if contract.environment.kind != "tool_use":
        raise UsageProblem("kind tool_use needs a tool_use contract (its resources server replays the solutions)")
    with ToolEnv(contract, folder) as env:
        yield env.client, contract.objective.reward.best, lambda v: weighted_reward(contract, v)


def _examples(contract: Any, folder: Path, count: int) -> str:
    from rlvr_cli.contract.tasks import read_split

    shown = read_split(folder / contract.data.splits.train.path, "train")[:count]
    return "\n".join(json.dumps({k: v for k, v in t.items() if k != "id"}, ensure_ascii=False) for t in shown)


def generate(spec: Spec, contract: Any, folder: Path, out: Path, cache: Path) -> dict[str, Any]:
    """Rows into `out` (through `out.partial` and its cursor); what was asked, cached, skipped."""
    partial, cursor = out.with_name(out.name + ".partial"), out.with_name(out.name + ".cursor")
    if out.exists():
        raise UsageProblem(f"{out} exists: remove it or choose another --out (a finished file is never rewritten)")
    start = json.loads(cursor.read_text())["next"] if cursor.is_file() and partial.is_file() else 0
    if start == 0:
        partial.write_text("", encoding="utf-8")
    examples, limits = _examples(contract, folder, spec.examples), _limits(contract)
    asked, skipped = 0, []
    with _server(contract, folder, spec.kind) as server, partial.open("a", encoding="utf-8") as fh:
        for i in range(start, spec.count):
            content = spec.prompt.replace("{examples}", examples).replace("{index}", str(i))
            text, cached = _reply(spec, [{"role": "user", "content": content}], spec.seed + i, cache)
            asked += not cached
            try:
                row = build(spec.kind, parse_reply(text), limits, server)
            except ValueError as error:
                skipped.append({"request": i, "why": str(error)})
            else:
                provenance = {
                    "generator": spec.model,
                    "prompt_sha256": hashlib.sha256(content.encode()).hexdigest(),
                    "seed": spec.seed + i,
                    "temperature": spec.temperature,
                    "builder": BUILDER[spec.kind],
                }
                fh.write(json.dumps({"id": f"{spec.id_prefix}-{i:05d}", **row, "provenance": provenance}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            atomic_write_json(cursor, {"next": i + 1})
    rows = sum(1 for line in partial.read_text(encoding="utf-8").splitlines() if line.strip())
    if not rows:
        raise RlvrError(f"no reply of {spec.count} could be built into a task; first: {skipped[:1]}")
    os.replace(partial, out)
    cursor.unlink()
    return {"rows": rows, "requests": asked, "resumed_at": start, "skipped": skipped}
