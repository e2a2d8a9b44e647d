"""`rlvr plan`: memory per device for a contract, from the model's config.json on disk.

Terms (bytes): policy parameters, gradients and optimizer state (sharded N ways with
FSDP), the frozen reference (when the KL is in the loss or a rule watches it), the rollout KV cache at the
contract's group size and lengths, training activations for one micro-batch, and the
logits of that micro-batch (kept in fp32 for the log-softmax). A step's phases do not hold
their terms at once (`PHASES`): the KV cache and the weights gathered to sample are freed
before the update, whose gradients, activations and logits are freed before the next
sampling; the plan's figure is the peak, what is held throughout plus the largest phase.
`sample_ahead` holds its copy of the weights throughout, and its KV cache beside the reference
pass and the update, which it runs alongside. The activation terms
(train/activations.py) follow Korthikanti et al. 2022 over the tokens the update's forward runs,
with the rows' copies of their prompt's keys and values where that forward shares prompts.
"""

from __future__ import annotations

from rlvr_cli.contract.adapter import Adapter
from rlvr_cli.contract.layout import Layout, load_shape  # noqa: F401 (rlvr plan, train)
from rlvr_cli.contract.models import Contract
from rlvr_cli.train.activations import BYTES, activation_terms

GIB = 1024**3
OPTIMIZER_STATES = {"adamw": 2, "adam": 2, "sgd": 0}


AHEAD_CACHE = "KV cache sampled ahead"
#: the terms alive during one phase of a step only; every other term is held throughout
PHASES = {
    "sampling": ("rollout KV cache", "rollout weights", "sampler's weights cast"),
    # sampling ahead (train/overlap.py) runs beside the reference pass and the update
    "reference pass": ("gathered reference", "logits", AHEAD_CACHE),
    "update": (
        AHEAD_CACHE,
        "gradients",
        "gradients accumulated whole",
        "activations",
        "prompt K/V copies",
        "logits",
        "gathered layers",
    ),
}


def at_peak(contract: Contract, terms: dict[str, float]) -> tuple[dict[str, float], str]:
    """The terms a device holds at once at its peak, and when: what is held throughout plus the
    largest phase (sampling ahead adds its cache to the phases it runs beside)."""
    transient = {name for names in PHASES.values() for name in names}
    if colocated_vllm(contract):  # vLLM keeps its weights and reserves its cache for the whole run
        transient -= set(PHASES["sampling"])
    phase = max(PHASES, key=lambda p: sum(terms.get(name, 0.0) for name in PHASES[p] if name in transient))
    return {k: v for k, v in terms.items() if k not in transient or k in PHASES[phase]}, phase


def colocated_vllm(contract: Contract) -> bool:
    sampling = contract.hyperparameters.sampling
    return sampling.engine == "vllm" and sampling.server is None


def peak(contract: Contract, terms: dict[str, float]) -> tuple[float, str]:
    counted, phase = at_peak(contract, terms)
    return sum(counted.values()), phase


def when(contract: Contract, name: str) -> str:
    """The phases a term is alive in (a step without a reference has no reference pass)."""
    if colocated_vllm(contract) and name in PHASES["sampling"]:
        return "throughout"
    passes = [p for p in PHASES if p != "reference pass" or reference_pass(contract)]
    return ", ".join(p for p in passes if name in PHASES[p]) or "throughout"


def reference_pass(contract: Contract) -> bool:
    """Whether the run loads the reference and a step computes its log-probs: the KL is in the
    loss, or a rule watches it (train/setup.py `load_reference`)."""
    ref, kl = contract.artifacts.reference, contract.objective.kl
    watched = any(r.metric == "kl" for r in contract.monitoring.rules)
    return ref is not None and not ref.is_none and (kl.coef > 0 or watched)


def reference_is_base(contract: Contract) -> bool:
    """With an adapter (no bias trained) the reference is the policy with its adapter switched off."""
    a, ref = contract.hyperparameters.adapter, contract.artifacts.reference
    return a is not None and a.bias == "none" and ref is not None and bool(ref.same_as_policy)


