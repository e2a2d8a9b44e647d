"""Episodes of several sessions: a tool may answer with a child session (`NewSession`,
env/server.py) — `compress`: the episode goes on in a fresh context in place of this one, which
ends (`ended: compressed`); `fork`: a child runs beside this session, which waits, and the
child's final message is that call's result. Every session of an episode shares the server
session (state, call log, verdict); each is its own context with its own token budget
(`length.max_response_tokens`) and model calls (`environment.max_steps`); an episode holds at
most `environment.max_sessions` of them.

Credit (docs/contract.md): `reward.unit: trajectory` — one verdict for the episode, at its end,
which every session carries (`reward.credit` says which sessions it trains); `session` — each
session verified when it ends (the state then, its own final message), its own reward."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rlvr_cli.contract.tasks import messages_of
from rlvr_cli.env.sample import Sample
from rlvr_cli.env.scoring import apply_verdict, needs_verdict
from rlvr_cli.env.verdict import Verdict
from rlvr_cli.rollout.episode import Episode, Tree, executed, results, verdict_of


def most(contract: Any) -> int:
    """Sessions one episode may hold."""
    return contract.environment.max_sessions or 1


def plant(roots: list[Episode]) -> None:
    for root in roots:
        root.tree = Tree([root], root)


def every(roots: list[Episode]) -> list[Episode]:
    """Every session of every episode, episode by episode, in the order they were opened."""
    return [s for root in roots for s in (root.tree.sessions if root.tree else [root])]


def opened(rollout: Any, episode: Episode, calls: list[dict[str, Any]], outs: list[dict[str, Any]]) -> bool:
    """Open the child sessions this turn's results ask for. True: the episode goes on elsewhere
    (this session compressed and ended, or waits for its forks); False: it reads its results."""
    asked = [(i, out.pop("session")) for i, out in enumerate(outs) if "session" in out]
    if not asked:
        return False
    tree = episode.tree
    assert tree is not None
    compress = next(((i, d) for i, d in asked if d.get("action") == "compress"), None)
    todo = [compress] if compress else asked
    forks: list[tuple[int, Episode]] = []
    for i, directive in todo:
        child = _child(rollout, episode, directive, outs[i])
        if child is None:
            continue
        tree.sessions.append(child)
        _note(calls[i], child)
        if directive["action"] == "compress":
            child.answers, episode.answers = episode.answers, None  # it answers whoever this one answered
            if tree.main is episode:
                tree.main = child
            episode.ended, episode.final = "compressed", episode.said
            _record(episode, calls, outs)
            return True
        forks.append((i, child))
    if not forks:
        return False
    for i, child in forks:
        child.answers = (episode, outs[i])
    episode.waiting, episode.held = len(forks), (calls, outs)
    return True


def _child(rollout: Any, episode: Episode, directive: Any, out: dict[str, Any]) -> Episode | None:
    """The session a result asks for, its prompt rendered; None (and the result says why) when
    the episode has no session left or the prompt does not fit."""
    tree, contract = episode.tree, rollout.contract
    assert tree is not None
    if not isinstance(directive, dict) or directive.get("action") not in ("compress", "fork"):
        out["output"] = f"error: the server asked for a session it cannot open: {str(directive)[:200]}"
        return None
    if len(tree.sessions) >= most(contract):
        out["output"] = f"error: no new session: this episode holds its {most(contract)} (environment.max_sessions)"
        return None
    system = [m for m in messages_of(episode.task) if m.get("role") == "system"]
    messages = [*system, {"role": "user", "content": str(directive.get("prompt", ""))}]
    ids = rollout.renderer.prompt_ids(messages, rollout.env.schemas or None)
    limit = contract.length.max_prompt_tokens
    if len(ids) > limit:
        out["output"] = f"error: the new session's prompt is {len(ids)} tokens, over length.max_prompt_tokens ({limit})"
        return None
    child = Episode(episode.task, episode.group, episode.index, ids, messages, session=episode.session)
    child.tree, child.number, child.parent, child.opened = tree, len(tree.sessions), episode, directive["action"]
    child.hint = episode.hint  # the hint its episode was shown (hinted episodes are compared apart: data.hints)
    return child


def _note(call: dict[str, Any], child: Episode) -> None:
    call["opens"] = {"action": child.opened, "session": child.number}


def _record(episode: Episode, calls: list[dict[str, Any]], outs: list[dict[str, Any]]) -> None:
    episode.turns[-1]["tool_calls"] = executed(calls, outs)
    episode.items += outs


def settle(rollout: Any, roots: list[Episode], go_on: Callable[[Episode, list[Any], list[Any]], None]) -> None:
    """After a turn: each fork that ended answers the session waiting for it (which reads its
    results once every fork it opened has answered: `go_on`); with `reward.unit: session`, each
    session that ended and does not end its episode is verified now, on the state it left."""
    moved = True
    while moved:
        moved = False
        for child in every(roots):
            if child.ended and child.answers is not None:
                waiting, slot = child.answers
                child.answers = None
                slot["output"] = child.final or f"(the session ended without a final message: {child.ended})"
                waiting.waiting -= 1
                if not waiting.waiting and waiting.held is not None:
                    (calls, outs), waiting.held = waiting.held, None
                    go_on(waiting, calls, outs)
                moved = True
    if rollout.contract.objective.reward.unit == "session":
        _verify_ended(rollout.env, [s for s in every(roots) if _ends_alone(s)])


def _ends_alone(session: Episode) -> bool:
    return (
        bool(session.ended)
        and session.verdict is None
        and session.tree is not None
        and session.tree.main is not session
    )


def _verify_ended(env: Any, ended: list[Episode]) -> None:
    if not ended:
        return
    start = time.perf_counter()
    ops = [{"op": "verify", "session_id": s.session, "final_message": s.final} for s in ended if s.session]
    answers = iter(results(env, ops))
    seconds = time.perf_counter() - start
    for session in ended:
        if session.session:
            session.verdict = (verdict_of(session, next(answers)), seconds)


def assemble(roots: list[Episode], make: Callable[[Episode], Sample]) -> list[Sample]:
    """One sample per episode: its main line's last session, carrying the episode's others."""
    out = []
    for root in roots:
        tree = root.tree
        if tree is None or len(tree.sessions) == 1:
            out.append(make(root))
            continue
        main = make(tree.main)
        main.sessions = [make(s) for s in tree.sessions if s is not tree.main]
        out.append(main)
    return out


def credit(contract: Any, sample: Sample, own: list[tuple[Verdict, float]], episode: Verdict) -> None:
    """The verdicts of an episode's other sessions (in the order of `sample.sessions`): under
    `reward.unit: session` each its own (`own`), judged as any sample; under `trajectory` the
    episode's, with its reward and whether it is kept (train/credit.py applies `reward.credit`)."""
    for part, (verdict, seconds) in zip(sample.sessions, own, strict=True):
        if contract.objective.reward.unit == "session":
            if needs_verdict(contract, part):
                apply_verdict(contract, part, verdict, seconds)
        else:
            verdict = episode
            part.verdict, part.reward, part.verify_seconds = sample.verdict, sample.reward, sample.verify_seconds
            part.verifier_reward = sample.verifier_reward  # what dynamic sampling may compare (uniform_on)
            part.kept, part.reason = sample.kept, sample.reason
        part.transcript["verdict"] = verdict.as_json()  # type: ignore[index]
