"""Multi-turn tool-use rollouts for training, holdout evaluation, gates and reward audits: every
episode of a batch advances together, one batched sampling call per turn, and the sessions'
seeds, tool calls and verifications go to the resources server as one request each
(`POST /batch`, env/batch.py). `setup` is anything with `contract`, `renderer`, `policy` and
`tokenizer` (the trainer's `Setup`, or a policy loaded for evaluation).

Token in, token out: an episode's sequence is its prompt ids, then for each turn the ids the
policy sampled (loss mask 1, with their sampling log-probs) and the ids the chat template
inserts after them — the end of the assistant turn, the tool results, the next generation
prompt (`ChatRenderer.continuation`, loss mask 0). Nothing sampled is ever re-tokenized.

The token budget: `length.max_response_tokens` counts every token after the prompt, sampled
and inserted, across all turns. An episode ends when the model answers without a tool call
(`answer`), after `environment.max_steps` model calls (`max_steps`), when the budget runs out
(`budget`: finish `length`, handled by `length.on_truncated`), or when the template cannot
continue it (`template`). Then the session is verified (`reward.unit: trajectory` / `session`:
one reward for the episode, forbidden tools and golden paths included) and closed.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.chat.masks import sampled_mask
from rlvr_cli.contract.tasks import fit_prompt, messages_of
from rlvr_cli.engine.generate import generate, response_text
from rlvr_cli.env.agent import EnvClient, EnvHTTPError, EnvTimeout, environment_process
from rlvr_cli.env.model import CallIds, parse_completion, to_chat
from rlvr_cli.env.scoring import Sample, apply_verdict, needs_verdict
from rlvr_cli.env.verdict import Verdict


class ToolEnv:
    """The resources server for the length of a run: started here (`module:Class`) or reached
    at its URL, its declaration checked against the contract before the first episode."""

    def __init__(self, contract: Any, folder: Path) -> None:
        self.contract, self.folder = contract, folder
        self._stack = contextlib.ExitStack()
        self.client: EnvClient | None = None
        self.schemas: list[dict[str, Any]] = []

    def __enter__(self) -> ToolEnv:
        env = self.contract.environment
        try:
            endpoint = self._stack.enter_context(environment_process(env.server, self.folder))
            self.client = EnvClient(endpoint, timeout_s=env.timeout_s)
            self._stack.callback(self.client.close)
            self.client.check_declaration(env.tools, env.forbidden_tools)
            self.schemas = self.client.tools()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()


@dataclass
class Episode:
    """One episode in flight: its chat so far, the ids after the prompt, and what happened."""

    task: dict[str, Any]
    group: int
    index: int
    prompt_ids: list[int]
    messages: list[dict[str, Any]]
    session: str = ""
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    ended: str = ""
    final: str = ""
    error: str = ""
    server_calls: list[Any] | None = None  # the server's own log of the session's calls
    call_ids: CallIds = field(default_factory=CallIds)

    def add(self, ids: list[int], mask: int, logp: list[float] | None = None) -> None:
        self.ids += ids
        self.mask += [mask] * len(ids)
        self.logp += logp if logp is not None else [0.0] * len(ids)


def run_episodes(
    setup: Any,
    env: ToolEnv,
    tasks: list[dict[str, Any]],
    k: int,
    seed: int,
    *,
    groups: list[int] | None = None,
    round_: int = 0,
    revision: int = 0,
    greedy: bool = False,
) -> list[Sample]:
    """`k` episodes of every task, verified; as Samples in task order. `groups`: each task's
    group number in the step (default 0, 1, ...)."""
    contract = setup.contract
    episodes = []
    for g, task in enumerate(tasks):
        messages = messages_of(task)
        ids = setup.renderer.prompt_ids(messages, env.schemas or None)
        prompt = fit_prompt(contract.length, task, ids, "the prompt with the tool schemas")
        group = groups[g] if groups is not None else g
        episodes += [Episode(task, group, j, prompt, list(messages)) for j in range(k)]
    _open(env, episodes)
    for turn in range(contract.environment.max_steps):
        active = [e for e in episodes if not e.ended]
        if not active:
            break
        _turn(setup, env, active, seed * 1_009 + turn, greedy, last=turn == contract.environment.max_steps - 1)
    samples = [_sample(setup, e, seed, round_, revision) for e in episodes]
    verdicts = _verify(env, episodes)
    for episode, sample, (verdict, seconds) in zip(episodes, samples, verdicts, strict=True):
        if needs_verdict(contract, sample):
            apply_verdict(contract, sample, verdict, seconds)
        sample.transcript["verdict"] = verdict.as_json()  # type: ignore[index]
        sample.transcript["server_calls"] = episode.server_calls  # type: ignore[index]
    return samples


def _results(env: ToolEnv, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per operation (env/batch.py); a batch that timed out or was refused as a
    whole answers every operation with its status. An unreachable server stops the run."""
    try:
        return env.client.batch(ops)  # type: ignore[union-attr]
    except EnvTimeout as exc:
        return [{"status": 504, "detail": str(exc)} for _ in ops]
    except EnvHTTPError as exc:
        return [{"status": exc.status, "detail": exc.body[:300]} for _ in ops]


