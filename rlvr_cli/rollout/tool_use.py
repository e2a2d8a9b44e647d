"""Tool-use rollouts (`ToolUse`), for training, holdout evaluation, gates and reward audits:
every episode of a batch advances together, one batched call of the engine per turn, and the
sessions' seeds, tool calls and verifications go to the resources server (`env/tool_env.py`)
as one request each (`POST /batch`, env/batch.py).

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

Hints (`data.hints`): a hinted episode's prompt carries the hint (`placement: prompt`), or its
first response starts with the hint's tokens (`response_prefix`: in the context like the
prompt's, never trained, and part of the first turn's text the calls are parsed from).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlvr_cli.chat import tool_formats
from rlvr_cli.chat.masks import sampled_mask
from rlvr_cli.contract.models import Contract
from rlvr_cli.engine.engines import PolicyEngine
from rlvr_cli.engine.generate import response_text, sampled_text
from rlvr_cli.engine.types import SamplingParams
from rlvr_cli.env.model import parse_completion, to_chat
from rlvr_cli.env.results import tool_output
from rlvr_cli.env.sample import Sample
from rlvr_cli.env.scoring import apply_verdict, needs_verdict
from rlvr_cli.env.tool_env import ToolEnv
from rlvr_cli.env.verdict import Verdict
from rlvr_cli.errors import RlvrError
from rlvr_cli.rollout import hints, sessions
from rlvr_cli.rollout.base import Draw, Times, sample_together
from rlvr_cli.rollout.episode import Episode, executed, failure, results, verdict_of
from rlvr_cli.rollout.prompts import Prompts


@dataclass
class ToolUse:
    contract: Contract
    renderer: Any
    engine: PolicyEngine
    env: ToolEnv
    prompts: Prompts

    @staticmethod
    def reward_source(contract: Contract, folder: Path, log_dir: Path | None = None) -> ToolEnv:
        return ToolEnv(contract, folder, log_dir)

    @classmethod
    def of(cls, contract: Contract, renderer: Any, engine: PolicyEngine, env: ToolEnv) -> ToolUse:
        """`env` must be open (its tool schemas are part of every prompt)."""
        if renderer.tool_format is None:  # no call would ever be seen: every episode would score as a failure
            known = ", ".join(tool_formats.NAMES)
            raise RlvrError(
                f"the chat template renders no tool-call format rlvr reads ({known}): set environment.tool_format "
                "to the one the policy writes"
            )
        return cls(contract, renderer, engine, env, Prompts(contract, renderer, env.schemas))

    def using(self, engine: PolicyEngine) -> ToolUse:
        return replace(self, engine=engine)

    def sample(self, tasks: Sequence[dict[str, Any]], draw: Draw, times: Times | None = None) -> list[Sample]:
        """`group_size` episodes of every task, verified; as Samples in task order."""
        start = time.perf_counter()
        contract, env, k, hinted = self.contract, self.env, draw.group_size, draw.hinted
        groups = draw.numbers(len(tasks))
        prefix = hints.prefix(contract)
        episodes = []
        for g, task in enumerate(tasks):
            group = groups[g]
            hint = hints.hint_of(contract, task) if hinted else None
            for j in range(k):
                shown = hint if j < hinted else None
                messages = self.prompts.messages(task, shown)
                episode = Episode(task, group, j, self.prompts.ids(task, shown is not None), list(messages))
                episode.hint, episode.prefix = shown, shown if shown is not None and prefix else ""
                episodes.append(episode)
        _open(env, episodes)
        sessions.plant(episodes)
        params = SamplingParams.of(contract, self.renderer, draw.greedy)
        steps = contract.environment.max_steps
        for turn in range(steps * sessions.most(contract)):  # each session makes at most max_steps calls
            active = [e for e in sessions.every(episodes) if not e.ended and not e.waiting]
            if not active:
                break
            _turn(self, active, params, draw.seed * 1_009 + turn, draw.revision, steps)
            sessions.settle(self, episodes, self._go_on)
        samples = sessions.assemble(episodes, lambda e: _sample(e, draw.seed, draw.round, draw.revision))
        mains = [e.tree.main if e.tree else e for e in episodes]
        verdicts = _verify(env, mains)
        for main, sample, (verdict, seconds) in zip(mains, samples, verdicts, strict=True):
            if needs_verdict(contract, sample):
                apply_verdict(contract, sample, verdict, seconds)
            sample.transcript["verdict"] = verdict.as_json()  # type: ignore[index]
            sample.transcript["server_calls"] = main.server_calls  # type: ignore[index]
            others = [_own(e) for e in main.tree.sessions if e is not main]  # type: ignore[union-attr]
            sessions.credit(contract, sample, others, verdict)
        if times is not None:
            times.generate += time.perf_counter() - start
        return samples

    def _go_on(self, episode: Episode, calls: list[dict[str, Any]], outs: list[dict[str, Any]]) -> None:
        _continue(self.renderer, self.env, episode, calls, outs, self.contract.length.max_response_tokens)

    def sample_share(
        self, tasks: Sequence[dict[str, Any]], draw: Draw, rank: int, world: int, times: Times | None = None
    ) -> tuple[list[Sample], list[dict[str, Any]]]:
        """This process's groups as one batch against its own server, seeded by rank (a
        turn's round trips are paid once for the share, not once per group)."""
        return sample_together(self, tasks, draw, rank, world, times)


