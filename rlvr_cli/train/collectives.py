"""`rlvr plan`: what one step moves between processes, per process, as the trainer runs it
(train/sharding.py says when fsdp2 gathers a unit; ddp all-reduces the gradients once a pass)."""

from __future__ import annotations

from rlvr_cli.contract.layout import Layout
from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import RlvrError
from rlvr_cli.train.memory_estimate import BYTES, estimate, fmt_bytes, peak, reference_pass


def check_shareable(contract: Contract, world: int) -> None:
    """Each of `world` processes samples and trains an equal share of a step's groups: refused
    where they cannot be shared out evenly (before a launch, and again in every process)."""
    if contract.hyperparameters.prompts_per_step % world:
        steps = contract.hyperparameters.prompts_per_step
        raise RlvrError(f"prompts_per_step ({steps}) must be divisible by the {world} processes")


def plan_lines(contract: Contract, shape: Layout, devices: int) -> list[str]:
    """The lines `rlvr plan` ends with for several processes: the collectives a step runs, then
    what each fsdp2 setting left at its default would save in them and cost at the peak."""
    lines = [talk] if (talk := communication_line(contract, shape, devices)) else []
    lines += [sampling] if (sampling := sampling_line(contract, shape, devices)) else []
    par = contract.hyperparameters.strategy
    if devices < 2 or par.strategy != "fsdp2":
        return lines
    total = peak(contract, estimate(contract, shape, devices))[0]
    for key, value in (("reshard_after_forward", False), ("accumulate_whole_gradients", True)):
        if getattr(par, key) != value and (line := _instead(contract, shape, devices, total, key, value)):
            lines.append(line)
    return lines


def sampling_line(contract: Contract, shape: Layout, devices: int) -> str | None:
    """How a process samples its share of a single-turn step's groups (rollout/single_turn.py):
    one group at a time, or all together (`parallel.sample_groups`), and what the other way
    would hold at the peak."""
    hp = contract.hyperparameters
    if devices < 2 or contract.environment.kind != "single_turn":
        return None
    groups, alone = hp.prompts_per_step // devices, contract.seeds_each_group(torchrun=True)
    other = hp.strategy.model_copy(update={"sample_groups": "together" if alone else "alone"})
    changed = contract.model_copy(update={"hyperparameters": hp.model_copy(update={"parallel": other})})
    after = fmt_bytes(peak(changed, estimate(changed, shape, devices))[0])
    if alone:
        return (
            f"sampling per process: its {groups} group(s) one at a time, {hp.group_size} rows a decode step, each "
            "with a seed of its own (the samples do not depend on the number of processes); with "
            f"parallel.sample_groups: together, {groups * hp.group_size} rows a decode step, peak {after} per device"
        )
    return (
        f"sampling per process: its {groups} group(s) in one batch, {groups * hp.group_size} rows a decode step, "
        f"seeded by rank (the samples are those of {devices} processes); one group at a time, peak {after} per device"
    )


def micro_batches(contract: Contract, devices: int) -> int:
    """Micro-batches a process runs a pass when every sample trains."""
    hp = contract.hyperparameters
    rollouts = hp.prompts_per_step * hp.group_size // devices
    return -(-rollouts // (hp.micro_batch_sequences or rollouts))


def gathers(contract: Contract, devices: int) -> dict[str, int]:
    """fsdp2: how many times a step gathers each unit, by reason, and reduce-scatters it."""
    hp, kl = contract.hyperparameters, contract.objective.kl
    micro = micro_batches(contract, devices)
    return {
        "sampling": 1,
        "reference": int(reference_pass(contract)),
        "old log-probs": int(kl.coef > 0 and kl.placement == "reward"),  # the policy's before the update
        # a unit kept gathered (or a gradient kept whole) through a pass is so through each mini-batch's
        "training": (2 * micro if hp.strategy.reshard_after_forward else hp.mini_batches) * hp.updates_per_batch,
        "scatters": (hp.mini_batches if hp.strategy.accumulate_whole_gradients else micro) * hp.updates_per_batch,
    }


def communication_line(contract: Contract, shape: Layout, devices: int) -> str | None:
    """What one step moves between processes, per process (ring collectives: (N - 1)/N of a
    tensor each way): ddp's all-reduce of the gradients, or fsdp2's gathers of every unit in
    the compute dtype and reduce-scatters of the gradients (train/sharding.py says when)."""
    if devices < 2:
        return None
    hp = contract.hyperparameters
    share, reduce = (devices - 1) / devices, BYTES[hp.dtypes.reduce]
    a = hp.adapter
    trained = shape.adapter_parameters(a.rank, a.target_modules) if a is not None else shape.parameters
    if hp.strategy.strategy != "fsdp2":
        sent = 2 * share * trained * reduce * hp.steps_per_batch
        times = hp.steps_per_batch
        return (
            f"collectives per step and process (ddp): the gradients all-reduced {times} time(s), {fmt_bytes(sent)} sent"
        )
    counts, units = gathers(contract, devices), shape.layers + 1
    scatters = counts.pop("scatters")
    gathered = sum(counts.values())
    received = gathered * share * shape.parameters * BYTES[hp.dtypes.compute]
    why = ", ".join(f"{reason} {n}" for reason, n in counts.items())
    return (
        f"collectives per step and process (fsdp2, {units} units, {micro_batches(contract, devices)} "
        f"micro-batch(es)): every unit gathered {gathered} times ({why}): {units * gathered} all-gathers, "
        f"{fmt_bytes(received)} received; {units * scatters} reduce-scatters, "
        f"{fmt_bytes(scatters * share * trained * reduce)} sent; more where untrained samples need their "
        "log-probs or a holdout evaluation samples"
    )


def _instead(contract: Contract, shape: Layout, devices: int, total: float, key: str, value: bool) -> str | None:
    """What `parallel.KEY: VALUE` would save in collectives a step and cost at the peak (None:
    it would save none, one micro-batch a pass)."""
    hp = contract.hyperparameters
    changed_parallel = hp.strategy.model_copy(update={key: value})
    changed = contract.model_copy(update={"hyperparameters": hp.model_copy(update={"parallel": changed_parallel})})
    before, after_counts = gathers(contract, devices), gathers(changed, devices)
    units = shape.layers + 1
    fewer_scatters = units * (before.pop("scatters") - after_counts.pop("scatters"))
    fewer_gathers = units * (sum(before.values()) - sum(after_counts.values()))
    if not (fewer_gathers or fewer_scatters):
        return None
    fewer = f"{fewer_gathers} all-gathers" if fewer_gathers else f"{fewer_scatters} reduce-scatters"
    after = peak(changed, estimate(changed, shape, devices))[0]
    same = " (the same peak)" if after <= total * 1.001 else ""
    return f"with parallel.{key}: {str(value).lower()}: {fewer} fewer a step, peak {fmt_bytes(after)} per device{same}"
