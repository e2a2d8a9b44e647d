"""Multi-turn tool-use rollouts for training, holdout evaluation, gates and reward audits: every
episode of a batch advances together, one batched sampling call per turn, tool calls sent to the
resources server in parallel. `setup` is anything with `contract`, `renderer`, `policy` and
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_cli.chat.masks import sampled_mask
from rlvr_cli.contract.tasks import fit_prompt, messages_of
from rlvr_cli.engine.generate import generate, response_text
from rlvr_cli.env.agent import EnvClient, EnvHTTPError, EnvTimeout, call_tool, environment_process
from rlvr_cli.env.model import CallIds, parse_completion, to_chat
from rlvr_cli.env.scoring import Sample, apply_verdict, needs_verdict
from rlvr_cli.env.verdict import Verdict

THREADS = 16  # tool calls and verifications in flight at once


class ToolEnv:
    """The resources server for the length of a run: started here (`module:Class`) or reached
    at its URL, its declaration checked against the contract before the first episode."""

    def __init__(self, contract: Any, folder: Path) -> None:
        self.contract, self.folder = contract, folder
        self._stack = contextlib.ExitStack()
        self.client: EnvClient | None = None
        self.schemas: list[dict[str, Any]] = []
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="rlvr-env")

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
        self.pool.shutdown(wait=True, cancel_futures=True)
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
    first_group: int = 0,
    round_: int = 0,
    revision: int = 0,
    greedy: bool = False,
) -> list[Sample]:
    """`k` episodes of every task, verified; as Samples in group order."""
    contract = setup.contract
    episodes = []
    for g, task in enumerate(tasks):
        messages = messages_of(task)
        ids = setup.renderer.prompt_ids(messages, env.schemas or None)
        prompt = fit_prompt(contract.length, task, ids, "the prompt with the tool schemas")
        episodes += [Episode(task, first_group + g, j, prompt, list(messages)) for j in range(k)]
    for episode, (session, refused) in zip(episodes, env.pool.map(lambda e: _open(env, e), episodes), strict=True):
        episode.session, episode.error = session, refused
        episode.ended = "seed_error" if refused else ""
    for turn in range(contract.environment.max_steps):
        active = [e for e in episodes if not e.ended]
        if not active:
            break
        _turn(setup, env, active, seed * 1_009 + turn, greedy, last=turn == contract.environment.max_steps - 1)
    samples = [_sample(setup, e, seed, round_, revision) for e in episodes]
    verdicts = list(env.pool.map(lambda e: _verify(env, e), episodes))
    for episode, sample, (verdict, seconds) in zip(episodes, samples, verdicts, strict=True):
        if needs_verdict(contract, sample):
            apply_verdict(contract, sample, verdict, seconds)
        sample.transcript["verdict"] = verdict.as_json()  # type: ignore[index]
        sample.transcript["server_calls"] = episode.server_calls  # type: ignore[index]
    return samples


def _open(env: ToolEnv, episode: Episode) -> tuple[str, str]:
    """(the session, or "" with why the server refused to seed it: a verifier_error verdict)."""
    try:
        return env.client.seed(episode.task), ""  # type: ignore[union-attr]
    except (EnvHTTPError, ValueError, KeyError) as exc:
        return "", f"seeding the session failed: {exc}"


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
    results = list(env.pool.map(lambda p: _call_all(env, *p), pending))
    for (episode, calls), outputs in zip(pending, results, strict=True):
        _continue(setup, env, episode, calls, outputs, budget)


def _call_all(env: ToolEnv, episode: Episode, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [call_tool(env.client, episode.session, call) for call in calls]  # type: ignore[arg-type]


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


def _verify(env: ToolEnv, episode: Episode) -> tuple[Verdict, float]:
    import time

    start = time.perf_counter()
    if not episode.session:
        return Verdict("verifier_error", detail=episode.error), 0.0
    try:
        verdict, episode.server_calls = env.client.verify_logged(episode.session, episode.final)  # type: ignore[union-attr]
    except EnvTimeout as exc:
        verdict = Verdict("timeout", detail=f"verify: {exc}")
    except (EnvHTTPError, ValueError, TypeError) as exc:
        verdict = Verdict("verifier_error", detail=f"verify failed: {exc}")
    with contextlib.suppress(EnvHTTPError):
        env.client.close_session(episode.session)  # type: ignore[union-attr]
    return verdict, time.perf_counter() - start


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
