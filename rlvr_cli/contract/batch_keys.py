"""Keys of `hyperparameters` that shape how one rollout batch is trained: how many optimizer
steps a pass over it takes (train/update.py), and whether the next steps are sampled during
its update (train/overlap.py)."""

from pydantic import Field

MICRO_BATCH_SEQUENCES = Field(
    None,
    description="Sequences per forward/backward; must divide a mini-batch's prompts_per_step · group_size / "
    "mini_batches.",
)

MINI_BATCHES = Field(
    1,
    ge=1,
    le=1024,
    description="Optimizer steps a pass takes: the step's trained groups split into this many mini-batches (the "
    "j-th in mini-batch j mod mini_batches), each its own optimizer step, its loss aggregated over its own tokens "
    "and sequences; must divide prompts_per_step (RLV302). Mini-batch j trains on rollouts j steps old, so the "
    "lag is updates_per_batch · mini_batches − 1 (RLV303), and the old log-probs are computed before the "
    "first step. verl: data.train_batch_size / ppo_mini_batch_size; TRL: steps_per_generation / "
    "gradient_accumulation_steps.",
)

SAMPLE_AHEAD = Field(
    False,
    description="Sample the next steps' first rounds during this step's update, each with a copy of the "
    "weights, as many steps ahead as the lag budget leaves: max_policy_lag − (updates_per_batch · "
    "mini_batches − 1) (needs max_policy_lag ≥ updates_per_batch · mini_batches, RLV303; a served engine "
    "samples one step ahead, with the weights it holds). Pays off where sampling has devices or cores of its "
    "own, not on the update's few CPU cores.",
)
