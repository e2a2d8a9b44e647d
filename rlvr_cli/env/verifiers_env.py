"""A `verifiers` (v1) taskset as single-turn rlvr tasks and their verifier.

`rlvr import verifiers MODULE:Taskset --out tasks.jsonl` writes each task the taskset loads as a
row: its `id` (the data's `id`, else its `name`, else its position), its `prompt` (the data's
prompt, with its system prompt as a first system message), its `answer` when the data has one
(the audits make their arms from it), and under `verifiers` the taskset, its config and the
task's data — and prints the reward components with verifiers' weights.
`environment.verifier: rlvr_cli.env.verifiers_env:verify` then judges a response as verifiers
would: the task is rebuilt from its row, a trace holds the prompt and the response as the one
sampled assistant message, and the task's own `score` runs its `@reward` (and `@metric`)
methods; each reward is a component (its score), the reward their weighted sum. A reward method
that raises is a `verifier_error`, never a 0; one that needs a runtime (a sandbox) cannot run
here and is left out by verifiers — the contract's components must then not name it. Judges a
task's config plugs call a model: they are refused (a model judge is `environment.judge` in
rlvr, audited as one). The
taskset's module must be importable (installed, as `vf-init` environment packages are, or on
PYTHONPATH)."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import verifiers.v1 as vf  # at import: a verifier worker pays it when it loads the verifier, not in a verdict's time
from verifiers.v1.configs.taskset import TasksetConfig
from verifiers.v1.utils.generic import concrete_type

from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError

FIELD = "verifiers"
_CLASSES: dict[str, Any] = {}


def taskset_class(spec: str) -> Any:
    """`module:Class` → the Taskset subclass (imported once per process)."""
    if spec not in _CLASSES:
        module, _, name = spec.partition(":")
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as error:
            raise RlvrError(f"cannot load the verifiers taskset {spec}: {error}") from None
        if not (isinstance(found, type) and issubclass(found, vf.Taskset)):
            raise RlvrError(f"{spec} is not a verifiers.v1 Taskset subclass")
        _CLASSES[spec] = found
    return _CLASSES[spec]


def _config(cls: Any, values: dict[str, Any]) -> Any:
    return (concrete_type(cls, TasksetConfig) or TasksetConfig)(**values)


def rows(spec: str, config: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """(every task of the taskset as an rlvr row, {reward name: weight})."""
    cls = taskset_class(spec)
    taskset = cls(_config(cls, config))
    out, weights = [], {}
    for task in taskset:
        judged = [c.id or c.name or type(c).__name__ for c in task.config.judges]
        if judged:
            raise RlvrError(
                f"the taskset {spec} plugs judges ({', '.join(judged)}) that call a model: in rlvr a model judge is "
                "`environment.judge`, audited as one (docs/verifiers.md); import the taskset without them"
            )
        data = task.data.model_dump(mode="json", exclude_none=True)
        prompt = task.data.prompt
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else _messages(prompt)
        if task.data.system_prompt:
            messages = [{"role": "system", "content": task.data.system_prompt}, *messages]
        ident = task.data.id or task.data.name or f"task-{task.data.idx}"
        row = {"id": ident, "prompt": messages, FIELD: {"taskset": spec, "config": config, "data": data}}
        if isinstance(data.get("answer"), (str, int, float)):  # the reference the audits' arms are made from
            row["answer"] = data["answer"]
        out.append(row)
        for fn in task.hooks("reward"):
            weights[fn.__name__] = float(getattr(fn, "_vf_weight", 1.0))
    return out, weights


def _messages(prompt: Any) -> list[dict[str, str]]:
    from verifiers.v1.types import content_text

    return [{"role": str(m.role), "content": content_text(m.content)} for m in prompt or []]


def verify(task: dict[str, Any], response: str) -> Verdict:
    """The response judged by the task's own verifiers rewards (see the module's docstring)."""
    source = task.get(FIELD)
    if not isinstance(source, dict) or not isinstance(source.get("taskset"), str):
        return Verdict("verifier_error", detail=f"the task has no `{FIELD}` field (rlvr import verifiers writes it)")
    cls = taskset_class(source["taskset"])
    config = _config(cls, source.get("config") or {})
    task_cls = concrete_type(cls, vf.Task)
    data = task_cls.data_type()(**source.get("data", {}))
    built = task_cls(data, config.task if hasattr(config, "task") else None)
    if built.config.judges:
        return Verdict("verifier_error", detail="the task plugs a judge that calls a model: use environment.judge")
    trace = vf.Trace(task=vf.TraceTask(type=task_cls.__name__, data=data), agent=vf.AgentInfo(config=vf.AgentConfig()))
    trace.nodes = [
        vf.MessageNode(message=vf.UserMessage(content=data.prompt_text)),
        vf.MessageNode(parent=0, sampled=True, message=vf.AssistantMessage(content=response)),
    ]
    try:
        asyncio.run(built.score(trace))
    except Exception as error:  # the task's own reward code failed: no reward
        return Verdict("verifier_error", detail=f"verifiers scoring raised {type(error).__name__}: {str(error)[:300]}")
    scores = {name: float(r.score) for name, r in trace.rewards.items() if r is not None}
    if len(scores) < len(trace.rewards):
        missing = sorted(n for n, r in trace.rewards.items() if r is None)
        return Verdict("verifier_error", detail=f"verifiers recorded no score for {', '.join(missing)}")
    components = {**{k: float(v) for k, v in trace.metrics.items() if v is not None}, **scores}
    return Verdict("ok", float(trace.reward), components)
