"""Training: objective, rollouts, the loop, records, monitoring and checkpoints."""
