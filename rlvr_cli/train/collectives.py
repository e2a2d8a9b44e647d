"""`rlvr plan`: what one step moves between processes, per process, as the trainer runs it
(train/sharding.py says when fsdp2 gathers a unit; ddp all-reduces the gradients once a pass)."""

from __future__ import annotations

from rlvr_cli.contract.layout import Layout
from rlvr_cli.contract.models import Contract
from rlvr_cli.train.memory_estimate import BYTES, estimate, fmt_bytes, peak


def plan_lines(contract: Contract, shape: Layout, devices: int) -> list[str]:
    """The lines `rlvr plan` ends with for several processes: the collectives a step runs, then
    what each fsdp2 setting left at its default would save in them and cost at the peak."""
    lines = [talk] if (talk := communication_line(contract, shape, devices)) else []
    par = contract.hyperparameters.strategy
    if devices < 2 or par.strategy != "fsdp2":
        return lines
    total = peak(contract, estimate(contract, shape, devices))[0]
    micro, units = micro_batches(contract, devices), shape.layers + 1
    passes = contract.hyperparameters.updates_per_batch
    if par.reshard_after_forward:
        fewer = units * (2 * micro - 1) * passes
        lines.append(_instead(contract, shape, devices, total, "reshard_after_forward", False, f"{fewer} all-gathers"))
    if not par.accumulate_whole_gradients and micro > 1:
        fewer = units * (micro - 1) * passes
        lines.append(
            _instead(contract, shape, devices, total, "accumulate_whole_gradients", True, f"{fewer} reduce-scatters")
        )
    return lines


def micro_batches(contract: Contract, devices: int) -> int:
    """Micro-batches a process runs a pass when every sample trains."""
    hp = contract.hyperparameters
    rollouts = hp.prompts_per_step * hp.group_size // devices
    return -(-rollouts // (hp.micro_batch_sequences or rollouts))


def communication_line(contract: Contract, shape: Layout, devices: int) -> str | None:
    """What one step moves between processes, per process (ring collectives: (N - 1)/N of a
    tensor each way): ddp's all-reduce of the gradients, or fsdp2's gathers of every unit in
    the compute dtype and reduce-scatters of the gradients (train/sharding.py says when)."""
    if devices < 2:
        return None
    hp, kl = contract.hyperparameters, contract.objective.kl
    share, reduce = (devices - 1) / devices, BYTES[hp.dtypes.reduce]
    a = hp.adapter
    trained = shape.adapter_parameters(a.rank, a.target_modules) if a is not None else shape.parameters
    if hp.strategy.strategy != "fsdp2":
        sent = 2 * share * trained * reduce * hp.updates_per_batch
        times = hp.updates_per_batch
        return (
            f"collectives per step and process (ddp): the gradients all-reduced {times} time(s), {fmt_bytes(sent)} sent"
        )
    micro = micro_batches(contract, devices)
    units, reference = shape.layers + 1, int(kl.coef > 0)
    training = (2 * micro if hp.strategy.reshard_after_forward else 1) * hp.updates_per_batch
    old = int(kl.coef > 0 and kl.placement == "reward")  # the policy's log-probs before the update
    gathers = 1 + reference + old + training
    received = gathers * share * shape.parameters * BYTES[hp.dtypes.compute]
    scatters = (1 if hp.strategy.accumulate_whole_gradients else micro) * hp.updates_per_batch
    return (
        f"collectives per step and process (fsdp2, {units} units, {micro} micro-batch(es)): every unit gathered "
        f"{gathers} times (sampling 1, reference {reference}, old log-probs {old}, training {training}): "
        f"{units * gathers} all-gathers, {fmt_bytes(received)} received; {units * scatters} reduce-scatters, "
        f"{fmt_bytes(scatters * share * shape.parameters * reduce)} sent; more where untrained samples need their "
        "log-probs or a holdout evaluation samples"
    )


def _instead(contract: Contract, shape: Layout, devices: int, total: float, key: str, value: bool, fewer: str) -> str:
    """What `parallel.KEY: VALUE` would save in collectives a step and cost at the peak."""
    hp = contract.hyperparameters
    changed_parallel = hp.strategy.model_copy(update={key: value})
    changed = contract.model_copy(update={"hyperparameters": hp.model_copy(update={"parallel": changed_parallel})})
    after = peak(changed, estimate(changed, shape, devices))[0]
    same = " (the same peak)" if after <= total * 1.001 else ""
    return f"with parallel.{key}: {str(value).lower()}: {fewer} fewer a step, peak {fmt_bytes(after)} per device{same}"
