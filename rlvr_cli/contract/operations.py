"""Contract sections about operating the run: monitoring rules, checkpoints, records,
acceptance gates and waivers."""

import re
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, PrivateAttr, Tag, field_validator, model_validator

from rlvr_cli.contract.condition import PATTERN as WHEN
from rlvr_cli.contract.condition import Condition
from rlvr_cli.contract.release_keys import Latency
from rlvr_cli.contract.scale import FORMS
from rlvr_cli.contract.sections import CHECKPOINT_PARTS, DATE, Int, PositiveInt, Section


class Rule(Section):
    name: str = Field(min_length=1, description="The rule's name, shown when it fires.")
    metric: str = Field(min_length=1, description="A metric of metrics.jsonl (RLV604 checks it exists for this run).")
    when: str = Field(pattern=WHEN, description='"> x", "< x", ">= x", "<= x" or "nonfinite".')
    window: PositiveInt | None = Field(None, description="Consecutive evaluations that must hold.")
    action: Literal["pause", "abort"] = Field(
        description="pause (resumable) or abort (stop for good); both checkpoint first."
    )
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


TrackerKind = Literal["tensorboard", "mlflow", "wandb", "trackio"]
#: the keys each tracker reads besides `kind` and `dir` (a key a tracker ignores is refused)
TRACKER_KEYS = {"tensorboard": (), "mlflow": ("project", "uri"), "wandb": ("project", "mode"), "trackio": ("project",)}


class Tracker(Section):
    """A tracker the run also writes to, besides its own files; local and offline unless said."""

    kind: TrackerKind = Field(description="tensorboard, mlflow, wandb or trackio (each the extra of its name).")
    dir: str | None = Field(
        None,
        min_length=1,
        description="Where the tracker's local files go (relative to the run folder); default trackers/<kind>.",
    )
    project: str | None = Field(
        None,
        min_length=1,
        description="mlflow: the experiment; wandb, trackio: the project. Default: the contract's name.",
    )
    uri: str | None = Field(
        None,
        min_length=1,
        description="mlflow only: a tracking URI (http://…, sqlite:///…); default a file store under `dir`.",
    )
    mode: Literal["offline", "online"] | None = Field(
        None, description="wandb only: offline (the default: files to sync later) or online (needs the network)."
    )

    @model_validator(mode="after")
    def _keys_it_reads(self) -> "Tracker":
        ignored = [k for k in ("project", "uri", "mode") if getattr(self, k) is not None]
        ignored = [k for k in ignored if k not in TRACKER_KEYS[self.kind]]
        if ignored:
            raise ValueError(f"{self.kind} does not read {' or '.join(ignored)}")
        if self.uri is not None and self.dir is not None:
            raise ValueError("mlflow writes to uri or to dir, not both")
        return self


def _tracker_form(value: Any) -> str:
    return FORMS[1] if isinstance(value, dict | Tracker) else FORMS[0]


TrackerValue = Annotated[
    Annotated[TrackerKind, Tag(FORMS[0])] | Annotated[Tracker, Tag(FORMS[1])], Discriminator(_tracker_form)
]


