"""A small environment written for OpenEnv (the `openenv-core` package), served the way OpenEnv
serves one (`create_app` and uvicorn), by OpenEnv's own Python (`.venv-openenv`):
`python guess.py [shared] PORT`. The policy guesses a number: each step answers higher, lower or
correct; the correct guess earns 1 and ends the episode. `shared` keeps one target for every
session (the leak `rlvr audit isolation` must find)."""

from __future__ import annotations

import sys
import uuid
from typing import Any

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_app

SHARED = "shared" in sys.argv[1:-1]
TARGETS: dict[str, int] = {}


class GuessAction(Action):
    guess: int


class GuessObservation(Observation):
    hint: str = ""


class GuessState(State):
    target: int = 0
    marker: str = ""


class GuessEnvironment(Environment):
    """Guess the hidden number; hints say higher or lower."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = GuessState(episode_id=str(uuid.uuid4()), step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **task: Any) -> GuessObservation:
        target = int(task.get("target", 0))
        if SHARED:
            TARGETS["all"] = target
        marker = str(task.get("marker", ""))
        self._state = GuessState(episode_id=episode_id or str(uuid.uuid4()), step_count=0, target=target, marker=marker)
        return GuessObservation(hint="guess a number from 0 to 99", done=False, reward=None)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        target = TARGETS["all"] if SHARED else self._state.target
        if action.guess == target:
            return GuessObservation(hint="correct", done=True, reward=1.0)
        return GuessObservation(hint="higher" if action.guess < target else "lower", done=False, reward=0.0)

    @property
    def state(self) -> GuessState:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=64)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[-1]), log_level="warning")
