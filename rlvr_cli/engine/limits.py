"""What the lean sampler's fused forward covers and how much it may copy, without importing torch
(`rlvr plan` reads them to count the sampler's copy of the weights)."""

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
COPY_BYTES = 256 << 20  # the most the decoder's transposed copies of the weights may take
