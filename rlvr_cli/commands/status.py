"""`rlvr status RUN_DIR`: where a run stands and what to do next."""

from __future__ import annotations

import json
from pathlib import Path

from rlvr_cli.errors import RlvrError, UsageProblem

NEXT = {
    "running": "the run is in progress (or its process died: `rlvr train CONTRACT --resume --run-dir {run}`)",
    "paused": "a rule paused it: look at the values above, then `rlvr train CONTRACT --resume --run-dir {run}`",
    "aborted": "a rule or an invalid verdict stopped it for good; inspect it before `--resume --force`",
    "finished": "done: the policy is in {run}/final",
}
SHOWN = (
    "reward_mean",
    "holdout_reward",
    "kl",
    "entropy",
    "response_length_mean",
    "clip_fraction",
    "verifier_error_rate",
    "nonfinite_count",
    "tokens_per_s",
)


def run_status(run_dir: Path) -> int:
    from rlvr_cli.train.checkpoint import complete_checkpoints

    if not run_dir.is_dir():
        raise UsageProblem(f"{run_dir}: no such run folder")
    status_path = run_dir / "status.json"
    if not status_path.is_file():
        raise RlvrError(f"{run_dir} is not an rlvr run folder (no status.json)")
    status = json.loads(status_path.read_text(encoding="utf-8"))
    last = _last_metrics(run_dir / "metrics.jsonl")
    checkpoints = complete_checkpoints(run_dir / "checkpoints")
    print(f"run:        {run_dir}")
    print(f"state:      {status.get('state')} at step {status.get('step')} ({status.get('reason', '')})")
    if status.get("rule"):
        rule = status["rule"]
        print(
            f"fired rule: {rule['name']} — {rule['metric']} {rule['when']} over {rule['window']} evaluation(s), "
            f"values {rule['values']}, owner {rule['owner']}"
        )
    print(f"checkpoint: {checkpoints[-1][1].name if checkpoints else 'none'}")
    if last:
        shown = ", ".join(f"{k} {last[k]:.4g}" for k in SHOWN if isinstance(last.get(k), (int, float)))
        print(f"last step:  {last['step']}: {shown}")
    print(f"next:       {NEXT.get(status.get('state'), '').format(run=run_dir)}")
    return 0


def _last_metrics(path: Path) -> dict | None:
    if not path.is_file():
        return None
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return json.loads(lines[-1]) if lines else None
