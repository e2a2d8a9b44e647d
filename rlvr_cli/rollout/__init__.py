"""Rollouts: given tasks, a group size, a seed, a round, the policy's revision (and greedy or
not), sample `Sample`s with their verdicts. One interface (`base.Rollout`), two
implementations — single-turn (`single_turn.SingleTurn`: sample, then score on the verifier
worker) and tool-use (`tool_use.ToolUse`: episodes against the resources server) — chosen by
`rollouts.open_rollout` from the contract, and used alike by training, holdout evaluation,
`rlvr gate`, `rlvr audit rewards` and the audits."""
