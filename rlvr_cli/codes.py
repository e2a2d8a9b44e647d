"""Every rule code rlvr reports — contract rules (RLV) and chat-template checks (RLT) — with
what fires it, why it matters, how to fix it and an example. `rlvr rule CODE` prints one;
docs/rules.md is generated from this table (a test keeps the two equal)."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr_cli.errors import UsageProblem


@dataclass(frozen=True)
class Code:
    code: str
    severity: str  # error | warning
    fires: str
    why: str
    fix: str
    example: str = ""


def _c(code: str, severity: str, fires: str, why: str, fix: str, example: str = "") -> Code:
    return Code(code, severity, fires, why, fix, example)


CODES: tuple[Code, ...] = (
    _c(
        "RLV001",
        "error",
        "the YAML cannot be read: a syntax error, a duplicate key, a tab, an alias bomb, a file over 1 MiB or not UTF-8",
        "a contract that parses differently in two tools is not one contract",
        "fix the YAML at the position shown",
        "hyperparameters:\n  seed: 1\n  seed: 2   # duplicate key",
    ),
    _c(
        "RLV002",
        "error",
        "a key the format does not know (often a typo or a key in the wrong section)",
        "an unknown key is silently ignored by most trainers: the run would not do what the file says",
        "use the suggested key, or move it to the section it belongs to",
        "objective:\n  klcoef: 0.1   # did you mean 'kl'?",
    ),
    _c(
        "RLV003",
        "error",
        "a wrong type, a value out of range, or a missing required key (also keys another key requires, such as kl.estimator when kl.coef > 0)",
        "keys that change the objective have no default: the contract must say them",
        "give the key the type and range the message names",
        "objective:\n  kl: {coef: 0.05}   # estimator and placement missing",
    ),
    _c(
        "RLV004",
        "warning",
        "a waiver's `expires` date has passed",
        "a waiver is a decision with a date to revisit it",
        "renew the waiver with a new date and reason, or fix what it waives",
        "waivers:\n  - {rule: RLV204, reason: ..., owner: ..., expires: 2020-01-01}",
    ),
    _c(
        "RLV005",
        "warning",
        "a waiver matches no diagnostic, or names a structural code (RLV001–RLV003) that cannot be waived",
        "a stale waiver hides the next real finding of that code",
        "remove the waiver",
        "waivers:\n  - {rule: RLV802, ...}   # but a gate is critical",
    ),
    _c(
        "RLV101",
        "error",
        "kl.coef > 0 while artifacts.reference is missing or `none`",
        "the KL term needs a frozen reference; without one it silently measures nothing",
        "name a reference (or `same_as_policy: true`), or set kl.coef: 0",
        "objective:\n  kl: {coef: 0.05, estimator: k3, placement: loss}\nartifacts:\n  reference: none",
    ),
    _c(
        "RLV102",
        "warning",
        "the reference points at the same files as the policy without `same_as_policy: true`",
        "a frozen copy of the starting policy is a choice; pointing at the same folder by accident is a common slip",
        "add `same_as_policy: true` to say it is intended",
        "artifacts:\n  policy: {path: model}\n  reference: {path: model}",
    ),
    _c(
        "RLV103",
        "warning",
        "a hub `id` without a pinned 40-hex `revision`",
        "a hub id moves; the run would not be reproducible",
        "pin `revision:` to a commit sha",
        "artifacts:\n  policy: {id: Qwen/Qwen2.5-0.5B-Instruct}",
    ),
    _c(
        "RLV104",
        "error",
        "(--deep) a file no longer matches its sha256 in the lock file or a `sha256:` key",
        "the data, model or verifier changed under a contract that claims them",
        "restore the file, or re-run `rlvr lock` if the change is intended",
    ),
    _c(
        "RLV201",
        "error",
        "advantage.scale divides by a std but advantage.std (population | sample) is missing",
        "population and sample std differ by √(n/(n-1)): at group size 4 that is 15% of every advantage",
        "set advantage.std",
        "objective:\n  advantage: {baseline: group_mean, scale: group_std, epsilon: 1.0e-6}",
    ),
    _c(
        "RLV202",
        "error",
        "clip.high < clip.low, or either outside (0, 1)",
        "an inverted or empty trust region makes the surrogate meaningless",
        "use 0 < low ≤ high < 1 (DAPO: 0.2 / 0.28)",
        "objective:\n  clip: {low: 0.3, high: 0.2}",
    ),
    _c(
        "RLV203",
        "error",
        "reward.unit is session or trajectory while environment.kind is single_turn",
        "a single-turn task has no session or trajectory to reward",
        "use reward.unit: response",
        "environment: {kind: single_turn}\nobjective:\n  reward: {unit: trajectory}",
    ),
    _c(
        "RLV204",
        "warning",
        "kl.coef is 0 while a reference is given (loaded for nothing)",
        "a reference model costs a full copy of the weights in memory",
        "drop the reference, or give kl.coef > 0",
        "objective:\n  kl: {coef: 0}\nartifacts:\n  reference: {path: model, same_as_policy: true}",
    ),
    _c(
        "RLV301",
        "error",
        "group_size < 2",
        "a group of one has no baseline to compare with: every advantage is 0",
        "use group_size ≥ 2 (commonly 8–16)",
        "hyperparameters:\n  group_size: 1",
    ),
    _c(
        "RLV302",
        "error",
        "prompts_per_step · group_size is not divisible by micro_batch_sequences",
        "the last micro-batch would be short and the aggregation would weigh it differently",
        "choose micro_batch_sequences that divides prompts_per_step · group_size",
        "hyperparameters: {prompts_per_step: 4, group_size: 3, micro_batch_sequences: 5}",
    ),
    _c(
        "RLV303",
        "error",
        "updates_per_batch − 1 exceeds max_policy_lag",
        "every extra optimizer pass over the same samples makes them one step more off-policy",
        "lower updates_per_batch or raise max_policy_lag",
        "hyperparameters: {updates_per_batch: 4, max_policy_lag: 1}",
    ),
    _c(
        "RLV401",
        "error",
        "hints are used without a hint-free sealed_eval and `leak_check: true` (with --deep: a sealed_eval row carries the hint field)",
        "a hint that reaches evaluation fakes progress",
        "set leak_check: true and keep the hint field out of sealed_eval",
        "data:\n  hints: {used: true, source: solutions, field: hint, leak_check: false}",
    ),
    _c(
        "RLV402",
        "error",
        "dedup.stage is not before_split",
        "deduplicating after splitting leaves copies of training tasks in the evaluation splits",
        "deduplicate before splitting",
        "data:\n  dedup: {stage: after_split, method: exact}",
    ),
    _c(
        "RLV403",
        "error",
        "a split path is the same file as another split",
        "evaluating on the training data measures memorisation",
        "give each split its own file",
        "data:\n  splits: {train: {path: a.jsonl}, holdout: {path: a.jsonl}, ...}",
    ),
    _c(
        "RLV404",
        "warning",
        "a data source lacks a license or a consent statement",
        "a model trained on data you may not use cannot ship",
        "state license and consent for every source",
    ),
    _c(
        "RLV405",
        "error",
        '(--deep) a task id is used twice, within a split or across splits (`1` and `"1"` count as one id)',
        "records, prompts and evaluations are keyed by task id: a duplicate scores one task's samples against "
        "another's answer, or evaluates a training task as held out",
        "give every task its own id; a task that belongs to two splits goes into one",
        '{"id": 7, "prompt": "2+2"}\n{"id": "7", "prompt": "3+3"}   # one id twice',
    ),
    _c(
        "RLV501",
        "error",
        "on_truncated: penalize without truncation_penalty",
        "the penalty is part of the reward; it has no safe default",
        "give truncation_penalty (e.g. 0 or -1)",
        "length: {on_truncated: penalize}",
    ),
    _c(
        "RLV502",
        "error",
        "dynamic_sampling.drop_uniform_groups without log_by",
        "dropping all-equal groups changes what the model trains on; acceptance must be visible per segment",
        "log_by the task fields that matter (domain, difficulty)",
        "length:\n  dynamic_sampling: {drop_uniform_groups: true, max_rounds: 3}",
    ),
    _c(
        "RLV503",
        "error",
        "packing.enabled with isolate_episodes: false",
        "packed episodes that attend to each other leak one task into another",
        "set isolate_episodes: true",
        "length:\n  packing: {enabled: true, isolate_episodes: false}",
    ),
    _c(
        "RLV601",
        "error",
        "a monitoring rule without owner or window",
        "a rule that fires on one noisy value, or that nobody answers, is not a guard",
        "give window (≥ 1) and owner",
        "monitoring:\n  rules: [{name: kl, metric: kl, when: '> 0.5', action: pause}]",
    ),
    _c(
        "RLV602",
        "error",
        "no rule aborts on nonfinite_count",
        "a NaN in the weights ruins every later step; the run must stop at once",
        "add {metric: nonfinite_count, when: '> 0', window: 1, action: abort}",
    ),
    _c(
        "RLV603",
        "warning",
        "entropy, response_length_mean, verifier_error_rate (and kl when kl.coef > 0) are left unwatched",
        "entropy collapse, length blow-up and a failing verifier are the usual silent failures",
        "add a pause rule on each",
    ),
    _c(
        "RLV604",
        "error",
        "a rule names a metric this run cannot produce (kl without a reference, holdout_reward without holdout_every) or an unknown metric",
        "a rule on a metric that never arrives never fires",
        "use a metric from `rlvr_cli.metrics` that this run produces",
        "monitoring:\n  rules: [{name: e, metric: entropyy, when: '< 0.1', window: 3, action: pause, owner: me}]",
    ),
    _c(
        "RLV701",
        "error",
        "checkpoint.include misses one of model, optimizer, scheduler, rng, sampler, data_cursor, rollout_cursor",
        "resume would not continue exactly as if the run had not stopped",
        "include every part",
        "checkpoint: {every_steps: 50, keep_last: 2, include: [model]}",
    ),
    _c(
        "RLV801",
        "error",
        "a gate names no threshold (min, max, min_delta, max_drop), or a split data.splits lacks",
        "a gate without a threshold passes everything",
        "give the gate a threshold on a split that exists",
        "acceptance:\n  gates: [{name: g, metric: reward_mean, split: holdout}]",
    ),
    _c(
        "RLV802",
        "warning",
        "no gate is critical",
        "averages hide a segment that got worse; a critical gate fails the release on any segment",
        "mark the gate that protects what must not regress as critical: true",
    ),
    _c(
        "RLV901",
        "error",
        "(--deep) an artifact, data file, chat template, stop token or verifier cannot be found or loaded",
        "the run would fail at step 1, or train with the wrong template",
        "fix the path or the file the message names",
    ),
    _c(
        "RLT001",
        "error",
        "the template emits BOS and tokenizing with special tokens adds another",
        "a doubled BOS shifts every position the model was trained with",
        "encode rendered text with add_special_tokens=False (rlvr does); fix the template if it adds BOS twice itself",
    ),
    _c(
        "RLT002",
        "error",
        "an assistant turn has no stop token",
        "the model never learns to stop",
        "make the template end assistant turns with one of length.stop_tokens",
    ),
    _c(
        "RLT003",
        "error",
        "a stop token that ends an assistant turn is outside the loss mask",
        "the model is never trained to emit the token that ends its answer",
        "list the token that ends assistant turns in length.stop_tokens",
    ),
    _c(
        "RLT004",
        "error",
        "a stop token is the pad token",
        "padding would look like stopping, and stopping like padding",
        "give the tokenizer a distinct pad token",
    ),
    _c(
        "RLT005",
        "warning",
        "add_generation_prompt adds nothing",
        "the model starts its answer without its role header",
        "use a template that renders the assistant header for the generation prompt",
    ),
    _c(
        "RLT006",
        "error",
        "the generation prompt is not the start of the rendered assistant turn",
        "the tokens trained are not the tokens sampled (e.g. a template that opens <think> when generating but drops reasoning when rendering)",
        "align the template's generation prompt with how it renders assistant turns, or train on the sampled ids only",
    ),
    _c(
        "RLT007",
        "error",
        "appending a turn changes the tokens of earlier turns (history rewriting)",
        "multi-turn training on the rendered conversation would train tokens the model never saw",
        "use a template that renders history the same way at every turn, or train token-in/token-out",
    ),
    _c(
        "RLT008",
        "warning",
        "decoding then re-encoding a turn's ids gives other ids (retokenization drift)",
        "text round trips silently change what is trained",
        "keep the sampled ids; never re-tokenize decoded text",
    ),
    _c(
        "RLT009",
        "warning",
        "the template depends on the date or time",
        "two renders of one conversation differ by day",
        "pass a fixed date, or remove it from the template",
    ),
    _c(
        "RLT010",
        "warning",
        "the template injects a default system prompt",
        "every prompt carries text the data did not ask for",
        "give an explicit system message, or use a template without the default",
    ),
    _c(
        "RLT011",
        "error",
        "a system message the template cannot express (it raises or drops it)",
        "the model trains on prompts without the instructions the data contains",
        "merge the system message into the first user turn, or use another template",
    ),
    _c(
        "RLT012",
        "error",
        "the prompt exceeds max_prompt_tokens and truncation would cut the generation prompt (or is refused)",
        "a cut generation prompt makes the model answer in the wrong role",
        "raise max_prompt_tokens or shorten the prompt",
    ),
    _c(
        "RLT013",
        "error",
        "the template fails to render the conversation",
        "the conversation cannot be trained as written",
        "fix the conversation's shape or the template",
    ),
)
BY_CODE = {c.code: c for c in CODES}


def explain(code: str) -> str:
    """The text `rlvr rule CODE` prints."""
    found = BY_CODE.get(code.strip().upper())
    if found is None:
        raise UsageProblem(f"no rule {code!r}; codes are {CODES[0].code}…{CODES[-1].code} (see docs/rules.md)")
    lines = [f"{found.code} ({found.severity}): {found.fires}", "", f"why: {found.why}", f"fix: {found.fix}"]
    if found.example:
        lines += ["example:", *(f"    {line}" for line in found.example.splitlines())]
    return "\n".join(lines)


def markdown() -> str:
    """docs/rules.md."""
    out = [
        "# Rule codes",
        "",
        "Generated from `rlvr_cli/codes.py` (`rlvr rule CODE` prints one). RLV codes come from",
        "`rlvr validate` (RLV104 and RLV901 only with `--deep`); RLT codes from `rlvr render`.",
        "A warning fails `rlvr validate --strict`; a waiver (`waivers:` in the contract) turns a",
        "finding into a visible `waived[...]` line, except for RLV001–RLV003.",
        "",
    ]
    for c in CODES:
        out += [f"## {c.code} ({c.severity})", "", c.fires[0].upper() + c.fires[1:] + ".", "", f"**Why:** {c.why}.", ""]
        out += [f"**Fix:** {c.fix}.", ""]
        if c.example:
            out += ["```yaml", c.example, "```", ""]
    return "\n".join(out)