def estimate(contract: Contract, shape: Layout, devices: int = 1, cpu: bool = False) -> dict[str, float]:
    """Bytes per device for each term, as the trainer runs the contract on GPUs (`cpu`: on a CPU,
    where the lean sampler also copies the layers it holds packed): the parameter terms are
    divided over the devices only with fsdp2, offloaded terms live in CPU memory, a sharded
    policy samples from its weights gathered whole in the compute dtype; a served engine
    (`sampling.server`) samples on devices of its own (its KV cache and weights are not here)."""
    terms = _terms(contract, shape, devices, cpu)
    if contract.hyperparameters.sampling.server is not None:
        served = ("rollout KV cache", "rollout weights", "sampler's weight copy", "sampler's weights cast")
        served += ("weights sampled ahead", AHEAD_CACHE)  # the server samples ahead itself
        terms = {name: value for name, value in terms.items() if name not in served}
    return terms


def _terms(contract: Contract, shape: Layout, devices: int, cpu: bool) -> dict[str, float]:
    hp, length = contract.hyperparameters, contract.length
    p, par = hp.dtypes, hp.strategy
    bp, bc = BYTES[p.params], BYTES[p.compute]
    params = shape.parameters
    sharded = par.strategy == "fsdp2" and devices > 1
    shard = devices if sharded else 1
    on_device = 0.0 if sharded and par.cpu_offload else 1.0
    seq = length.max_prompt_tokens + length.max_response_tokens
    rollouts = hp.prompts_per_step * hp.group_size / max(devices, 1)
    micro = hp.micro_batch_sequences or hp.prompts_per_step * hp.group_size
    micro = min(micro, rollouts) if devices > 1 else micro
    if hp.adapter is not None:  # a frozen base in the compute dtype; the adapter (params) trains
        trained = shape.adapter_parameters(hp.adapter.rank, hp.adapter.target_modules)
        terms = _adapter_terms(contract, shape, trained * bp, bc, on_device / shard)
        held, whole_gradients, adapter = bc, trained * BYTES[p.reduce], trained * bp
    else:
        terms = {
            "policy parameters": params * bp / shard * on_device,
            "gradients": params * bp / shard * on_device,
            "optimizer state": params * bp * OPTIMIZER_STATES[hp.optimizer.name] / shard * on_device,
            "reference": params * bp / shard * on_device if reference_pass(contract) else 0.0,
        }
        held, whole_gradients, adapter = bp, params * BYTES[p.reduce], 0.0
    kv = 4 if cpu and lean_decoder(contract, shape) else bc  # its cache is fp32 on a CPU (engine/fused.py)
    terms |= {
        "rollout KV cache": 2
        * shape.layers
        * shape.kv_heads
        * shape.head_dim
        * kv
        * seq
        * contract.rows_sampled_at_once(devices, devices > 1),
        **activation_terms(contract, shape, micro, cpu),
        "logits": 2 * micro * length.max_response_tokens * shape.vocab * 4,
    }
    # lent weights are read as they are, but an adapted layer computes with a merged copy (engine/fused.py)
    if (not sharded or hp.adapter is not None) and (copied := sampler_copy(contract, shape, held, bc, cpu)):
        terms["sampler's weight copy"] = copied
    elif not sharded and hp.adapter is None and (cast := sampler_cast(contract, shape, held, bc)):
        terms["sampler's weights cast"] = cast
    if sharded or colocated_vllm(contract):  # gathered whole to sample (it cannot run in lockstep); vLLM's own
        terms["rollout weights"] = params * bc  # (an adapter handed to vLLM is merged into these)
    if sharded:
        if terms["reference"]:  # gathered whole for its pass over the micro-batches (train/sharding.py)
            terms["gathered reference"] = params * bc
        # the layer computing and the next one; every layer with reshard_after_forward: false
        terms["gathered layers"] = (2 * shape.layer_parameters if par.reshard_after_forward else params) * bc
        if par.accumulate_whole_gradients:  # summed whole over the micro-batches, then reduce-scattered
            terms["gradients accumulated whole"] = whole_gradients
    if hp.ahead_steps:  # train/overlap.py: a copy of the policy per step in flight; one samples at a time
        whole = bc if sharded else held  # fsdp2: gathered whole in the compute dtype (train/sharding.py)
        decoder = sampler_copy(contract, shape, whole, bc, cpu)  # the lean decoder's copy of those weights
        terms["weights sampled ahead"] = (params * whole + adapter + decoder) * hp.ahead_steps
        terms[AHEAD_CACHE] = terms["rollout KV cache"]  # one step in flight samples at a time
    return terms