def _failure(result: dict[str, Any]) -> str:
    return f"HTTP {result.get('status')}: {str(result.get('detail'))[:300]}"


def _open(env: ToolEnv, episodes: list[Episode]) -> None:
    """Seed every episode's session in one batch; a task the server refuses ends its episode
    (`seed_error`, a verifier_error verdict)."""
    results = _results(env, [{"op": "seed", "task": e.task} for e in episodes])
    for episode, result in zip(episodes, results, strict=True):
        session = (result.get("body") or {}).get("session_id") if result.get("status") == 200 else None
        if isinstance(session, str) and session:
            episode.session = session
        else:
            episode.error, episode.ended = f"seeding the session failed: {_failure(result)}", "seed_error"


def _turn(setup: Any, env: ToolEnv, active: list[Episode], seed: int, greedy: bool, last: bool) -> None:
    """One model call for every active episode (one batched sample), then their tool calls."""
    contract, hp = setup.contract, setup.contract.hyperparameters
    budget = contract.length.max_response_tokens
    room = [budget - len(e.ids) for e in active]
    gens = generate(
        setup.policy,
        [e.prompt_ids + e.ids for e in active],
        max_new_tokens=max(room),
        temperature=0.0 if greedy else hp.sampling.temperature,
        top_p=hp.sampling.top_p,
        top_k=hp.sampling.top_k,
        stop_ids=setup.renderer.stop_ids,
        pad_id=setup.renderer.pad_id,
        seed=seed,
        engine=hp.sampling.engine,
    )
    pending = []
    for episode, gen, left in zip(active, gens, room, strict=True):
        mask, finish = sampled_mask(gen.response_ids[:left], setup.renderer.stop_ids)
        kept = gen.response_ids[: sum(mask)]  # through the stop token
        start = len(episode.ids)
        episode.add(kept, 1, list(gen.logprobs[: len(kept)]))
        text = response_text(setup.tokenizer, kept, finish)
        output = parse_completion(text, episode.call_ids)
        episode.items += output
        calls = [i for i in output if i.get("type") == "function_call"]
        episode.turns.append({"sampled": [start, len(episode.ids)], "text": text, "calls": len(calls)})
        said = "".join(str(i.get("content", "")) for i in output if i.get("type") == "message")
        if finish == "length":  # out of tokens: what it said last is its final message
            episode.ended, episode.final = "budget", said
        elif not calls:
            episode.ended, episode.final = "answer", said
        elif last:
            episode.ended = "max_steps"
        else:
            pending.append((episode, calls))
    outputs = _call_tools(env, pending)
    for (episode, calls), outs in zip(pending, outputs, strict=True):
        _continue(setup, env, episode, calls, outs, budget)


