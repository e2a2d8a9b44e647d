"""One invocation of `rlvr train`: plan → steps (with metrics, records, holdout, rules,
checkpoints) → final policy → status."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.env.single_turn import VerifierPool
from rlvr_cli.errors import RlvrError
from rlvr_cli.train import run as out
from rlvr_cli.train.plan import build_plan, plan_text
from rlvr_cli.train.score import InvalidVerdictStop


class Session:
    def __init__(
        self, contract: Contract, contract_path: Path, run_dir: Path, steps: int, resume: bool, force: bool = False
    ) -> None:
        self.c, self.contract_path, self.run_dir = contract, contract_path, run_dir
        self.steps, self.resume, self.force = steps, resume, force
        self.folder = contract_path.resolve().parent

    def run(self) -> int:
        from rlvr_cli.train.loop import Trainer

        if self.c.environment.kind != "single_turn":
            raise RlvrError("rlvr train runs single_turn environments; tool_use training needs the agent loop")
        trainer = Trainer(self.c, self.folder, self.run_dir)
        from rlvr_cli.train.monitor import Monitor

        monitor = Monitor(self.c)
        if self.resume:
            self.resume_into(trainer, monitor)
        self.main = trainer.rank == 0  # one process writes the run folder
        plan = build_plan(self.c, self.contract_path, self.run_dir, self.steps, str(trainer.device))
        plan["processes"] = trainer.world
        if self.main:
            out.eprint(
                plan_text(plan) + (f"\nprocesses: {trainer.world} (torch.distributed)" if trainer.world > 1 else "")
            )
            out.write_json(self.run_dir / "plan.json", plan)
            self.status("running", step=trainer.step, max_steps=self.steps)
        try:
            with VerifierPool(self.c.environment.verifier, self.folder, self.c.environment.timeout_s) as pool:
                return self.loop(trainer, pool, monitor)
        except InvalidVerdictStop as exc:
            self.status("aborted", step=trainer.step, reason=str(exc))
            out.eprint(f"aborted: {exc}")
            return out.EXIT_ABORTED
        except KeyboardInterrupt:
            self.status("paused", step=trainer.step, reason="interrupted by the user")
            raise

    def status(self, state: str, **details: Any) -> None:
        if getattr(self, "main", True):
            out.set_status(self.run_dir, state, **details)

    def loop(self, trainer: Any, pool: VerifierPool, monitor: Any) -> int:
        budget = self.c.acceptance.budget
        started = time.perf_counter()
        first = trainer.step
        metrics_path = self.run_dir / "metrics.jsonl"
        with out.Progress(self.steps, trainer.step, enabled=self.main) as progress:
            while trainer.step < self.steps:
                metrics, generated = trainer.train_step(pool)  # rollout → score → update
                if self.main and trainer.step > trainer.records.last_step:  # a resumed step is not written twice
                    trainer.records.append(trainer.record_rows(generated, self.c.name), trainer.step)
                self.maybe_holdout(trainer, pool, metrics)
                row = {"step": trainer.step, **out.clean(metrics)}
                if self.main:
                    with metrics_path.open("a", encoding="utf-8") as fh:  # log
                        fh.write(json.dumps(row) + "\n")
                trainer.step += 1
                done = trainer.step - first
                eta = (time.perf_counter() - started) / done * (self.steps - trainer.step)
                progress.update(trainer.step, row, eta)
                fired = monitor.observe(row)  # check rules
                trainer.monitor_state = monitor.state()
                if fired is not None:
                    return self.stop_for_rule(trainer, fired)
                if budget and self.budget_spent(trainer, budget):
                    break
                if trainer.step % self.c.checkpoint.every_steps == 0 or trainer.step == self.steps:
                    self.checkpoint(trainer)  # checkpoint
        return self.finish(trainer)

    def resume_into(self, trainer: Any, monitor: Any) -> None:
        from rlvr_cli.train.checkpoint import load_latest

        status = json.loads((self.run_dir / "status.json").read_text(encoding="utf-8"))
        if status.get("state") == "aborted" and not self.force:
            raise RlvrError(f"the run was aborted ({status.get('reason')}); resume refuses it unless --force")
        if status.get("state") == "finished" and trainer.step >= self.steps:
            raise RlvrError("the run already finished")
        step = load_latest(trainer, self.run_dir, self.c, self.contract_path)
        monitor.restore(trainer.monitor_state)
        fired = (status.get("rule") or {}).get("name") if status.get("state") in ("paused", "aborted") else None
        if fired:
            monitor.acknowledge(fired)  # resuming is the owner's answer: the window starts again
        if trainer.rank == 0:
            out.eprint(f"resuming from checkpoint step-{step}")

    def maybe_holdout(self, trainer: Any, pool: VerifierPool, metrics: dict[str, float]) -> None:
        every = self.c.monitoring.holdout_every
        if not every or (trainer.step + 1) % every:
            return
        holdout = trainer.evaluate_holdout(pool)
        metrics["holdout_reward"] = holdout
        history = trainer.holdout_history
        history.append((trainer.step, metrics.get("reward_mean", float("nan")), holdout))
        if len(history) >= 2:
            (_, train0, hold0), (_, train1, hold1) = history[-2], history[-1]
            metrics["reward_holdout_divergence"] = (train1 - train0) - (hold1 - hold0)

    def budget_spent(self, trainer: Any, budget: Any) -> bool:
        limits = {"max_rollouts": "rollouts", "max_verifier_calls": "verifier_calls", "max_tokens": "tokens"}
        for key, total in limits.items():
            limit = getattr(budget, key)
            if limit is not None and trainer.totals[total] >= limit:
                self.budget_reason = f"acceptance.budget.{key} ({limit}) reached after {trainer.totals[total]}"
                return True
        return False

    def checkpoint(self, trainer: Any) -> None:
        from rlvr_cli.train import distributed
        from rlvr_cli.train.checkpoint import save_checkpoint

        if self.main:  # the weights are identical on every rank
            save_checkpoint(trainer, self.run_dir, self.c, self.contract_path)
        distributed.barrier()

    def stop_for_rule(self, trainer: Any, fired: dict[str, Any]) -> int:
        self.checkpoint(trainer)
        state = "paused" if fired["action"] == "pause" else "aborted"
        self.status(
            state,
            step=trainer.step,
            rule=fired,
            reason=f"monitoring rule '{fired['name']}': {fired['metric']} {fired['when']} "
            f"for {fired['window']} evaluation(s); owner {fired['owner']}",
            next=("rlvr train --resume" if state == "paused" else "inspect the run; resume needs --force"),
        )
        if self.main:
            out.eprint(
                f"{state}: rule '{fired['name']}' fired ({fired['metric']} values {fired['values']}); "
                f"owner: {fired['owner']}"
            )
        return out.EXIT_PAUSED if state == "paused" else out.EXIT_ABORTED

    def finish(self, trainer: Any) -> int:
        final = self.run_dir / "final"
        reason = getattr(self, "budget_reason", None) or f"reached step {trainer.step}"
        if self.main:
            trainer.policy.save_pretrained(final)
            trainer.tokenizer.save_pretrained(final)
            self.status("finished", step=trainer.step, reason=reason, final=str(final))
            out.eprint(f"finished: {reason}; policy saved to {final}")
        return out.EXIT_FINISHED
