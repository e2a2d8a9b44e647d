"""How a run stops between steps: a checkpoint, the budget spent, a monitoring rule fired,
updates skipped in a row, or its last step reached — each with a truthful status.json."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr_cli.errors import ExitCode
from rlvr_cli.files import disk_errors
from rlvr_cli.store.run import FiredRule
from rlvr_cli.train import distributed as dist
from rlvr_cli.train.checkpoint import rng_state, save_checkpoint, set_rng_state, start_sharded
from rlvr_cli.train.final_shards import merged_pieces, save_adapter_sharded, save_final_sharded
from rlvr_cli.train.run_plan import SKIPPED_UPDATES_STOP
from rlvr_cli.train.sharding import is_sharded
from rlvr_cli.train.state import TrainState

if TYPE_CHECKING:
    from rlvr_cli.train.loop import Run


def budget_spent(run: Run) -> str | None:
    """Why the run stops early for `acceptance.budget`, or None."""
    budget = run.contract.acceptance.budget
    if not budget:
        return None
    limits = {"max_rollouts": "rollouts", "max_verifier_calls": "verifier_calls", "max_tokens": "tokens"}
    for key, total in limits.items():
        limit = getattr(budget, key)
        spent = getattr(run.state.totals, total)
        if limit is not None and spent >= limit:
            return f"acceptance.budget.{key} ({limit}) reached after {spent}"
    return None


def step_mark(run: Run) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """What a checkpoint at this step's start needs beside the weights (unchanged until the
    update): the counters and every RNG. None where such a checkpoint could not be exact (samples
    drawn ahead on another thread, several processes that would have to agree)."""
    if run.ahead is not None or run.setup.world > 1:
        return None
    return run.state.as_json(), rng_state()


def checkpoint_step_start(run: Run, mark: tuple[dict[str, Any], dict[str, Any]] | None) -> None:
    """The step in flight lost its environment before its update: rewind the counters and the
    RNGs to the step's start and checkpoint there, so the run resumes exactly from this step.
    Nothing is written where the weights already moved or where no mark was taken."""
    if mark is None or run.state.optimizer_steps != mark[0]["optimizer_steps"]:
        return
    counters, rngs = mark
    rewound = TrainState.from_json(counters, len(run.setup.train_tasks))
    for name in vars(rewound):
        setattr(run.state, name, getattr(rewound, name))
    set_rng_state(rngs)
    checkpoint(run)


def checkpoint(run: Run) -> None:
    if run.ahead is not None:
        run.ahead.settle(run.state)  # the samples in flight are part of the state
    setup = run.setup
    sharded = is_sharded(setup.policy) and start_sharded(setup, run.state, run.folder)  # each writes its shard
    if setup.main:  # the rest is identical on every rank
        save_checkpoint(setup, run.state, run.folder, run.contract_path, run.records, sharded)
    dist.barrier()


def stop_for_rule(run: Run, fired: FiredRule) -> int:
    checkpoint(run)
    state = "paused" if fired.action == "pause" else "aborted"
    run.status(
        state,
        rule=fired,
        reason=f"monitoring rule '{fired.name}': {fired.metric} {fired.when} for {fired.window} evaluation(s); "
        f"owner {fired.owner}",
        next=("rlvr train --resume" if state == "paused" else "inspect the run; resume needs --force"),
    )
    if run.setup.main:
        _eprint(f"{state}: rule '{fired.name}' fired ({fired.metric} values {fired.values}); owner: {fired.owner}")
    return ExitCode.PAUSED if state == "paused" else ExitCode.ABORTED


def skipped_too_often(state: TrainState, row: dict[str, Any]) -> bool:
    """Whether the last `SKIPPED_UPDATES_STOP` steps all skipped their update: a run that can
    no longer learn stops, with or without a `nonfinite_count` rule (the plan says so)."""
    skipped = (row.get("nonfinite_count") or 0) > 0
    state.skipped_in_a_row = state.skipped_in_a_row + 1 if skipped else 0
    return state.skipped_in_a_row >= SKIPPED_UPDATES_STOP


def stop_for_skipped_updates(run: Run) -> int:
    checkpoint(run)
    reason = (
        f"{run.state.skipped_in_a_row} updates in a row were skipped for non-finite values (loss, log-probs or "
        f"gradients; nonfinite_count in metrics.jsonl): the run cannot learn. Look for a huge or NaN reward or "
        f"a learning rate too large"
    )
    run.status("aborted", reason=reason, next="inspect the run; resume needs --force")
    if run.setup.main:
        _eprint(f"aborted: {reason}")
    return ExitCode.ABORTED


def finish(run: Run, reason: str) -> int:
    final = run.folder.final
    if run.records is not None:
        run.records.flush()  # "finished" means every record is listed
    if is_sharded(run.setup.policy):  # every process gathers, weight by weight; the main one writes
        save_sharded(run.setup, final)
    if run.setup.main:
        with disk_errors(final.parent):  # safetensors hides ENOSPC in an error of its own
            save_final(run.setup, final)
        run.status("finished", reason=reason, final=str(final))
        what = "adapter (peft's format, over the contract's policy)" if run.setup.peft_model is not None else "policy"
        _eprint(f"finished: {reason}; {what} saved to {final}")
    return ExitCode.OK


def save_sharded(setup: Any, final: Path) -> None:
    """The weights of `final/` for a sharded policy, gathered piece by piece by every process and
    written by the main one: the policy, or its adapter and (when asked) final/merged/."""
    if setup.peft_model is None:
        save_final_sharded(setup.policy, final, setup.main)
        return
    save_adapter_sharded(setup.peft_model, final, setup.main)
    if setup.contract.hyperparameters.adapter.save_merged:
        save_final_sharded(setup.policy, final / "merged", setup.main, merged_pieces(setup.policy))


def save_final(setup: Any, final: Path) -> None:
    """final/: the policy (loadable with from_pretrained), or with an adapter the adapter in peft's
    format (PeftModel.from_pretrained over the base) and, when asked, final/merged/ the base with
    the adapter merged in; the tokenizer beside each. A sharded policy's weights are written
    already (`save_sharded`)."""
    sharded = is_sharded(setup.policy)
    if setup.peft_model is None:
        if not sharded:
            setup.policy.save_pretrained(final)
        setup.tokenizer.save_pretrained(final)
        return
    from rlvr_cli.engine.adapted import merged_state
    from rlvr_cli.train import lora

    if not sharded:
        lora.save(setup.peft_model, final)
    setup.tokenizer.save_pretrained(final)
    if setup.contract.hyperparameters.adapter.save_merged and sharded:
        setup.tokenizer.save_pretrained(final / "merged")
    elif setup.contract.hyperparameters.adapter.save_merged:
        merged = merged_state(setup.policy)
        base = setup.peft_model.get_base_model()
        with setup.peft_model.disable_adapter():  # the base's own module tree saves under the base's names
            base.save_pretrained(final / "merged", state_dict=merged)
        setup.tokenizer.save_pretrained(final / "merged")


def _eprint(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


# ── the invocation ────────────────────────────────────────────────────────────────────
