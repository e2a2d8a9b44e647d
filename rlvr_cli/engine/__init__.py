"""Below the trainer and the model interfaces: sampling from a causal LM and the log-probs of its tokens."""