def _open(env: ToolEnv, episodes: list[Episode]) -> None:
    """Seed every episode's session in one batch; a task the server refuses ends its episode
    (`seed_error`, a verifier_error verdict)."""
    answers = results(env, [{"op": "seed", "task": e.task} for e in episodes])
    for episode, result in zip(episodes, answers, strict=True):
        session = (result.get("body") or {}).get("session_id") if result.get("status") == 200 else None
        if isinstance(session, str) and session:
            episode.session = session
        else:
            episode.error, episode.ended = f"seeding the session failed: {failure(result)}", "seed_error"


def _turn(
    rollout: ToolUse, active: list[Episode], params: SamplingParams, seed: int, revision: int, steps: int
) -> None:
    """One model call for every active episode (one batched sample), then their tool calls."""
    renderer = rollout.renderer
    budget = rollout.contract.length.max_response_tokens
    room = [budget - len(e.ids) for e in active]
    gens = rollout.engine.sample([e.prompt_ids + e.ids for e in active], params.up_to(max(room)), seed, revision)
    pending = []
    for episode, gen, left in zip(active, gens, room, strict=True):
        mask, finish = sampled_mask(gen.response_ids[:left], renderer.stop_ids)
        kept = gen.response_ids[: sum(mask)]  # through the stop token
        start = len(episode.ids)
        first, last = not episode.turns and episode.number == 0, len(episode.turns) == steps - 1
        episode.add(kept, 1, list(gen.logprobs[: len(kept)]))
        lead = episode.prefix if first else ""
        text = lead + response_text(renderer.tokenizer, kept, finish)
        whole, end = sampled_text(renderer.tokenizer, kept, finish)
        output = parse_completion(  # (a call may end it)
            lead + whole, episode.call_ids, end, renderer.tool_format, rollout.env.schemas
        )
        episode.items += output
        calls = [i for i in output if i.get("type") == "function_call"]
        episode.turns.append({"sampled": [start, len(episode.ids)], "text": text, "calls": len(calls)})
        said = episode.said = answer_of(
            renderer, "".join(str(i.get("content", "")) for i in output if i.get("type") == "message")
        )
        if finish == "length":  # out of tokens: what it said last is its final message
            episode.ended, episode.final = "budget", said
        elif not calls:
            episode.ended, episode.final = "answer", said
        elif last:  # its calls are not run: no model turn is left to read their results
            episode.ended, episode.final = "max_steps", said
            _not_run(episode, calls, "max_steps")
        elif not _room_for_results(rollout, episode, calls, budget) and rollout.env.calls_without_room != "execute":
            episode.ended, episode.final = "budget", said
            _not_run(episode, calls, "no room in the token budget for its result")
        else:
            pending.append((episode, calls))
    outputs = _call_tools(rollout.env, pending)
    for (episode, calls), outs in zip(pending, outputs, strict=True):
        if not sessions.opened(rollout, episode, calls, outs):  # (a child session, compressing or forking)
            _continue(renderer, rollout.env, episode, calls, outs, budget)


def answer_of(renderer: Any, said: str) -> str:
    """A turn's message as `verify` reads it: after its reasoning where the chat template keeps
    reasoning apart by `</think>` (Qwen3, DeepSeek-R1, SmolLM3: the template itself moves what
    precedes it to `reasoning_content`); the whole text otherwise."""
    if "</think>" in said and "</think>" in str(getattr(renderer, "template", "")):
        return said.rsplit("</think>", 1)[1].strip("\n")
    return said


def _room_for_results(rollout: ToolUse, episode: Episode, calls: list[dict[str, Any]], budget: int) -> bool:
    """Whether even empty results of the calls, and one more token, fit the budget left."""
    form = _arguments_form(rollout.renderer)
    before, empty = episode.messages + to_chat(episode.items, form), to_chat([_output(c, "") for c in calls], form)
    try:
        glue = rollout.renderer.continuation(before, empty, rollout.env.schemas or None, episode.ids[-1])
    except ValueError:  # the template cannot continue: _continue says so
        return True
    return len(episode.ids) + len(glue) < budget