def _call_tools(env: ToolEnv, pending: list[tuple[Episode, list[dict[str, Any]]]]) -> list[list[dict[str, Any]]]:
    """Every tool call of the turn in one batch (an episode's calls run in order); the outputs
    the model reads, per episode. Arguments that are not a JSON object never reach the server."""
    ops, where, outputs = [], [], []
    for episode, calls in pending:
        outs = []
        for call in calls:
            arguments = call.get("arguments") or "{}"
            try:
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                if not isinstance(arguments, dict):
                    raise ValueError("the arguments are not a JSON object")
            except ValueError as exc:
                outs.append(_output(call, f"error: {exc}"))
                continue
            outs.append(_output(call, ""))
            where.append(outs[-1])
            ops.append({"op": "tool", "session_id": episode.session, "name": call["name"], "arguments": arguments})
        outputs.append(outs)
    for slot, result in zip(where, _results(env, ops), strict=True):
        if result.get("status") == 200:
            value = (result.get("body") or {}).get("output")
            slot["output"] = value if isinstance(value, str) else json.dumps(value)
        else:
            slot["output"] = f"error: {_failure(result)}"
    return outputs


def _output(call: dict[str, Any], output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call.get("call_id", ""), "output": output}


def _continue(
    setup: Any, env: ToolEnv, episode: Episode, calls: list[dict[str, Any]], outputs: list[dict[str, Any]], budget: int
) -> None:
    """Append the tool results and the next generation prompt as the template renders them."""
    turn = episode.turns[-1]
    turn["tool_calls"] = [
        {"name": c["name"], "arguments": c["arguments"], "output": o["output"]}
        for c, o in zip(calls, outputs, strict=True)
    ]
    before = episode.messages + to_chat(episode.items)
    episode.items += outputs
    added = to_chat(outputs)
    try:
        glue = setup.renderer.continuation(before, added, env.schemas or None)
    except ValueError as exc:  # the template rewrites history: this episode cannot go on token-exactly
        episode.ended, turn["error"] = "template", str(exc)
        return
    if len(episode.ids) + len(glue) >= budget:  # no room for the results and one more token
        episode.ended = "budget"
        return
    start = len(episode.ids)
    episode.add(glue, 0)
    turn["inserted"] = [start, len(episode.ids)]


def _verify(env: ToolEnv, episodes: list[Episode]) -> list[tuple[Verdict, float]]:
    """Verify and close every session in one batch (verify first: a session's operations run in
    order); each verdict's seconds are the batch's."""
    start = time.perf_counter()
    opened = [e for e in episodes if e.session]
    ops = []
    for episode in opened:
        ops.append({"op": "verify", "session_id": episode.session, "final_message": episode.final, "log": True})
        ops.append({"op": "close", "session_id": episode.session})
    results = _results(env, ops)  # a close that fails loses nothing: the server expires the session
    found = {id(e): _verdict(e, results[2 * i]) for i, e in enumerate(opened)}
    seconds = time.perf_counter() - start
    return [
        (found[id(e)], seconds) if e.session else (Verdict("verifier_error", detail=e.error), 0.0) for e in episodes
    ]


def _verdict(episode: Episode, result: dict[str, Any]) -> Verdict:
    if result.get("status") == 504:
        return Verdict("timeout", detail=f"verify: {result.get('detail')}")
    if result.get("status") != 200:
        return Verdict("verifier_error", detail=f"verify failed: {_failure(result)}")
    data = dict(result.get("body") or {})
    episode.server_calls = data.pop("calls", None)
    try:
        return Verdict.coerce(data)
    except (ValueError, TypeError) as exc:
        return Verdict("verifier_error", detail=f"verify failed: {exc}")


def _sample(setup: Any, episode: Episode, seed: int, round_: int, revision: int) -> Sample:
    finish = "length" if episode.ended == "budget" else "stop"
    sample = Sample(
        episode.task,
        episode.group,
        episode.index,
        episode.prompt_ids,
        episode.ids,
        episode.mask,
        finish,
        seed,
        round_,
        text=episode.final,
        revision=revision,
        sampling_logp=episode.logp,
    )
    sample.transcript = {
        "items": episode.items,
        "turns": episode.turns,
        "ended": episode.ended,
        "calls": sum(t["calls"] for t in episode.turns),
    }
    return sample