def _adapter_terms(contract: Contract, shape: Layout, trained: float, bc: int, per: float) -> dict[str, float]:
    """The weight terms of an adapter run (`trained`: the adapter's bytes, in the params dtype),
    each times `per` (1 / the processes sharding them; 0 when offloaded from the device)."""
    separate = reference_pass(contract) and not reference_is_base(contract)
    return {
        "policy parameters": shape.parameters * bc * per,
        "adapter": trained * per,
        "gradients": trained * per,
        "optimizer state": trained * OPTIMIZER_STATES[contract.hyperparameters.optimizer.name] * per,
        "reference": shape.parameters * bc * per if separate else 0.0,
    }


def lean_decoder(contract: Contract, shape: Layout) -> bool:
    """Whether the run samples through the lean sampler's fused forward (engine/fused.py)."""
    from rlvr_cli.engine.limits import FAMILIES

    return contract.hyperparameters.sampling.engine == "lean" and shape.model_type in FAMILIES


def sampler_copy(contract: Contract, shape: Layout, held: int, computed: int, cpu: bool = False) -> float:
    """The lean sampler's copy of the linear layers' weights (engine/fused.py), in the dtype it
    computes in (`computed` bytes each): the layers it computes side by side, stacked; every
    layer where it computes in another dtype than the weights are held in (`held` bytes each) or
    with an adapter (merged weights); on a CPU (`cpu`) each layer it holds packed. Only for the
    families it runs, where the weights fit in COPY_BYTES (a larger model's are read as they are)."""
    from rlvr_cli.engine.limits import COPY_BYTES, JOINED, packed_on_cpu

    hp, linear = contract.hyperparameters, shape.linear_weights
    if not lean_decoder(contract, shape) or linear * held > COPY_BYTES:
        return 0.0
    if held != computed or hp.adapter is not None:
        return float(linear * computed)
    compute = hp.dtypes.compute

    def packs(elements: int) -> bool:  # engine/fused.py `packs`: a single layer copied to be packed
        return cpu and packed_on_cpu(compute, elements)

    copied = shape.layers * sum(a * b for name, a, b in shape.linears if name in JOINED or packs(a * b))
    return float((copied + (shape.vocab * shape.hidden if packs(shape.vocab * shape.hidden) else 0)) * computed)


def sampler_cast(contract: Contract, shape: Layout, held: int, computed: int) -> float:
    """Weights held in a wider dtype than sampling computes in, cast once for each sampling call
    and freed at its end: by the lean sampler where they are too large for its lasting copy
    (engine/fused.py `release`), by the model's own forward always (engine/precision.py
    `weights_cast_for_call`: the transformers engine, families the fused forward does not run)."""
    from rlvr_cli.engine.limits import COPY_BYTES

    linear, engine = shape.linear_weights, contract.hyperparameters.sampling.engine
    own_forward = engine == "transformers" or (engine == "lean" and not lean_decoder(contract, shape))
    casts = own_forward or (lean_decoder(contract, shape) and linear * held > COPY_BYTES)
    if own_forward and shape.tied:  # the model's own forward leaves a head tied to the input table as it is
        linear -= shape.vocab * shape.hidden
    return float(linear * computed) if casts and computed < held else 0.0


def largest(contract: Contract, shape: Layout, devices: int, budget: float, key: str, limit: int) -> int:
    """The largest power of two for `key` (hyperparameters.group_size or length.max_response_tokens),
    up to `limit`, whose plan fits the budget; 0 when none does."""
    best, size = 0, 1
    section = "length" if key == "max_response_tokens" else "hyperparameters"
    while size <= limit:
        changed_section = getattr(contract, section).model_copy(update={key: size})
        changed = contract.model_copy(update={section: changed_section})
        if peak(changed, estimate(changed, shape, devices))[0] > budget:
            break
        best, size = size, size * 2
    return best


