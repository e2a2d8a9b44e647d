"""The experiment contract, format 1, as pydantic models: the one source of truth.

The JSON Schema (`rlvr schema`, `schemas/contract.schema.json`) is generated from these
classes. Keys that change the objective have no default. Requirements that depend on
another key (e.g. `kl.estimator` when `kl.coef > 0`) are checked by `rules.py` and
mirrored in the schema with `if`/`then` so that both agree.
"""

from typing import Annotated, Literal

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from rlvr_cli.contract.adapter import Adapter
from rlvr_cli.contract.advantage_section import Advantage, Whiten
from rlvr_cli.contract.batch_keys import MICRO_BATCH_SEQUENCES, MINI_BATCHES, SAMPLE_AHEAD
from rlvr_cli.contract.clip_section import Clip
from rlvr_cli.contract.data_section import Data
from rlvr_cli.contract.kl_section import KL
from rlvr_cli.contract.length_keys import OVERLONG_PENALTY, DynamicSampling, OverlongPenalty, Packing
from rlvr_cli.contract.off_policy import Correction, OffPolicyMask, Ratio
from rlvr_cli.contract.operations import (
    Acceptance,
    Budget,
    Checkpoint,
    Gate,
    Monitoring,
    Records,
    Rule,
    Waiver,
)
from rlvr_cli.contract.rejection_section import Rejection
from rlvr_cli.contract.reward_section import Reward, RewardComponent
from rlvr_cli.contract.scale import Parallel, Precision, PrecisionValue, precision_of
from rlvr_cli.contract.sections import (
    CHECKPOINT_PARTS,
    ENTRYPOINT,
    Int,
    PositiveInt,
    Section,
    exactly_one,
    not_boolean,
    one_of_required,
)
from rlvr_cli.contract.serving import Server
from rlvr_cli.contract.tool_keys import (
    CALLS_WITHOUT_ROOM,
    MAX_SESSIONS,
    MAX_TOOL_OUTPUT_BYTES,
    TOOL_FORMAT,
    ToolFormatName,
)
from rlvr_cli.contract.verifier_kinds import AnswerCheck, Judge, UnitTests

__all__ = [
    "CHECKPOINT_PARTS",
    "Acceptance",
    "Budget",
    "Checkpoint",
    "Contract",
    "Gate",
    "Monitoring",
    "Records",
    "Reward",
    "RewardComponent",
    "Rule",
    "Waiver",
    "Whiten",
]


# ── artifacts ─────────────────────────────────────────────────────────────────────────


class ModelRef(Section):
    """A local folder, or a hub id pinned to a revision."""

    model_config = ConfigDict(json_schema_extra=one_of_required("path", "id"))
    path: str | None = Field(None, min_length=1, description="Local folder, relative to the contract.")
    id: str | None = Field(None, min_length=1, description="Hub id, e.g. `org/model`.")
    revision: str | None = Field(None, min_length=1, description="40-hex commit of `id`.")

    @model_validator(mode="after")
    def _one_source(self) -> "ModelRef":
        exactly_one(self, {"path": "path", "id": "id"}, "a model reference")
        return self


class TokenizerRef(ModelRef):
    """Where the tokenizer comes from, and which chat template renders conversations."""

    chat_template: str = Field(
        min_length=1,
        description="`native` (the tokenizer's own template) or a `.jinja` file path.",
    )


