"""The contract's keys for running at scale: precision (which dtype holds the weights, which one
computes, which one sums gradients over processes) and parallelism (replicated or sharded)."""

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from rlvr_cli.contract.sections import Section

PRESETS = ("fp32", "bf16", "fp16")


class Precision(Section):
    """Dtypes written out. `params` is the copy the optimizer updates (and its state's dtype)."""

    params: Literal["fp32", "bf16"] = Field(
        description="The weights the optimizer updates and its state: fp32 (a master copy) or bf16 (pure bf16: "
        "updates smaller than the weights' last bit are lost, RLV304)."
    )
    compute: Literal["fp32", "bf16", "fp16"] = Field(
        description="The dtype matrix products run in (autocast over fp32 weights); fp16 adds a loss scaler."
    )
    reduce: Literal["fp32", "bf16"] = Field("fp32", description="The dtype gradients are summed over processes in.")

    @property
    def mixed(self) -> bool:
        """Compute runs in a narrower dtype than the weights (autocast)."""
        return self.compute != self.params

    @property
    def name(self) -> str:
        """What the plan and the records print: the preset's name, or the three dtypes."""
        for preset in PRESETS:
            if self == precision_of(preset):
                return f"{preset} ({self.describe()})" if preset != "fp32" else "fp32"
        return self.describe()

    def describe(self) -> str:
        return f"{self.params} weights and optimizer state, {self.compute} compute, {self.reduce} reduce"


def precision_of(value: "str | Precision") -> Precision:
    """A preset's dtypes: `bf16` and `fp16` keep fp32 master weights and optimizer state."""
    if isinstance(value, Precision):
        return value
    return Precision(params="fp32", compute=value, reduce="fp32")  # type: ignore[arg-type]


FORMS = ("<preset>", "<written out>")  # union tags: never keys, dropped from an error's path


def _form(value: Any) -> str:
    """Which form a precision is written in, so an error names only that form's problem."""
    return FORMS[1] if isinstance(value, dict | Precision) else FORMS[0]


PrecisionValue = Annotated[
    Annotated[Literal["fp32", "bf16", "fp16"], Tag(FORMS[0])] | Annotated[Precision, Tag(FORMS[1])],
    Discriminator(_form),
]


class Parallel(Section):
    """How several processes (`torchrun`, `--nproc`) share the model."""

    strategy: Literal["ddp", "fsdp2"] = Field(
        description="ddp: every process holds the whole model, its gradients and optimizer state; fsdp2: each "
        "holds 1/N of them (torch.distributed.fsdp.fully_shard, one unit per decoder layer)."
    )
    reshard_after_forward: bool = Field(
        True,
        description="fsdp2: true frees a layer's gathered weights after its forward and after its backward (two "
        "gathers a micro-batch); false keeps every layer gathered from the first forward of a training pass to its "
        "last backward (one gather a pass: the whole weights in the compute dtype during the update, as sampling "
        "holds them).",
    )
    accumulate_whole_gradients: bool = Field(
        False,
        description="fsdp2: accumulate each micro-batch's gradients whole and reduce-scatter them once a training "
        "pass (one reduce-scatter a layer a pass instead of one a micro-batch; the whole gradients in the reduce "
        "dtype during the update).",
    )
    cpu_offload: bool = Field(
        False, description="fsdp2 on GPUs: keep the sharded weights, gradients and optimizer state in CPU memory."
    )
    activation_checkpointing: bool = Field(
        False, description="Recompute each decoder layer's activations in the backward instead of keeping them."
    )
    sample_groups: Literal["alone", "together"] = Field(
        "alone",
        description="Under torchrun, how a process samples its share of a step's groups (single-turn). alone: each "
        "group by itself with a seed of its own, so the samples do not depend on the number of processes (a run "
        "resumed with another number goes on bit for bit); together: the share in one batch, seeded by the "
        "process's rank (fuller decode steps, fewer reads of the weights; the samples are those of this number of "
        "processes). Tool-use episodes are always sampled together.",
    )
