"""Toy models for examples and tests: tiny tokenizers and causal LMs built locally (`tiny`), and
the supervised warm-up that starts a learning example from its demonstrations (`warmup`)."""