class Monitoring(Section):
    rules: list[Rule] = Field(description="Pause/abort rules on the metrics.")
    trackers: list[TrackerValue] = Field(
        default_factory=list,
        description="Trackers that receive every metric row, the contract, its plan and lock file, and the gate "
        "verdict and report when written: tensorboard, mlflow, wandb, trackio (a name, or {kind: …} with "
        "options). One that fails is reported once and the run goes on.",
    )
    holdout_every: PositiveInt | None = Field(
        None,
        description="Steps between holdout evaluations (greedy, hint-free); a run that starts at step 0 also "
        "evaluates the holdout before its first update.",
    )

    layer_stats_every: PositiveInt | None = Field(
        None,
        description="Steps between per-layer signals: each decoder layer's output RMS and gradient norm "
        "(layer_activation_rms/<i>, layer_grad_norm/<i>); without it they are not measured.",
    )

    reference_answers: str | None = Field(
        None,
        min_length=1,
        description="A holdout task field holding a reference response: every holdout evaluation also measures "
        "holdout_nll, the policy's mean negative log-likelihood per token of these responses (single-turn).",
    )

    @field_validator("trackers")
    @classmethod
    def _once_each(cls, value: list[TrackerValue]) -> list[TrackerValue]:
        kinds = [t if isinstance(t, str) else t.kind for t in value]
        twice = sorted({k for k in kinds if kinds.count(k) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed more than once")
        return value

    def tracker_specs(self) -> list[Tracker]:
        """Each tracker as an object: a bare name is its defaults."""
        return [Tracker(kind=t) if isinstance(t, str) else t for t in self.trackers]


class Checkpoint(Section):
    every_steps: Int = Field(ge=1, description="Steps between checkpoints.")
    keep_last: Int = Field(ge=1, description="Complete checkpoints kept (the newest is never removed).")
    include: list[Literal[CHECKPOINT_PARTS]] = Field(
        description="Parts of the state saved; all seven are needed for an exact resume (RLV701)."
    )  # type: ignore[valid-type]


class Records(Section):
    format: Literal["parquet"] = Field("parquet", description="The rollout log's file format.")
    shard_rows: Int = Field(
        4096,
        ge=1,
        description=(
            "Rows per Parquet shard at most. A shard gathers whole steps, written at most once a second "
            "(a slower step's at once) and at every checkpoint and end; a step of more rows spans several."
        ),
    )


class Budget(Section):
    max_rollouts: PositiveInt | None = Field(None, description="Stop after this many generated responses.")
    max_verifier_calls: PositiveInt | None = Field(None, description="Stop after this many verifier calls.")
    max_tokens: PositiveInt | None = Field(None, description="Stop after this many generated tokens.")


class Gate(Section):
    name: str = Field(min_length=1, description="The gate's name, shown in the verdict.")
    metric: str = Field(
        min_length=1,
        description="What is measured on each item: reward_mean, success_rate, error_rate, response_length, "
        "tokens_per_task and verifier_seconds (cost), ttft_s, tpot_s and latency_s (timed under "
        "acceptance.latency), or a reward component by name (e.g. correct).",
    )
    split: str = Field(min_length=1, description="The split the gate evaluates (holdout or sealed_eval).")
    min: float | None = Field(None, description="The candidate's lower interval bound must reach this.")
    max: float | None = Field(None, description="The candidate's upper interval bound must stay below this.")
    min_delta: float | None = Field(None, description="The lower bound of candidate − baseline must reach this.")
    max_drop: float | None = Field(
        None, description="The lower bound of candidate − baseline must stay above −max_drop."
    )
    confidence: float | None = Field(
        None, gt=0, lt=1, description="Confidence of the bootstrap interval (default 0.95)."
    )
    segments: list[str] | None = Field(None, description="Task fields to repeat the gate per value of.")
    min_items: PositiveInt | None = Field(
        None, description="Fewer items than this (overall or in a segment) fail the gate: too little evidence."
    )
    critical: bool = Field(False, description="A critical gate failing in any segment fails the release.")


class Suite(Section):
    """Another contract's evaluation, run on the candidate: a capability it must not lose."""

    name: str = Field(min_length=1, description="The suite's name; its gates are reported as NAME/GATE.")
    contract: str = Field(
        min_length=1,
        description="The other contract (a path relative to this one): its splits, verifier and environment "
        "evaluate the candidate and this contract's baseline.",
    )
    gates: list[Gate] = Field(
        min_length=1,
        description="Gates on that contract's splits and metrics, judged against this contract's baseline "
        "(e.g. max_drop on its accuracy); a critical one fails the release.",
    )


class Acceptance(Section):
    """When a run may ship."""

    budget: Budget | None = Field(
        None, description="Limits on rollouts, verifier calls and tokens; discarded generations count too."
    )
    baseline: str | None = Field(
        None, min_length=1, description="Evaluation JSON of the bundle to beat (`rlvr gate --baseline` overrides it)."
    )
    gates: list[Gate] = Field(description="Release gates, judged with paired bootstrap intervals against the baseline.")
    latency: Latency | None = Field(
        None, description="How latency gates (ttft_s, tpot_s, latency_s) are measured; required by them."
    )
    suites: list[Suite] | None = Field(
        None, min_length=1, description="Other contracts' evaluations the candidate must pass (capability retention)."
    )


class Waiver(Section):
    rule: str = Field(pattern=r"^RLV\d{3}$", description="The RLV code waived (RLV001–RLV003 cannot be).")
    reason: str = Field(min_length=1, description="Why the finding is accepted.")
    expires: str | None = Field(None, pattern=DATE, description="YYYY-MM-DD; expired waivers stop waiving.")
    tasks: list[str | int] | None = Field(
        None,
        min_length=1,
        description="Only findings about these task ids (every task a finding names: both of a pair); without "
        "it, every finding of the code.",
    )
    match: str | None = Field(
        None,
        min_length=1,
        description="Only findings whose text — place and message, as `rlvr validate` and `rlvr data check` print "
        "them — this regular expression finds (Python `re.search`).",
    )

    @field_validator("match")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value
