"""What the lean sampler's fused forward covers and how much it may copy, without importing torch
(`rlvr plan` reads them to count the sampler's copy of the weights)."""

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
# RoPE whose inverse frequencies and scale are fixed when the model is built (Llama 3.x's
# `llama3`, `linear`, `yarn`): the fused decoder reads both off the model's rotary embedding.
# `dynamic` and `longrope` change them with the sequence's length: only the model's forward follows.
STATIC_ROPE = (None, "default", "llama3", "linear", "yarn")
COPY_BYTES = 256 << 20  # the most the decoder's copies of the weights may take
#: the layers the fused forward computes side by side, their weights stacked in one matrix
JOINED = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
#: on a CPU the decoder holds its copies in oneDNN's packed layout (engine/fused.py `packs`): in bf16
#: every layer, in fp32 each matrix of at least this many elements (512 × 512), a single layer too
PACK_FP32 = 1 << 18


def packed_on_cpu(compute: str, elements: int) -> bool:
    """The rule itself, by the compute dtype's name: the decoder and `rlvr plan` both read it."""
    return compute == "bf16" or (compute == "fp32" and elements >= PACK_FP32)


#: per layer, the bytes of fp32 prompt keys the update's rows' copies would hold (as many again of values) before
#: its responses attend in two parts instead (on a CPU: engine/two_part.py). Measured, a forward and backward,
#: two parts against copies: 1 M parameters, 16 rows of 18-30-token prompts (0.1 MB), 21 against 19 ms; 31 M
#: parameters in bf16, 16 rows of 50-80-token prompts (1.1 MB), 0.68 against 0.67 s; of 110-300-token prompts
#: (3-4 MB), 0.86 against 0.92 s; 64 rows of those, 3.37 against 3.75 s
TWO_PART_BYTES = 2 << 20


def in_two_parts(rows: float, groups: float, kv_heads: int, prompt: float, head_dim: int) -> bool:
    """On a CPU, whether the shared-prompt update's responses attend in two parts (no copies of
    their prompt's keys and values): engine/shared.py and `rlvr plan` both read it."""
    return (rows - groups) * kv_heads * prompt * head_dim * 4 >= TWO_PART_BYTES
