"""Model FLOPs of a step and the machine's measured peak: `mfu` and `step_tflop` in metrics.jsonl.

Model FLOPs are what the objective needs, not what an implementation happens to compute
(recomputation, padding and repeated prompts are not counted):

- a forward over a token at position p (0-based): 2·N + 4·L·d·p, where N is the parameters that
  multiply (every weight but the lookup tables: the input embedding, learned positions; a tied
  output head counts once), L the decoder layers and d the attention width (heads × head size):
  2·N for the matrix products, 4·L·d·p for the scores and the weighted values over the p earlier
  positions;
- a group: its prompt once (the responses share its keys and values), then each response's
  tokens at their positions after the prompt;
- a step: sampling (one forward of every group generated, dynamic-sampling rounds included),
  the update (forward and backward of the groups trained, 3 forwards, per optimizer pass; with
  an adapter the frozen weights need no weight gradient: 2 forwards plus the adapter's share),
  and the reference's forward over the trained groups when the run measures KL (with
  `objective.entropy_mask`, one more forward of the trained groups per pass).

MFU = step model FLOPs / (step_seconds × peak), the peak measured once when the run starts: the
best of a few square matrix products in the compute dtype on the training device.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlvr_cli.contract.layout import EXPERT_FIELDS

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Shape:
    multiplying: int  # N
    layers: int  # L
    attention_width: int  # d
    adapter: int = 0  # parameters trained when the base is frozen (LoRA)

    @classmethod
    def of(cls, model: Any) -> Shape:
        import torch  # the trainer's: it holds a model

        config = model.config
        layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0))
        heads = int(getattr(config, "num_attention_heads", 0) or getattr(config, "n_head", 0))
        hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0))
        head_dim = int(getattr(config, "head_dim", 0) or (hidden // heads if heads else 0))
        total = sum(p.numel() for p in model.parameters())
        # lookup tables (the input embedding, GPT-2's learned positions) multiply nothing; an output
        # head tied to the input table does, once
        head = getattr(model.get_output_embeddings(), "weight", None)
        tables = {id(m.weight): m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding)}
        multiplying = total - sum(w.numel() for w in tables.values() if w is not head) - _idle_experts(model)
        frozen = any(not p.requires_grad for p in model.parameters())
        adapter = sum(p.numel() for p in model.parameters() if p.requires_grad) if frozen else 0
        return cls(multiplying, layers, heads * head_dim, adapter)

    def forward(self, start: int, count: int) -> float:
        """One forward over `count` tokens at positions start … start + count − 1."""
        if count <= 0:
            return 0.0
        positions = count * start + count * (count - 1) / 2  # Σ p
        return 2.0 * self.multiplying * count + 4.0 * self.layers * self.attention_width * positions

    def group(self, prompt: int, responses: list[int]) -> float:
        return self.forward(0, prompt) + sum(self.forward(prompt, r) for r in responses)

    def training(self, prompt: int, responses: list[int]) -> float:
        """Forward and backward: 3 forwards; a frozen base: 2 forwards and the adapter's weight gradients."""
        fwd = self.group(prompt, responses)
        if not self.adapter:
            return 3.0 * fwd
        return 2.0 * fwd + 2.0 * self.adapter * (prompt + sum(responses))


def _idle_experts(model: Any) -> int:
    """A mixture of experts' weights a token does not run through: of each layer's experts (the
    parameters under an `experts` module, an adapter's on them aside), all but
    `num_experts_per_tok` of them."""
    config = model.config
    experts = next((getattr(config, f, None) for f in EXPERT_FIELDS if getattr(config, f, None)), 0)
    active = getattr(config, "num_experts_per_tok", None) or 0
    if not experts or not active:
        return 0
    held = sum(p.numel() for name, p in model.named_parameters() if ".experts." in f".{name}" and "lora_" not in name)
    return held * (experts - active) // experts


def groups(samples: list[Any]) -> list[tuple[int, list[int]]]:
    """(prompt length, response lengths) of each group, in order; a child session of an episode
    (its own prompt) is a group of its own."""
    out: dict[tuple[int, ...], tuple[int, list[int]]] = {}
    for s in samples:
        session = getattr(s, "session", 0)
        key = (s.round, s.group) if session == 0 else (s.round, s.group, s.index, session)
        out.setdefault(key, (len(s.prompt_ids), []))[1].append(len(s.response_ids))
    return list(out.values())


def step_flops(
    shape: Shape, generated: list[Any], trained: list[Any], passes: int, reference: bool, entropy_mask: bool = False
) -> float:
    """`entropy_mask`: one more forward of the trained groups a pass (the mask's threshold)."""
    sampling = sum(shape.group(p, r) for p, r in groups(generated))
    forward = sum(shape.group(p, r) for p, r in groups(trained))
    update = (sum(shape.training(p, r) for p, r in groups(trained)) + forward * entropy_mask) * passes
    return sampling + update + (forward if reference else 0.0)


