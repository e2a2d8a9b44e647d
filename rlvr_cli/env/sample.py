"""`Sample`: one rollout (a response, or a whole tool-use episode) and everything learned about it.

Built keyword by keyword by a rollout (`rlvr_cli/rollout/`), then written by three owners, in
this order, each only its own fields:

- the rollout: what was sampled — task, group, index, prompt and response ids, loss mask,
  finish reason, seed, round, text, the weights' revision, the hint it was shown, the
  engine's sampling log-probs, any answer prefix and (tool use) the transcript;
- the verdict (`env/scoring.py`): verdict, reward, verify time, and `kept`/`reason` when it
  is excluded (truncated, invalid verdict);
- training (`train/`): `kept`/`reason` for a uniform group, the trainer's old log-probs,
  the advantage and the measured lag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlvr_cli.env.verdict import Verdict


@dataclass(kw_only=True)
class Sample:
    # ── the rollout ──
    task: dict[str, Any]
    group: int
    index: int
    prompt_ids: list[int]
    response_ids: list[int]
    mask: list[int]
    finish: str  # stop | length
    seed: int
    round: int = 0
    text: str = ""
    revision: int = 0  # optimizer steps of the weights that sampled it
    hint: str | None = None  # the hint this sample was shown (data.hints), never trained
    sampling_logp: list[float] = field(default_factory=list)  # the engine's, when it sampled
    answer_prefix: str = ""  # text the response started with before sampling (a hint as response prefix)
    transcript: dict[str, Any] | None = None  # tool_use: items, per-turn spans, tool calls, how it ended
    session: int = 0  # this sample's session in its episode (0: the first; docs/environments.md)
    parent: int | None = None  # the session that opened this one (compressing or forking), None for the first
    sessions: list[Sample] = field(default_factory=list)  # the episode's other sessions (on the one that ended it)
    # ── the verdict ──
    verdict: Verdict | None = None
    reward: float = math.nan  # NaN: excluded from the objective
    verifier_reward: float = math.nan  # Σ weight·component before length shaping (NaN: no valid verdict)
    verify_seconds: float = 0.0
    kept: bool = True  # also written by training (a uniform group)
    reason: str | None = None
    # ── training ──
    old_logp: list[float] = field(default_factory=list)
    advantage: float = 0.0
    lag: int | None = None  # optimizer steps between those weights and the last ones it trained (None: untrained)
    sampled: list[int] | None = None  # the loss mask before objective.rejection took tokens out (None: it took none)

    @property
    def answer(self) -> str:
        """What the verifier reads: the response, after any prefix it was given."""
        return self.answer_prefix + self.text

    @property
    def valid(self) -> bool:
        return not math.isnan(self.reward)

    @property
    def episode(self) -> list[Sample]:
        """Every session of this sample's episode, in the order they were opened (itself alone
        for a single response or an episode of one session)."""
        return sorted([*self.sessions, self], key=lambda s: s.session)

    def as_json(self, task_index: int) -> dict[str, Any]:
        """The sample as a checkpoint keeps it (samples drawn ahead, in flight): its task by
        position in the train split, every other field as it is; floats round-trip exactly."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("task", "verdict", "sessions")}
        out["task"] = task_index
        out["sessions"] = [s.as_json(task_index) for s in self.sessions]
        out["verdict"] = self.verdict.as_json() if self.verdict is not None else None
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], tasks: list[dict[str, Any]]) -> Sample:
        fields = dict(data)
        fields["task"] = tasks[int(fields["task"])]
        verdict = fields.pop("verdict")
        fields["sessions"] = [cls.from_json(s, tasks) for s in fields.get("sessions", [])]
        sample = cls(**fields)
        sample.verdict = Verdict(**verdict) if verdict is not None else None
        return sample
