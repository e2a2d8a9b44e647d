"""The contract's `data` section: where the tasks came from, how they were deduplicated and
split, what the holdout withholds, and how hints are shown. `rlvr data check` checks every
claim made here against the files (rlvr_cli/data/)."""

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from rlvr_cli.contract.sections import SHA256, Handling, Int, PositiveInt, Section, integral

Normalization = Literal["whitespace", "case", "nfkc", "numbers"]
# bounds inside the type, so that `X | None` keeps them in the JSON Schema
ShingleSize = Annotated[int, Field(ge=1, le=64), BeforeValidator(integral)]
Permutations = Annotated[int, Field(ge=16, le=1024), BeforeValidator(integral)]
Fraction = Annotated[float, Field(gt=0, le=1)]


class Source(Section):
    name: str = Field(min_length=1, description="The source's name.")
    path: str = Field(min_length=1, description="The source file, relative to the contract.")
    sha256: str | None = Field(None, pattern=SHA256, description="The file's sha256 (checked by validate --deep).")
    license: str | None = Field(None, min_length=1, description="The license the data is used under.")
    consent: str | None = Field(None, min_length=1, description="How consent was obtained.")
    pii: Handling = Field(description="How personal data was handled (checked by `rlvr data check`, RLV414).")
    secrets: Handling = Field(
        description="How secrets (keys, tokens) were handled (checked by `rlvr data check`, RLV413)."
    )


class Dedup(Section):
    stage: Literal["before_split", "after_split"] = Field(
        description="When duplicates were removed; only before_split keeps the splits apart (RLV402)."
    )
    method: Literal["exact", "minhash"] = Field(
        description="exact, or minhash (near duplicates too: `rlvr data check` then looks for near-duplicate "
        "prompts across splits, RLV411)."
    )
    semantic_clusters: bool = Field(
        description="Whether semantic clusters were kept within one split. true: `rlvr data check` verifies it "
        "(a cluster is one template's prompts: numbers masked, the shingle Jaccard similarity at `threshold`; one "
        "spanning splits is RLV415) and `rlvr data split` keeps each cluster in one split."
    )
    normalize: list[Normalization] = Field(
        ["whitespace"],
        description="What two prompts may differ in and still be one prompt: `whitespace` (runs collapsed, ends "
        "trimmed), `case`, `nfkc` (Unicode compatibility forms), `numbers` (`1,000.50` = `1000.5`).",
    )
    threshold: Fraction | None = Field(
        None,
        description="minhash only: the Jaccard similarity of shingle sets at which two prompts of different "
        "splits are near duplicates (0.8 when absent).",
    )
    shingle: ShingleSize | None = Field(None, description="minhash only: shingle size in characters (5 when absent).")
    permutations: Permutations | None = Field(
        None, description="minhash only: permutations per signature (128 when absent)."
    )


class Split(Section):
    path: str = Field(min_length=1, description="JSONL, one task per line.")
    sha256: str | None = Field(None, pattern=SHA256, description="The file's sha256 (checked by validate --deep).")


class Splits(Section):
    train: Split = Field(description="Tasks trained on.")
    holdout: Split = Field(description="Tasks evaluated during training (greedy, hint-free).")
    sealed_eval: Split = Field(description="Never read by training.")


class HoldoutDesign(Section):
    compositions: list[str] | None = Field(
        None,
        description="Compositions present only in the holdout: task rows carry them in `composition` "
        "(a string or a list); `rlvr data check` checks each is in holdout and absent from train.",
    )
    entity_groups: list[str] | None = Field(
        None,
        description="Entity groups present only in the holdout (task field `entity_group`; checked the same way).",
    )
    length_buckets: list[str] | None = Field(
        None,
        description="Length buckets present only in the holdout (task field `length_bucket`; checked the same way).",
    )
    longer_trajectories: bool | None = Field(
        None, description="The holdout's prompts are longer on average than train's (checked by `rlvr data check`)."
    )


class Leakage(Section):
    answer_fields: list[str] = Field(
        min_length=1,
        description="Task fields that hold the answer; `rlvr data check` refuses a split whose answer appears "
        "verbatim in another split's prompt or hint (RLV412).",
    )
    min_chars: Int = Field(
        ge=1, le=10_000, description="Answers shorter than this (after normalisation) are too common to be a leak."
    )


class Hints(Section):
    used: bool = Field(description="Whether rollouts may show the model a hint.")
    source: str | None = Field(None, min_length=1, description="Where the hints come from.")
    field: str | None = Field(None, min_length=1, description="The task field that holds the hint.")
    leak_check: bool | None = Field(
        None, description="Whether sealed_eval is checked to carry no hint (required with hints)."
    )
    placement: Literal["prompt", "response_prefix"] | None = Field(
        None,
        description="`prompt`: the hint is added to the last user message (`format`); `response_prefix`: the "
        "response starts with the hint, which is never trained, and the model writes the rest. Required with hints.",
    )
    format: str | None = Field(
        None,
        min_length=1,
        description="placement prompt: the user message with its hint, with `{prompt}` and `{hint}` "
        "(`{prompt}\\n\\nHint: {hint}` when absent).",
    )
    share: Fraction | None = Field(
        None,
        description="The share of each group sampled with its task's hint at step 0. Required with hints.",
    )
    until_step: PositiveInt | None = Field(
        None,
        description="The hinted share falls linearly from `share` at step 0 to none at this step. Required with hints.",
    )
    advantage: Literal["subgroup", "group"] | None = Field(
        None,
        description="How hinted samples are compared: `subgroup` (hinted and unhinted samples each against their own "
        "mean and std) or `group` (all samples of a task together). Required with hints.",
    )


class Data(Section):
    """Provenance and isolation."""

    sources: list[Source] = Field(
        min_length=1, description="Where the tasks came from, with license, consent and PII/secret handling."
    )
    dedup: Dedup = Field(description="How duplicates were removed, and when.")
    splits: Splits = Field(description="The train, holdout and sealed_eval JSONL files.")
    split_manifest: str | None = Field(
        None,
        min_length=1,
        description="The manifest `rlvr data split` wrote (how the splits were made); pinned by `rlvr lock`, "
        "checked against the splits by validate --deep.",
    )
    holdout_design: HoldoutDesign | None = Field(None, description="What the holdout withholds to test generalisation.")
    leakage: Leakage | None = Field(
        None,
        description="Which task fields are answers, for the answer-leakage check (RLV412); when absent: "
        "`answer_fields: [answer]`, `min_chars: 8`.",
    )
    pii_patterns: dict[str, str] | None = Field(
        None,
        description="Named regular expressions for personal data of your own (employee ids, ...), scanned with the "
        "built-in email, card-number and SSN patterns (RLV414).",
    )
    hints: Hints | None = Field(None, description="Whether hint-assisted rollouts are used.")
    filters: str | None = Field(None, description="Version string of the filtering recipe.")
    mixture: str | None = Field(None, description="Version string of the mixing recipe.")