def measured_peak(device: torch.device, dtype: torch.dtype, enough_s: float = 0.02, top: int | None = None) -> float:
    """FLOP/s of the best of a few n×n matrix products, n doubling from 256 until a product takes
    `enough_s` or n reaches `top` (512 on CPU, 8192 on a GPU): bounded whatever the dtype costs
    (fp16 products on a CPU run at under 1 GFLOP/s, where four 1024² products took 12 s of every
    run). The best over the sizes tried: a larger product is not always the faster one (AMX bf16
    on a 2-core CPU: ~1,100 GFLOP/s at 1024², ~700 at 2048²). The run's peak is this and the
    cached best together (train/calibration.py), which the first run on a machine measures up to
    2048² on a CPU: every later run's quick product stops at 512², which on one fp32 thread costs
    ~40 ms where 1024² added ~0.5 s to the start of every process of every run."""
    top = top or (8192 if device.type == "cuda" else 512)
    n, rate = 256, 0.0
    while True:
        best = _best_product(device, dtype, n)
        rate = max(rate, 2.0 * n**3 / best)
        if n >= top or best >= enough_s:
            return rate
        n *= 2


def _best_product(device: torch.device, dtype: torch.dtype, n: int) -> float:
    """Seconds of one product: the faster of `torch.mm` and, where the lean sampler uses it
    (engine/fused.py `packs`), oneDNN's prepacked product (on this project's CPU the latter runs
    fp32 ~1.2× faster at 2048², so a peak from `torch.mm` alone would flatter every MFU figure);
    of each, after a warm-up, the second fastest of four: one product timed across a clock
    hiccup is not the machine's rate, and the cached peak (train/calibration.py) keeps its best."""
    import torch

    from rlvr_cli.engine.fused import packs

    a = torch.full((n, n), 0.5, device=device, dtype=dtype)  # no random draw: the run's RNG is untouched
    b = torch.full((n, n), 0.25, device=device, dtype=dtype)
    products = [lambda: torch.mm(a, b)]
    if packs(a.device, dtype, n * n):
        packed = torch.ops.mkldnn._reorder_linear_weight(b, n)
        products.append(lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], ""))
    best = float("inf")
    for product in products:
        seconds = []
        for _ in range(5):  # the first is the warm-up
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            product()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds.append(time.perf_counter() - start)
        best = min(best, sorted(seconds[1:])[1])
    return best


def planned(
    shape: Shape,
    prompts: int,
    group: int,
    prompt: int,
    response: int,
    passes: int,
    reference: bool,
    kl_in_reward: bool,
    mini_batches: int = 1,
    entropy_mask: bool = False,
    rejection: bool = False,
) -> str:
    """`rlvr plan`'s compute line: a step's model FLOPs at most (every prompt and response at
    its maximum length), split as `step_flops` counts them, and the forwards that pay for them."""
    one = shape.group(prompt, [response] * group) * prompts  # one forward of every group
    sampling, ref = one, one * reference
    update = (shape.training(prompt, [response] * group) * prompts + one * entropy_mask) * passes
    backward = "the adapter's weight gradients" if shape.adapter else "backward"
    extra = (
        "; the policy's log-probs once before the update, the KL being in the reward (counted in no term)"
        if kl_in_reward
        else "; the policy's log-probs once before the update, mini-batch j stepping after j others (counted in no "
        "term)"
        if mini_batches > 1
        else "; the policy's log-probs once before the update, for the rejection (counted in no term)"
        if rejection
        else ""
    )
    if entropy_mask:
        extra += "; the update counts one more forward of the trained groups a pass: the entropy mask's threshold"
    minis = f" of {mini_batches} mini-batches" if mini_batches > 1 else ""
    denominator = "computed before the update" if mini_batches > 1 else "the first pass's own"
    return (
        f"compute per step, at most (prompts of {prompt} and responses of {response} tokens): "
        f"{_tera(sampling + update + ref)} TFLOP of model FLOPs: sampling {_tera(sampling)} "
        f"(each group's prompt once), update {_tera(update)} ({passes} optimizer pass(es){minis}, forward and "
        f"{backward}; the ratio's denominator is the engine's log-probs or {denominator}), reference "
        f"{_tera(ref)}" + (" (one forward of the trained groups)" if reference else " (no KL: none runs)") + extra
    )


def _tera(flop: float) -> str:
    t = flop / 1e12
    return f"{t:,.0f}" if t >= 100 else f"{t:.2f}" if t >= 1 else f"{t:.3g}"
