"""The experiment contract, format 1, as pydantic models: the one source of truth.

The JSON Schema (`rlvr schema`, `schemas/contract.schema.json`) is generated from these
classes. Keys that change the objective have no default. Requirements that depend on
another key (e.g. `kl.estimator` when `kl.coef > 0`) are checked by `rules.py` and
mirrored in the schema with `if`/`then` so that both agree.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, model_validator
from pydantic_core import PydanticCustomError

from rlvr_cli.contract.condition import PATTERN as WHEN
from rlvr_cli.contract.condition import Condition

SHA256 = r"^[0-9a-f]{64}$"
DATE = r"^\d{4}-\d{2}-\d{2}$"
ENTRYPOINT = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
CHECKPOINT_PARTS = (
    "model",
    "optimizer",
    "scheduler",
    "rng",
    "sampler",
    "data_cursor",
    "rollout_cursor",
)
Handling = Literal["none_present", "scrubbed", "scanned_clean"]


def _integral(value: Any) -> Any:
    """`1.0e3` is the integer 1000, as JSON Schema's `integer` says; `2.5` stays an error."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(_integral)]


def _not_boolean(value: Any) -> Any:
    """YAML `true` equals 1 to Python, not to JSON Schema: keep the two in agreement."""
    if isinstance(value, bool):
        raise ValueError(f"expected 1, got {str(value).lower()}")
    return value


# The bound sits inside the type so that `PositiveInt | None` keeps it in the JSON Schema.
PositiveInt = Annotated[int, Field(ge=1), BeforeValidator(_integral)]