class ReferenceRef(Section):
    """The frozen KL anchor: a checkpoint, a frozen copy of the policy, or an explicit none."""

    model_config = ConfigDict(json_schema_extra=one_of_required("path", "id", "same_as_policy", "none"))
    path: str | None = Field(None, min_length=1, description="Local folder.")
    id: str | None = Field(None, min_length=1, description="Hub id.")
    revision: str | None = Field(None, min_length=1, description="40-hex commit of `id`.")
    same_as_policy: Literal[True] | None = Field(
        None, description="A frozen copy of the starting policy is the intended anchor."
    )
    none_: str | None = Field(None, alias="none", min_length=1, description="Why no reference is used.")

    @model_validator(mode="after")
    def _one_source(self) -> "ReferenceRef":
        exactly_one(
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
    tokenizer: TokenizerRef = Field(description="The tokenizer and the chat template that renders conversations.")
    reference: ReferenceRef | None = Field(None, description="The frozen KL anchor.")
    verifier: VerifierRef = Field(description="The verifier's version (and optionally its container image).")
    lock: str | None = Field(None, min_length=1, description="Lock file written by `rlvr lock`.")


# ── environment ───────────────────────────────────────────────────────────────────────


class Environment(Section):
    """Where rewards come from."""

    kind: Literal["single_turn", "tool_use"] = Field(
        description="single_turn (a verifier function) or tool_use (a resources server)."
    )
    verifier: str | None = Field(
        None,
        pattern=ENTRYPOINT,
        description="`module:function` (single_turn: this, or one of `answer_check`, `unit_tests`, `judge`).",
    )
    answer_check: AnswerCheck | None = Field(
        None,
        description="single_turn: the built-in answer-equivalence verifier (numbers, fractions, LaTeX expressions, "
        "sets, intervals) instead of `verifier`; components `correct` and `format`.",
    )
    unit_tests: UnitTests | None = Field(
        None,
        description="single_turn: the response's code run against the task's tests in a bubblewrap sandbox, "
        "instead of `verifier`; components `tests` and `format`.",
    )
    judge: Judge | None = Field(
        None,
        description="single_turn: a model judge behind an OpenAI-compatible endpoint, instead of `verifier`; "
        "component `judge`. Only where nothing executable can verify.",
    )
    server: str | None = Field(
        None,
        min_length=1,
        description="The resources server (tool_use): `module:Class` (a ResourcesServer subclass), "
        "`module:app`, a URL, or another framework's server at a URL: `nemo-gym+URL` (a NeMo Gym "
        "resources server), `openenv+URL` (an OpenEnv environment).",
    )
    max_steps: PositiveInt | None = Field(None, description="Model calls per episode (tool_use).")
    tools: list[str] | None = Field(
        None, description="Tools offered to the policy; must be what the server declares (checked before any episode)."
    )
    forbidden_tools: list[str] | None = Field(
        None, description="Tools whose use fails the episode whatever the final state; must match the server's."
    )
    max_tool_output_bytes: PositiveInt | None = MAX_TOOL_OUTPUT_BYTES
    calls_without_room: Literal["skip", "execute"] | None = CALLS_WITHOUT_ROOM
    tool_format: ToolFormatName | None = TOOL_FORMAT
    max_sessions: PositiveInt | None = MAX_SESSIONS
    timeout_s: float = Field(gt=0, description="Wall-clock bound for one verification.")
    memory_mb: PositiveInt | None = Field(
        None,
        description="Memory the verifier may allocate beyond what it holds once loaded (MiB); "
        "over it, the verdict is verifier_error. None: no limit of rlvr's own.",
    )


# ── objective ─────────────────────────────────────────────────────────────────────────


class EntropyMask(Section):
    top: float = Field(
        gt=0,
        lt=1,
        description="The share in (0, 1) of each optimizer step's trained tokens, by the policy's entropy at that "
        "step, whose policy loss trains: tokens below the batch's (1 − top)-quantile of entropy (linear "
        "interpolation) contribute none, and still count in the aggregation (TRL top_entropy_quantile).",
    )


class Objective(Section):
    """The loss, term by term."""

    reward: Reward = Field(description="How the reward is made from the verdict.")
    advantage: Advantage = Field(description="How rewards become advantages.")
    clip: Clip = Field(description="The trust region of the ratio.")
    kl: KL = Field(description="The KL penalty to the frozen reference.")
    entropy_coef: float = Field(0.0, ge=0, description="Weight of the entropy bonus (0: none).")
    aggregation: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant_norm"] = Field(
        description="How token losses are averaged: token_mean (DAPO), seq_mean_token_mean (GRPO), "
        "seq_mean_token_sum, constant_norm (Dr. GRPO)."
    )
    ratio: Ratio | None = Field(
        None,
        description="The ratio's level (token, or sequence: GSPO) and denominator. Absent: per token, over the "
        "trainer's own log-probs (samples drawn ahead: the engine's); required with sample_ahead, vllm or sglang.",
    )
    correction: Correction | None = Field(
        None, description="Importance weights for the engine/trainer mismatch: none, tis or mis. Absent: none."
    )
    entropy_mask: EntropyMask | None = Field(
        None,
        description="Train the policy loss on the highest-entropy tokens only (Wang et al. 2025, 'Beyond the 80/20 "
        "rule': the forking tokens). Absent: every trained token.",
    )
    rejection: list[Rejection] | None = Field(
        None,
        description="Tokens or answers whose engine/trainer divergence is out of bounds leave the loss (verl's "
        "rollout rejection sampling); every criterion must keep a token. Absent: none.",
    )
    off_policy_mask: OffPolicyMask | None = Field(
        None,
        description="Off-policy sequence masking (DeepSeek-V3.2's OPSM): answers with A < 0 whose policy drifted "
        "past a threshold train nothing. Absent: none.",
    )

    @property
    def corrects(self) -> bool:
        """An importance correction weighs each token's loss (tis or mis)."""
        return self.correction is not None and self.correction.kind != "none"