def advice(
    contract: Contract,
    shape: Layout,
    terms: dict[str, float],
    budget: float | None,
    devices: int,
    resuming: bool = False,
) -> list[str]:
    """When the total exceeds the budget: the dominant term, then the first change of the
    contract (in this order) that makes the plan fit, with its total. `resuming`: only the
    changes a resume allows (how the numbers are computed, train/resume_changes.py), not
    precision or an adapter, which make another experiment."""
    total = peak(contract, terms)[0]
    if budget is None or total <= budget:
        return []
    counted = at_peak(contract, terms)[0]
    top = max(counted, key=counted.get)  # type: ignore[arg-type]
    out = [f"{top} dominates ({fmt_bytes(terms[top])} of {fmt_bytes(total)} > {fmt_bytes(budget)})"]
    for words, changed in _changes(contract, devices, resuming):
        after = peak(changed, estimate(changed, shape, devices))[0]
        if after <= budget:
            out.append(f"fits with {words}: {fmt_bytes(after)} per device")
            return out
    if resuming:  # only what a resume allows; another precision or an adapter is another experiment
        return [*out, f"no change a resume allows fits {devices} device(s): lower micro_batch_sequences or add devices"]
    out.append(
        f"no single change of precision, strategy, activation checkpointing or offload fits {devices} device(s); "
        "lower micro_batch_sequences, max_response_tokens or group_size, or add devices"
    )
    return out


def _changes(contract: Contract, devices: int, resuming: bool = False) -> list[tuple[str, Contract]]:
    """Contract changes that save memory, each added to the ones before, cheapest in speed first
    (`resuming`: those a resume allows)."""
    hp = contract.hyperparameters
    precision, par = hp.precision, hp.strategy.model_dump()
    out: list[tuple[str, Contract]] = []
    said: list[str] = []

    def add(words: str) -> None:
        said.append(words)
        updated = hp.model_copy(update={"precision": precision, "parallel": type(hp.strategy)(**par)})
        out.append((" + ".join(said), contract.model_copy(update={"hyperparameters": updated})))

    if hp.dtypes.compute == "fp32" and not resuming:
        precision = "bf16"
        add("precision: bf16 (fp32 master weights, bf16 compute: half the KV cache and activations)")
    if devices > 1 and par["strategy"] != "fsdp2":
        par["strategy"] = "fsdp2"
        add(f"parallel.strategy: fsdp2 (parameters, gradients and optimizer state over {devices} devices)")
    if not par["activation_checkpointing"]:
        par["activation_checkpointing"] = True
        add("parallel.activation_checkpointing: true")
    if devices > 1 and not par["cpu_offload"]:
        par["cpu_offload"] = True
        add("parallel.cpu_offload: true (the sharded state in CPU memory)")
    # the last resort changes what trains (never on resume): alone first, then with the changes above
    if hp.adapter is None and not resuming:
        lora = Adapter(
            kind="lora", rank=16, alpha=32, dropout=0.0, target_modules="all-linear", bias="none", init="default"
        )
        words = (
            "a LoRA adapter instead of full weights (hyperparameters.adapter: rank 16, all-linear; the reference "
            "is then the base with the adapter off)"
        )
        for before, changed in [("", contract), *out[-1:]]:
            updated = changed.hyperparameters.model_copy(update={"adapter": lora})
            said_too = f"{before} + " if before else ""
            out.append((said_too + words, changed.model_copy(update={"hyperparameters": updated})))
    return out


