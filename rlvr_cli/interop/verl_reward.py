"""The reward function `rlvr export --to verl` hands verl: the contract's own verifier, run in its
worker process with its timeout and limits, weighted as the contract says. verl's reward
managers call it as `compute_score(data_source, solution_str, ground_truth, extra_info)`; the
task is the `rlvr_task` of each exported row's extra_info."""

from __future__ import annotations

import atexit
import json
import threading
from pathlib import Path
from typing import Any


class ContractReward:
    """A callable verl loads from the exported reward.py; the verifier starts on the first call."""

    def __init__(self, contract_path: str | Path) -> None:
        self.path = Path(contract_path)
        self._lock = threading.Lock()
        self._pool: Any = None
        self._contract: Any = None

    def contract(self) -> Any:
        """The contract, loaded (and validated) once."""
        from rlvr_cli.contract.load import load

        if self._contract is None:
            self._contract = load(self.path)
        return self._contract

    def _start(self) -> None:
        from rlvr_cli.env.verifier_pool import VerifierPool

        self.contract()
        if self._contract.environment.kind != "single_turn":
            raise ValueError(f"{self.path}: only single_turn environments export to verl's reward function")
        self._pool = VerifierPool.for_contract(self._contract, self.path.resolve().parent)
        self._pool.__enter__()
        atexit.register(self._pool.close)

    def __call__(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **_: Any
    ) -> dict[str, Any]:
        from rlvr_cli.env.scoring import weighted_reward

        if not extra_info or "rlvr_task" not in extra_info:
            raise ValueError("the row's extra_info has no rlvr_task: use the data rlvr export wrote")
        task = json.loads(extra_info["rlvr_task"])
        with self._lock:
            if self._pool is None:
                self._start()
            verdict, _seconds = self._pool.verify(task, solution_str)
        reward = self._contract.objective.reward
        if verdict.valid:
            try:
                score = weighted_reward(self._contract, verdict)
                return {
                    "score": score,
                    "verdict": "ok",
                    **{c.name: float(verdict.components[c.name]) for c in reward.components},
                }
            except KeyError as missing:
                verdict_status, detail = "verifier_error", f"verdict lacks component {missing}"
        else:
            verdict_status, detail = verdict.status, verdict.detail
        if reward.on_invalid == "fail":
            raise RuntimeError(f"task {task.get('id')}: verdict {verdict_status} ({detail}); on_invalid is fail")
        return {"score": 0.0, "verdict": verdict_status, **{c.name: 0.0 for c in reward.components}}
