"""`rlvr tasks review` for tool-use tasks: each task's golden path (the calls `rlvr tasks generate`
recorded, or a hand-written one) is replayed against the contract's resources server and judged by
its verify, as training would judge an episode:
- the reference fails: the replayed path does not earn the best reward, or ends in another state
  than the task's `expected_state`;
- the path is not reproducible: a call's output differs from the recorded one (a warning: the
  server depends on something besides the session);
- a trivial episode passes: no call at all, with an empty final message or with the golden final
  message (the checker reads only what the model says, not what it did);
- the check does not discriminate: every path missing one of its calls still earns the best reward;
- the server cannot seed or verify the task (unjudgeable)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: (line, task id, finding code, message): `audit/review.py` makes them its findings
Finding = tuple[int, str, str, str]

PATH_FIELD, FINAL_FIELD, STATE_FIELD = "golden_path", "golden_final_message", "expected_state"


def review_tool_rows(contract: Any, folder: Path, rows: list[tuple[int, dict[str, Any]]]) -> list[Finding]:
    from rlvr_cli.env.scoring import weighted_reward
    from rlvr_cli.env.tool_env import ToolEnv

    best = contract.objective.reward.best
    findings = []
    with ToolEnv(contract, folder) as env:
        for line, task in rows:
            path = task.get(PATH_FIELD)
            if not isinstance(path, list) or not all(isinstance(c, dict) for c in path):
                findings.append((line, str(task.get("id")), "no_reference", f"no {PATH_FIELD} to replay"))
                continue
            replay = _Replay(env.client, task, best, lambda v: weighted_reward(contract, v))
            findings += replay.findings(line, path, str(task.get(FINAL_FIELD, "")))
    return findings


class _Replay:
    def __init__(self, client: Any, task: dict[str, Any], best: float, weigh: Any) -> None:
        self.client, self.task, self.best, self.weigh = client, task, best, weigh
        self.id = str(task.get("id"))

    def episode(self, calls: list[dict[str, Any]], final: str) -> tuple[Any, list[Any], Any]:
        """(verdict, the calls' outputs, the state after) of one episode in a fresh session."""
        session = self.client.seed({k: v for k, v in self.task.items() if k not in (PATH_FIELD, STATE_FIELD)})
        try:
            outputs = [self.client.call(session, str(c.get("tool")), c.get("arguments") or {}) for c in calls]
            _, verdict, after = self.client.verify_observed(session, final)
        finally:
            self.client.close_session(session)
        return verdict, outputs, after

    def passes_with(self, calls: list[dict[str, Any]], final: str) -> bool:
        """Whether another episode earns the best reward (a call the server refuses: it does not)."""
        try:
            return self.passes(self.episode(calls, final)[0])
        except Exception:
            return False

    def passes(self, verdict: Any) -> bool:
        try:
            return bool(verdict.valid) and self.weigh(verdict) >= self.best - 1e-9
        except KeyError:
            return False

    def findings(self, line: int, path: list[dict[str, Any]], final: str) -> list[Finding]:
        try:
            verdict, outputs, after = self.episode(path, final)
        except Exception as error:  # the server refuses the task or a call of its own reference
            return [(line, self.id, "unjudgeable", f"the resources server cannot replay it ({error})")]
        if not verdict.valid:
            return [(line, self.id, "unjudgeable", f"verify cannot judge it: {verdict.status} ({verdict.detail})")]
        out = []
        passed = self.passes(verdict)
        if not passed:
            detail = verdict.detail or verdict.status
            out.append((line, self.id, "reference_fails", f"the replayed golden path is rejected: {detail}"))
        if STATE_FIELD in self.task and after != self.task[STATE_FIELD]:
            message = f"the replayed golden path ends in another state than its {STATE_FIELD}"
            out.append((line, self.id, "reference_fails", message))
        changed = [i for i, (c, o) in enumerate(zip(path, outputs, strict=True)) if "output" in c and c["output"] != o]
        if changed:
            message = f"call {changed[0] + 1} ({path[changed[0]].get('tool')}) answers otherwise on a replay"
            out.append((line, self.id, "not_reproducible", message))
        out += self._trivial(line, final)
        redundant = passed and len(path) >= 2
        if redundant and all(self.passes_with(path[:i] + path[i + 1 :], final) for i in range(len(path))):
            message = (
                f"every path missing one of its {len(path)} calls still earns the best reward: verify does not "
                "need them (a redundant golden path, or a check that does not look)"
            )
            out.append((line, self.id, "no_discrimination", message))
        return out

    def _trivial(self, line: int, final: str) -> list[Finding]:
        for said in dict.fromkeys(["", final]):
            if self.passes_with([], said):
                shown = f"the final message {said!r}" if said else "an empty final message"
                message = f"no call and {shown} earns the best reward: verify does not check what was done"
                return [(line, self.id, "trivial_passes", message)]
        return []