def plan_table(contract: Contract, shape: Layout, devices: int, memory_gib: float | None) -> tuple[str, bool]:
    terms = estimate(contract, shape, devices)
    total, phase = peak(contract, terms)
    budget = memory_gib * GIB if memory_gib else None
    hp = contract.hyperparameters
    par = hp.strategy
    how = par.strategy if devices > 1 else "one process"
    extras = [
        k
        for k in ("activation_checkpointing", "cpu_offload")
        if getattr(par, k) and (k != "cpu_offload" or devices > 1)
    ]
    lines = [
        f"model: {shape.parameters / 1e6:,.2f} M parameters ({shape.layers} layers, hidden {shape.hidden}, "
        f"{shape.heads}/{shape.kv_heads} heads of {shape.head_dim}, vocab {shape.vocab}{_experts(shape)}"
        f"{_assumed(shape)}); "
        f"{hp.dtypes.name}; "
        f"{devices} device(s), {how}{''.join(', ' + e.replace('_', ' ') for e in extras)}",
        f"{'term':<22}{'per device':>14}  held",
    ]
    for name, value in sorted(terms.items(), key=lambda kv: -kv[1]):
        lines.append(f"{name:<22}{fmt_bytes(value):>14}  {when(contract, name)}")
    lines.append(f"{'peak':<22}{fmt_bytes(total):>14}  {phase}")
    fits = budget is None or total <= budget
    if budget is not None:
        lines.append(f"{'fits' if fits else 'does NOT fit'} in {memory_gib:g} GiB per device")
    lines += [f"  - {tip}" for tip in advice(contract, shape, terms, budget, devices)]
    if hp.adapter is not None:
        trained = shape.adapter_parameters(hp.adapter.rank, hp.adapter.target_modules)
        ref = "the base with the adapter switched off (no copy)" if reference_is_base(contract) else "a copy of its own"
        lines.append(
            f"adapter: {hp.adapter.describe()}: {trained / 1e6:,.2f} M trained parameters "
            f"({trained / shape.parameters:.2%} of the model{_experts_adapted(shape)}); reference: {ref}"
        )
        if budget is not None:
            full = contract.model_copy(update={"hyperparameters": hp.model_copy(update={"adapter": None})})
            for key, words, limit in (("group_size", "group size", 4096), ("max_response_tokens", "response", 1 << 20)):
                lora, weights = (largest(c, shape, devices, budget, key, limit) for c in (contract, full))
                lines.append(f"largest {words} that fits: {lora} with the adapter, {weights} training every weight")
    lines.append(compute_line(contract, shape))
    return "\n".join(lines), fits


def _experts_adapted(shape: Layout) -> str:
    """Which peft's mapping onto the experts the count follows (it changed in peft 0.22)."""
    return f", its experts adapted as peft {shape.peft[0]}.{shape.peft[1]} adapts them" if shape.adapts_experts else ""


def _experts(shape: Layout) -> str:
    if not shape.sparse_layers:
        return ""
    return (
        f", {shape.experts} experts in {shape.sparse_layers} layers, {shape.active_experts} per token: "
        f"{shape.multiplying / 1e6:,.2f} M parameters multiply per token"
    )


def _assumed(shape: Layout) -> str:
    if shape.known:
        return ""
    note = f"; model type {shape.model_type or '(none)'!r} is not one rlvr knows: counted as a Llama-style decoder"
    if shape.unknown_experts:
        note += f" without its {shape.unknown_experts} experts per layer (an underestimate)"
    return note


def compute_line(contract: Contract, shape: Layout) -> str:
    """A step's model FLOPs at most (train/flops.py), from config.json's shape."""
    from rlvr_cli.train import flops

    hp, length, a = contract.hyperparameters, contract.length, contract.hyperparameters.adapter
    counted = flops.Shape(
        shape.multiplying,
        shape.layers,
        shape.heads * shape.head_dim,
        shape.adapter_parameters(a.rank, a.target_modules) if a is not None else 0,
    )
    kl = contract.objective.kl
    return flops.planned(
        counted,
        hp.prompts_per_step,
        hp.group_size,
        length.max_prompt_tokens,
        length.max_response_tokens,
        hp.updates_per_batch,
        reference_pass(contract),
        kl.coef > 0 and kl.placement == "reward",
        hp.mini_batches,
        contract.objective.entropy_mask is not None,
        bool(contract.objective.rejection),
    )


def fmt_bytes(value: float) -> str:
    """GiB, or MiB below one GiB."""
    return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / 1024**2:.1f} MiB"
