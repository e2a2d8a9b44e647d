"""What the lean sampler's fused forward covers and how much it may copy, without importing torch
(`rlvr plan` reads them to count the sampler's copy of the weights)."""

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
COPY_BYTES = 256 << 20  # the most the decoder's copies of the weights may take
#: the layers the fused forward computes side by side, their weights stacked in one matrix
JOINED = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
#: on a CPU the decoder holds its copies in oneDNN's packed layout (engine/fused.py `packs`): in bf16
#: every layer, in fp32 each matrix of at least this many elements (512 × 512), a single layer too
PACK_FP32 = 1 << 18


def packed_on_cpu(compute: str, elements: int) -> bool:
    """The rule itself, by the compute dtype's name: the decoder and `rlvr plan` both read it."""
    return compute == "bf16" or (compute == "fp32" and elements >= PACK_FP32)