def _arguments_form(renderer: Any) -> str:
    """How the template wants a call's arguments: a mapping, or JSON text (DeepSeek's)."""
    return renderer.tool_format.arguments if renderer.tool_format is not None else "mapping"


def _not_run(episode: Episode, calls: list[dict[str, Any]], why: str) -> None:
    episode.turns[-1]["tool_calls"] = [
        {"name": c["name"], "arguments": c["arguments"], "output": None, "executed": False, "why": why} for c in calls
    ]


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
            if env.permitted is not None and call["name"] not in env.permitted:  # never reaches the server
                outs.append(_output(call, f"error: tool {call['name']!r} is not permitted here"))
                continue
            outs.append(_output(call, ""))
            where.append(outs[-1])
            ops.append({"op": "tool", "session_id": episode.session, "name": call["name"], "arguments": arguments})
        outputs.append(outs)
    for slot, op, result in zip(where, ops, results(env, ops), strict=True):
        if result.get("status") == 200:  # capped here too: a server at a URL may not cap its results
            body = result.get("body") or {}
            value = tool_output(op["name"], body.get("output"), env.output_cap)
            slot["output"] = value if isinstance(value, str) else json.dumps(value)
            if "session" in body:  # the tool asks for a child session (rollout/sessions.py)
                slot["session"] = body["session"]
        else:
            slot["output"] = f"error: {failure(result)}"
    return outputs


def _output(call: dict[str, Any], output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call.get("call_id", ""), "output": output}


def _continue(
    renderer: Any,
    env: ToolEnv,
    episode: Episode,
    calls: list[dict[str, Any]],
    outputs: list[dict[str, Any]],
    budget: int,
) -> None:
    """Append the tool results and the next generation prompt as the template renders them."""
    turn = episode.turns[-1]
    turn["tool_calls"] = executed(calls, outputs)  # (a fork's call: with the session it opened)
    form = _arguments_form(renderer)
    before = episode.messages + to_chat(episode.items, form)
    episode.items += outputs
    added = to_chat(outputs, form)
    try:
        glue = renderer.continuation(before, added, env.schemas or None, episode.ids[-1])
    except ValueError as exc:  # the template rewrites history: this episode cannot go on token-exactly
        episode.ended, turn["error"] = "template", str(exc)
        return
    if len(episode.ids) + len(glue) >= budget:  # no room for the results and one more token
        episode.ended, episode.final, turn["results_seen"] = (
            "budget",
            episode.said,
            False,
        )  # (run all the same: calls_without_room execute,
        return  # or results longer than the room left)
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
    answers = results(env, ops)  # a close that fails loses nothing: the server expires the session
    found = {id(e): verdict_of(e, answers[2 * i]) for i, e in enumerate(opened)}
    seconds = time.perf_counter() - start
    return [
        (found[id(e)], seconds) if e.session else (Verdict("verifier_error", detail=e.error), 0.0) for e in episodes
    ]


def _sample(episode: Episode, seed: int, round_: int, revision: int) -> Sample:
    sample = Sample(
        task=episode.task,
        group=episode.group,
        index=episode.index,
        prompt_ids=episode.prompt_ids,
        response_ids=episode.ids,
        mask=episode.mask,
        finish="length" if episode.ended == "budget" else "stop",
        seed=seed,
        round=round_,
        text=episode.final,
        revision=revision,
        hint=episode.hint,
        sampling_logp=episode.logp,
    )
    sample.transcript = {
        "items": episode.items,
        "turns": episode.turns,
        "ended": episode.ended,
        "calls": sum(t["calls"] for t in episode.turns),  # parsed from what was sampled
        "executed_calls": sum(bool(c.get("executed")) for t in episode.turns for c in t.get("tool_calls", [])),
    }
    if episode.tree is not None and len(episode.tree.sessions) > 1:  # an episode of several sessions
        sample.session, sample.parent = episode.number, episode.parent.number if episode.parent else None
        sample.transcript["session"] = {"number": episode.number, "parent": sample.parent, "opened": episode.opened}
    return sample


def _own(session: Episode) -> tuple[Verdict, float]:
    """`reward.unit: session`: the verdict a session got when it ended."""
    if session.verdict is not None:
        return session.verdict
    return Verdict("verifier_error", detail=session.error or "the session was never verified"), 0.0
