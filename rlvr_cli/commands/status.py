"""`rlvr status RUN_DIR`: where a run stands and what to do next (reads files only, no torch)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rlvr_cli.metrics import STATUS_LINE
from rlvr_cli.store.run import RunFolder

NEXT = {
    "running": "the run is in progress (or its process died: `rlvr train CONTRACT --run-dir {run} --auto`)",
    "paused": "a rule paused it: look at the values above, then `rlvr train CONTRACT --resume --run-dir {run}`",
    "aborted": "a rule or an invalid verdict stopped it for good; inspect it before `--resume --force`",
    "failed": "it failed (the reason is above); fix that, then `rlvr train CONTRACT --run-dir {run} --auto`",
    "finished": "done: the policy is in {run}/final",
}


def run_status(run_dir: Path) -> int:
    run = RunFolder.existing(run_dir)
    status = run.read_status()
    metrics = run.read_metrics()
    checkpoints = run.complete_checkpoints()
    print(f"run:        {run_dir}")
    state = status.state
    if state == "running" and not run.writer_alive():
        state = "running, but no process holds the run folder: it was killed or crashed"
        status = replace(status, next=f"rlvr train CONTRACT --run-dir {run_dir} --auto")
    print(f"state:      {state} after {status.step} step(s) ({status.reason or ''})")
    if status.rule:
        print(f"fired rule: {status.rule.name} — {status.rule.describe()}")
    print(f"checkpoint: {checkpoints[-1][1].name if checkpoints else 'none'}")
    if status.trackers:
        print("trackers:   " + "; ".join(f"{kind} {state}" for kind, state in status.trackers.items()))
    if metrics:
        last = metrics[-1]
        shown = ", ".join(f"{k} {last[k]:.4g}" for k in STATUS_LINE if isinstance(last.get(k), (int, float)))
        # steps are counted from 1, as the progress line, checkpoints and the report count them
        # (metrics.jsonl numbers its rows from 0)
        print(f"last step:  {last['step'] + 1}: {shown}")
    default = NEXT.get(status.state, "").format(run=run_dir)
    if status.state == "finished" and (run_dir / "final" / "adapter_config.json").is_file():
        default = f"done: the adapter is in {run_dir}/final (peft's format, over the contract's policy)"
    print(f"next:       {default if status.rule or not status.next else status.next}")
    return 0