class Section(BaseModel):
    """Base of every contract section: unknown keys are errors, no type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def _exactly_one(model: BaseModel, fields: dict[str, str], what: str) -> None:
    """`fields` maps the key as written in YAML to the attribute that holds it."""
    given = [key for key, attr in fields.items() if getattr(model, attr) is not None]
    if len(given) != 1:
        raise PydanticCustomError(
            "exactly_one",
            "{what} needs exactly one of {names}; {got}",
            {
                "what": what,
                "names": ", ".join(fields),
                "got": "got " + " and ".join(given) if given else "got none",
            },
        )


def _one_of_required(*keys: str) -> dict[str, Any]:
    """JSON Schema twin of `_exactly_one`: exactly one of `keys` present and not null."""
    return {"oneOf": [{"required": [k], "properties": {k: {"not": {"type": "null"}}}} for k in keys]}


# ── artifacts ─────────────────────────────────────────────────────────────────────────


class ModelRef(Section):
    """A local folder, or a hub id pinned to a revision."""

    model_config = ConfigDict(json_schema_extra=_one_of_required("path", "id"))
    path: str | None = Field(None, min_length=1, description="Local folder, relative to the contract.")
    id: str | None = Field(None, min_length=1, description="Hub id, e.g. `org/model`.")
    revision: str | None = Field(None, min_length=1, description="40-hex commit of `id`.")

    @model_validator(mode="after")
    def _one_source(self) -> "ModelRef":
        _exactly_one(self, {"path": "path", "id": "id"}, "a model reference")
        return self


class TokenizerRef(ModelRef):
    """Where the tokenizer comes from, and which chat template renders conversations."""

    chat_template: str = Field(
        min_length=1,
        description="`native` (the tokenizer's own template) or a `.jinja` file path.",
    )


class ReferenceRef(Section):
    """The frozen KL anchor: a checkpoint, a frozen copy of the policy, or an explicit none."""

    model_config = ConfigDict(json_schema_extra=_one_of_required("path", "id", "same_as_policy", "none"))
    path: str | None = Field(None, min_length=1, description="Local folder.")
    id: str | None = Field(None, min_length=1, description="Hub id.")
    revision: str | None = Field(None, min_length=1, description="40-hex commit of `id`.")
    same_as_policy: Literal[True] | None = Field(
        None, description="A frozen copy of the starting policy is the intended anchor."
    )
    none_: str | None = Field(None, alias="none", min_length=1, description="Why no reference is used.")

    @model_validator(mode="after")
    def _one_source(self) -> "ReferenceRef":
        _exactly_one(
            self,
            {"path": "path", "id": "id", "same_as_policy": "same_as_policy", "none": "none_"},
            "artifacts.reference",
        )
        return self

    @property
    def is_none(self) -> bool:
        return self.none_ is not None


class VerifierRef(Section):
    version: str = Field(min_length=1, description="Version string of the verifier code.")
    container: str | None = Field(
        None,
        pattern=r"^[^@\s]+@sha256:[0-9a-f]{64}$",
        description="Container image pinned by digest (`name@sha256:...`).",
    )


class Artifacts(Section):
    """What the run is made of."""

    policy: ModelRef = Field(description="The starting (base or SFT) policy.")
    tokenizer: TokenizerRef
    reference: ReferenceRef | None = Field(None, description="The frozen KL anchor.")
    verifier: VerifierRef
    lock: str | None = Field(None, min_length=1, description="Lock file written by `rlvr lock`.")


# ── environment ───────────────────────────────────────────────────────────────────────


class Environment(Section):
    """Where rewards come from."""

    kind: Literal["single_turn", "tool_use"]
    verifier: str | None = Field(None, pattern=ENTRYPOINT, description="`module:function` (required for single_turn).")
    server: str | None = Field(None, min_length=1, description="`module:app` or URL of a resources server (tool_use).")
    max_steps: PositiveInt | None = Field(None, description="Model calls per episode (tool_use).")
    tools: list[str] | None = Field(None, description="Tools offered to the policy.")
    forbidden_tools: list[str] | None = Field(
        None, description="Tools whose use fails the episode whatever the final state."
    )
    timeout_s: float = Field(gt=0, description="Wall-clock bound for one verification.")


# ── objective ─────────────────────────────────────────────────────────────────────────


class RewardComponent(Section):
    name: str = Field(min_length=1)
    weight: float


class Reward(Section):
    unit: Literal["response", "session", "trajectory", "set"] = Field(description="What one reward is attached to.")
    components: list[RewardComponent] = Field(
        min_length=1, description="The reward is the weighted sum of these verifier components."
    )
    on_invalid: Literal["exclude", "fail"] = Field(
        description="What an invalid verdict (verifier_error, timeout, sandbox_error) does."
    )

    @property
    def best(self) -> float:
        """The highest reward 0/1 components can give: what "all correct" means."""
        return sum(max(c.weight, 0.0) for c in self.components)


class Advantage(Section):
    baseline: Literal["group_mean"]
    scale: Literal["group_std", "batch_std", "none"]
    std: Literal["population", "sample"] | None = Field(None, description="Required unless scale is none.")
    epsilon: float | None = Field(None, gt=0, description="Added to the std; > 0.")


class Clip(Section):
    low: float = Field(description="Ratio kept above 1 - low; in (0, 1).")
    high: float = Field(description="Ratio kept below 1 + high; in (0, 1); > low is clip-higher.")
    dual: float | None = Field(None, gt=1, description="Dual-clip constant c > 1.")


class KL(Section):
    coef: float = Field(ge=0, description="β ≥ 0.")
    estimator: Literal["k1", "k2", "k3"] | None = Field(None, description="Required when coef > 0.")
    placement: Literal["loss", "reward"] | None = Field(None, description="Required when coef > 0.")


class Objective(Section):
    """The loss, term by term."""

    reward: Reward
    advantage: Advantage
    clip: Clip
    kl: KL
    entropy_coef: float = Field(0.0, ge=0)
    aggregation: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant_norm"]


# ── hyperparameters ───────────────────────────────────────────────────────────────────


class Sampling(Section):
    temperature: float = Field(ge=0)
    top_p: float = Field(gt=0, le=1)
    top_k: Int = Field(ge=0, description="0 disables top-k.")


class Optimizer(Section):
    name: Literal["adamw", "adam", "sgd"]
    lr: float = Field(gt=0)
    betas: list[float] = Field(min_length=2, max_length=2, description="Adam (β1, β2).")
    weight_decay: float = Field(ge=0)
    grad_clip: float = Field(ge=0, description="Max global grad norm; 0 disables clipping.")


class Schedule(Section):
    name: Literal["constant", "linear", "cosine"]
    warmup_steps: Int = Field(0, ge=0)


class Hyperparameters(Section):
    group_size: Int = Field(description="Samples per prompt (≥ 2).")
    prompts_per_step: Int = Field(ge=1)
    micro_batch_sequences: PositiveInt | None = None
    updates_per_batch: Int = Field(ge=1, description="Optimizer passes over one rollout batch.")
    max_policy_lag: Int = Field(ge=0, description="How many optimizer steps old a rollout may be.")
    sampling: Sampling
    optimizer: Optimizer
    schedule: Schedule | None = None
    max_steps: Int = Field(ge=1)
    seed: Int = Field(ge=0)
    precision: Literal["fp32", "bf16", "fp16"]


# ── data ──────────────────────────────────────────────────────────────────────────────


class Source(Section):
    name: str = Field(min_length=1)
    path: str = Field(min_length=1)
    sha256: str | None = Field(None, pattern=SHA256)
    license: str | None = Field(None, min_length=1)
    consent: str | None = Field(None, min_length=1)
    pii: Handling
    secrets: Handling


class Dedup(Section):
    stage: Literal["before_split", "after_split"]
    method: Literal["exact", "minhash"]
    semantic_clusters: bool


class Split(Section):
    path: str = Field(min_length=1, description="JSONL, one task per line.")
    sha256: str | None = Field(None, pattern=SHA256)


class Splits(Section):
    train: Split
    holdout: Split
    sealed_eval: Split = Field(description="Never read by training.")


class HoldoutDesign(Section):
    compositions: list[str] | None = None
    entity_groups: list[str] | None = None
    longer_trajectories: bool | None = None


class Hints(Section):
    used: bool
    source: str | None = Field(None, min_length=1)
    field: str | None = Field(None, min_length=1)
    leak_check: bool | None = None


class Data(Section):
    """Provenance and isolation."""

    sources: list[Source] = Field(min_length=1)
    dedup: Dedup
    splits: Splits
    holdout_design: HoldoutDesign | None = None
    hints: Hints | None = None
    filters: str | None = None
    mixture: str | None = None


# ── length ────────────────────────────────────────────────────────────────────────────


class Packing(Section):
    enabled: bool
    isolate_episodes: bool = True


class DynamicSampling(Section):
    drop_uniform_groups: bool
    max_rounds: Int = Field(1, ge=1)
    log_by: list[str] | None = None


class Length(Section):
    """What counts as an answer."""

    max_prompt_tokens: Int = Field(ge=1)
    max_response_tokens: Int = Field(ge=1)
    prompt_truncation: Literal["left", "error"]
    on_truncated: Literal["exclude", "penalize", "keep"]
    truncation_penalty: float | None = None
    stop_tokens: list[str] = Field(min_length=1)
    padding_side: Literal["left", "right"] = "left"
    packing: Packing | None = None
    dynamic_sampling: DynamicSampling | None = None


# ── monitoring, checkpoint, records, acceptance ───────────────────────────────────────


class Rule(Section):
    name: str = Field(min_length=1)
    metric: str = Field(min_length=1)
    when: str = Field(pattern=WHEN, description='"> x", "< x", ">= x", "<= x" or "nonfinite".')
    window: PositiveInt | None = Field(None, description="Consecutive evaluations that must hold.")
    action: Literal["pause", "abort"]
    owner: str | None = Field(None, min_length=1, description="Who is called when it fires.")
    _condition: Condition = PrivateAttr()

    @model_validator(mode="after")
    def _parse_when(self) -> "Rule":
        self._condition = Condition.parse(self.when)  # the pattern above guarantees it parses
        return self

    @property
    def condition(self) -> Condition:
        """`when`, parsed: the one place the grammar is read."""
        return self._condition


class Monitoring(Section):
    rules: list[Rule]
    holdout_every: PositiveInt | None = Field(None, description="Steps between holdout evaluations.")


class Checkpoint(Section):
    every_steps: Int = Field(ge=1)
    keep_last: Int = Field(ge=1)
    include: list[Literal[CHECKPOINT_PARTS]]  # type: ignore[valid-type]


class Records(Section):
    format: Literal["parquet"] = "parquet"
    shard_rows: Int = Field(4096, ge=1)


class Budget(Section):
    max_rollouts: PositiveInt | None = None
    max_verifier_calls: PositiveInt | None = None
    max_tokens: PositiveInt | None = None


class Gate(Section):
    name: str = Field(min_length=1)
    metric: str = Field(min_length=1)
    split: str = Field(min_length=1)
    min: float | None = None
    max: float | None = None
    min_delta: float | None = None
    max_drop: float | None = None
    confidence: float | None = Field(None, gt=0, lt=1)
    segments: list[str] | None = None
    critical: bool = False


class Acceptance(Section):
    """When a run may ship."""

    budget: Budget | None = None
    baseline: str | None = Field(None, min_length=1)
    gates: list[Gate]


class Waiver(Section):
    rule: str = Field(pattern=r"^RLV\d{3}$")
    reason: str = Field(min_length=1)
    expires: str | None = Field(None, pattern=DATE, description="YYYY-MM-DD; expired waivers stop waiving.")


class Contract(Section):
    """An RLVR experiment contract (format 1)."""

    model_config = ConfigDict(title="rlvr experiment contract")
    contract_version: Annotated[Literal[1], BeforeValidator(_not_boolean)]
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str | None = None
    artifacts: Artifacts
    environment: Environment
    objective: Objective
    hyperparameters: Hyperparameters
    data: Data
    length: Length
    monitoring: Monitoring
    checkpoint: Checkpoint
    records: Records = Records()
    acceptance: Acceptance
    waivers: list[Waiver] | None = None