# ── hyperparameters ───────────────────────────────────────────────────────────────────


class Sampling(Section):
    temperature: float = Field(
        ge=0, description="Sampling temperature (log-probs are computed at the same temperature)."
    )
    top_p: float = Field(gt=0, le=1, description="Nucleus sampling mass (1: off).")
    top_k: Int = Field(ge=0, description="0 disables top-k.")
    engine: Literal["lean", "transformers", "vllm", "sglang"] = Field(
        "lean",
        description="What samples the rollouts: `lean` (rlvr's own decode loop over the model and its KV cache, "
        "with a fused forward for Llama/Mistral/Qwen2/Qwen3), `transformers` (`generate`), `vllm` (colocated: the "
        "`vllm` extra, on a GPU; with `server`: a running `vllm serve`), or `sglang` (a running SGLang server, "
        "`server` required). The same distribution either way; the engine and its version are in the plan and "
        "records.",
    )
    server: Server | None = Field(
        None, description="A running serving engine to sample from over HTTP (engine vllm or sglang)."
    )


class Optimizer(Section):
    name: Literal["adamw", "adam", "sgd"] = Field(description="adamw, adam or sgd.")
    lr: float = Field(gt=0, description="Peak learning rate.")
    betas: list[float] = Field(min_length=2, max_length=2, description="Adam (β1, β2).")
    weight_decay: float = Field(ge=0, description="Decoupled weight decay (adamw) or L2 (adam, sgd).")
    grad_clip: float = Field(ge=0, description="Max global grad norm; 0 disables clipping.")


class Schedule(Section):
    name: Literal["constant", "linear", "cosine"] = Field(description="constant, linear or cosine decay to 0.")
    warmup_steps: Int = Field(0, ge=0, description="Linear warm-up steps.")


class Hyperparameters(Section):
    group_size: Int = Field(le=4096, description="Samples per prompt (≥ 2).")
    prompts_per_step: Int = Field(ge=1, le=1_000_000, description="Prompts (groups) per optimizer batch.")
    micro_batch_sequences: PositiveInt | None = MICRO_BATCH_SEQUENCES
    updates_per_batch: Int = Field(ge=1, le=1024, description="Optimizer passes over one rollout batch.")
    mini_batches: Int = MINI_BATCHES
    max_policy_lag: Int = Field(ge=0, description="How many optimizer steps old a rollout may be.")
    sample_ahead: bool = SAMPLE_AHEAD
    sampling: Sampling = Field(description="How responses are sampled.")
    optimizer: Optimizer = Field(description="The optimizer and its settings.")
    schedule: Schedule | None = Field(None, description="The learning-rate schedule (constant when absent).")
    max_steps: Int = Field(ge=1, le=100_000_000, description="Optimizer batches in the run.")
    seed: Int = Field(ge=0, description="Seeds sampling, shuffling and initialisation.")
    precision: PrecisionValue = Field(
        description="fp32; bf16: fp32 master weights and optimizer state, bf16 compute; fp16: the same with fp16 "
        "compute and a loss scaler; or the dtypes written out, e.g. {params: bf16, compute: bf16} (pure bf16)."
    )
    parallel: Parallel | None = Field(None, description="How several processes share the model (ddp when absent).")
    adapter: Adapter | None = Field(
        None, description="Train a LoRA adapter over the frozen policy (peft); absent: every weight trains."
    )

    @property
    def ahead_steps(self) -> int:
        """How many steps are sampled ahead (train/overlap.py): the lag the update's passes leave."""
        return max(self.max_policy_lag - (self.steps_per_batch - 1), 0) if self.sample_ahead else 0

    @property
    def steps_per_batch(self) -> int:
        """Optimizer steps one rollout batch takes: passes × mini-batches."""
        return self.updates_per_batch * self.mini_batches

    @property
    def dtypes(self) -> Precision:
        """The precision with every dtype resolved (a preset's, or as written)."""
        return precision_of(self.precision)

    @property
    def strategy(self) -> Parallel:
        return self.parallel or Parallel(strategy="ddp")


# ── length ────────────────────────────────────────────────────────────────────────────


class Length(Section):
    """What counts as an answer."""

    max_prompt_tokens: Int = Field(ge=1, le=10_000_000, description="Longest prompt in tokens.")
    max_response_tokens: Int = Field(ge=1, le=10_000_000, description="Longest response in tokens.")
    prompt_truncation: Literal["left", "error"] = Field(
        description="A longer prompt is cut on the left or refused; the generation prompt is never cut."
    )
    on_truncated: Literal["exclude", "penalize", "keep"] = Field(
        description="What a response that hit the limit does: excluded, penalised, or kept and verified."
    )
    truncation_penalty: float | None = Field(
        None, description="The reward of a truncated response (with on_truncated: penalize)."
    )
    stop_tokens: list[str] = Field(
        min_length=1, description="Token strings that end a response; each is inside the loss mask."
    )
    padding_side: Literal["left", "right"] = Field(
        "left",
        description="Which side the update forward pads sequences on (generation always pads prompts on "
        "the left, as decoder-only generation needs); the log-probs are the same either way.",
    )
    packing: Packing | None = Field(None, description="Pack episodes into one sequence with attention kept apart.")
    dynamic_sampling: DynamicSampling | None = Field(None, description="Drop uniform groups and sample again.")
    overlong_penalty: OverlongPenalty | None = OVERLONG_PENALTY


class Contract(Section):
    """An RLVR experiment contract (format 1)."""

    model_config = ConfigDict(title="rlvr experiment contract")
    contract_version: Annotated[Literal[1], BeforeValidator(not_boolean)] = Field(description="The format version: 1.")
    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9._-]*$", description="The run's name: the default run folder is runs/<name>/."
    )
    description: str | None = Field(None, description="What the experiment is for.")
    artifacts: Artifacts = Field(description="Policy, tokenizer, reference and verifier.")
    environment: Environment = Field(description="Where rewards come from.")
    objective: Objective = Field(description="The loss, term by term.")
    hyperparameters: Hyperparameters = Field(description="Batch shapes, sampling, optimizer and schedule.")
    data: Data = Field(description="Provenance and isolation of the tasks.")
    length: Length = Field(description="What counts as an answer.")
    monitoring: Monitoring = Field(description="Rules that pause or abort the run.")
    checkpoint: Checkpoint = Field(description="When and what to checkpoint.")
    records: Records = Field(Records(), description="The immutable rollout log.")
    acceptance: Acceptance = Field(description="When a run may ship.")
    waivers: list[Waiver] | None = Field(None, description="Accepted findings, each with a reason and an expiry.")

    def seeds_each_group(self, torchrun: bool) -> bool:
        """Whether each group of a step is sampled alone with a seed of its own (samples that do not
        depend on the number of processes): single-turn under torchrun unless `sample_groups:
        together`. Tool-use rollouts share a process's groups in one batch seeded by rank; one
        plain process samples a step in one batch with the run's seed."""
        together = self.hyperparameters.strategy.sample_groups == "together"
        return torchrun and self.environment.kind == "single_turn" and not together

    def rows_sampled_at_once(self, processes: int, torchrun: bool) -> int:
        """The most rows a process samples in one batch (what its KV cache holds): a group under
        torchrun where each group has a seed of its own, else the process's share of a step."""
        hp = self.hyperparameters
        share = hp.prompts_per_step * hp.group_size // max(processes, 1)
        return hp.group_size if self.seeds_each_group(torchrun) else share
