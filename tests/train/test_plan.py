"""`rlvr plan`: a readable table for a 7B-class config, and a CPU estimate checked against a
measured peak."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, rlvr

SEVEN_B = ROOT / "contracts" / "grpo-7b-plan.rlvr.yaml"

MEASURE = """
import json, os, resource, sys
import torch, transformers  # the interpreter and libraries are the baseline, not the estimate
from pathlib import Path
from rlvr_cli.__main__ import main
from rlvr_cli.contract.load import load
from rlvr_cli.train import loop, setup  # noqa: F401
from rlvr_cli.train.memory_estimate import estimate, load_shape, peak


def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":  # the verifier's worker processes import this file too
    path, world = Path(sys.argv[2]), int(os.environ.get("WORLD_SIZE", "1"))
    with torch.device("meta"):  # transformers imports a model's code when first built: ~135 MiB, no tensor
        transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(path.parent / "model"))
    base = rss()
    sys.argv = ["rlvr", *sys.argv[1:]]
    try:
        main()
    except SystemExit as stop:
        assert not stop.code, stop.code
    top = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    contract = load(path)
    terms = estimate(contract, load_shape(contract, path.resolve().parent), world, cpu=True)
    rank = int(os.environ.get("RANK", "0"))
    result = {"rank": rank, "measured": top - base, "estimate": peak(contract, terms)[0]}
    Path(os.environ["MEASURED"], f"rank-{rank}.json").write_text(json.dumps(result))  # one file each: no interleaving
"""


def test_plan_for_a_7b_class_config() -> None:
    fits = rlvr("plan", SEVEN_B, "--gpus", "8", "--gpu-memory", "80")
    assert fits.code == 0, fits.stderr
    assert "6,738.42 M parameters" in fits.stdout and "fits in 80 GiB per device" in fits.stdout
    for term in ("policy parameters", "gradients", "optimizer state", "reference", "rollout KV cache", "activations"):
        assert term in fits.stdout
    assert "8 device(s), fsdp2, activation checkpointing" in fits.stdout and "rollout weights" in fits.stdout
    single = rlvr("plan", SEVEN_B, "--gpu-memory", "80")
    assert single.code == 1 and "does NOT fit" in single.stdout and "dominates" in single.stdout
    assert rlvr("plan", ROOT / "contracts" / "nope.rlvr.yaml").code == 2


def test_the_plan_counts_a_steps_model_flops_as_the_trainer_does(tmp_path: Path) -> None:
    """Full weights, one pass: the update is 3 forwards of what sampling runs once, the
    reference one; an adapter's update is cheaper (no weight gradients for the frozen base);
    without KL no reference runs."""
    import re

    def terms(contract: Path) -> dict[str, float]:
        line = rlvr("plan", contract).stdout.splitlines()[-1]
        assert line.startswith("compute per step, at most (prompts of 1024 and responses of 4096 tokens): "), line
        return {k: float(v.replace(",", "")) for k, v in re.findall(r"(sampling|update|reference) ([\d,.]+)", line)}

    full = terms(SEVEN_B)
    assert full["update"] == pytest.approx(3 * full["sampling"], rel=1e-3)
    assert full["reference"] == full["sampling"]
    text = SEVEN_B.read_text()
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")  # plan reads only its config.json
    adapter, no_kl = tmp_path / "adapter.rlvr.yaml", tmp_path / "no-kl.rlvr.yaml"
    lora = "{kind: lora, rank: 16, alpha: 32, dropout: 0.0, target_modules: all-linear, bias: none, init: default}"
    sharded = "  parallel: {strategy: fsdp2, activation_checkpointing: true}\n"  # an adapter runs with ddp
    adapter.write_text(text.replace(sharded, f"  adapter: {lora}\n"))
    with_adapter = terms(adapter)
    assert with_adapter["sampling"] == full["sampling"]
    assert 2 * full["sampling"] < with_adapter["update"] < 2.1 * full["sampling"]
    kl = "kl: {coef: 0.01, estimator: k3, placement: loss}"
    assert kl in text
    watched = "    - {name: kl-drift, metric: kl, "
    assert watched in text
    no_kl.write_text(text.replace(kl, "kl: {coef: 0.0}"))  # a rule still watches the KL: the reference runs
    assert terms(no_kl)["reference"] == full["reference"]
    unwatched = "\n".join(line for line in text.replace(kl, "kl: {coef: 0.0}").splitlines() if watched not in line)
    no_kl.write_text(unwatched + "\n")
    assert terms(no_kl)["reference"] == 0


def test_an_adapter_under_fsdp2_is_planned_as_the_trainer_shards_it(tmp_path: Path) -> None:
    """Sharded, the base, the adapter, its gradients and optimizer state are 1/8 of data
    parallel's on each GPU; the base is gathered whole to sample (lent to the engine) and each
    reduce-scatter sends the adapter's gradients only; validate accepts the pair."""
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")  # plan reads only its config.json
    lora = "{kind: lora, rank: 16, alpha: 32, dropout: 0.0, target_modules: all-linear, bias: none, init: default}"
    sharded_line = "  parallel: {strategy: fsdp2, activation_checkpointing: true}\n"
    text = SEVEN_B.read_text()
    plans = {}
    for name, parallel in (
        ("fsdp2", sharded_line),
        ("ddp", "  parallel: {strategy: ddp, activation_checkpointing: true}\n"),
    ):
        contract = tmp_path / f"{name}.rlvr.yaml"
        contract.write_text(text.replace(sharded_line, f"{parallel}  adapter: {lora}\n"))
        assert rlvr("validate", contract).code == 0
        out = rlvr("plan", contract, "--gpus", "8", "--gpu-memory", "80")
        assert out.code == 0, out.stdout
        plans[name] = out.stdout
    fsdp, ddp = _table(plans["fsdp2"])[0], _table(plans["ddp"])[0]
    for term in ("policy parameters", "adapter", "gradients", "optimizer state"):
        assert fsdp[term][0] == pytest.approx(ddp[term][0] / 8, rel=0.01), term
    assert fsdp["rollout weights"] == (ddp["policy parameters"][0], "sampling")  # the base gathered whole
    assert "rollout weights" not in ddp and fsdp["reference"][0] == ddp["reference"][0] == 0  # the base itself
    scatter = next(line for line in plans["fsdp2"].splitlines() if line.startswith("collectives per step"))
    adapter_gib = fsdp["adapter"][0] * 8
    sent = float(scatter.split("reduce-scatters, ")[1].split()[0])  # every scatter a pass: the adapter's gradients
    assert sent < 16 * adapter_gib * 1024, scatter  # MiB, never the base's 7 B weights


def test_the_update_activations_count_each_groups_prompt_once_where_the_update_shares_it(tmp_path: Path) -> None:
    """A micro-batch of 8 answers of one prompt: the shared-prompt forward (left padding) runs the
    prompt once, so its activations are those of 1024 + 8 × 256 tokens, not 8 × (1024 + 256);
    padded on the right every row runs whole. With activation checkpointing the update takes
    rows of whole groups where they cost less attention: (1024 + 8 × 256)² < 8 × 1280², but
    (1024 + 8 × 4096)² > 8 × 5120²."""
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")  # plan reads only its config.json
    checkpointed = SEVEN_B.read_text().replace("micro_batch_sequences: 1\n", "micro_batch_sequences: 8\n")
    assert "activation_checkpointing: true" in checkpointed
    short = checkpointed.replace("max_response_tokens: 4096", "max_response_tokens: 256")
    shared = short.replace("activation_checkpointing: true", "activation_checkpointing: false")
    variants = {
        "shared": shared,
        "right": shared.replace("padding_side: left", "padding_side: right"),
        "rows of groups": short,
        "long answers": checkpointed,
    }
    activations, copies = {}, {}
    for name, text in variants.items():
        contract = tmp_path / f"{name.replace(' ', '-')}.rlvr.yaml"
        contract.write_text(text)
        out = rlvr("plan", contract, "--gpus", "8")
        assert out.code == 0, out.stdout
        rows = _table(out.stdout)[0]
        activations[name], copies[name] = rows["activations"][0], rows.get("prompt K/V copies")  # GiB
    assert activations["right"] / activations["shared"] == pytest.approx(8 * 1280 / (1024 + 8 * 256), rel=0.01)
    kept = 4096 * (32 * 2 + 34) / 1024**3  # a token's bytes: each layer's bf16 input, one layer's activations
    assert activations["rows of groups"] == pytest.approx((1024 + 8 * 256) * kept, rel=0.01)
    assert activations["long answers"] == pytest.approx(8 * (1024 + 4096) * kept, rel=0.01)
    # the shared forward's rows attend over copies of their prompt's keys and values: 8 rows × 1024
    # tokens × 32 heads of 128 × 2 (keys, values) × 2 bytes (bf16) × 32 layers, held with the activations
    assert copies["shared"] == (pytest.approx(8 * 1024 * 32 * 128 * 2 * 2 * 32 / 1024**3, rel=0.01), "update")
    assert copies["right"] is copies["rows of groups"] is copies["long answers"] is None


def test_the_rows_prompt_copies_follow_where_each_device_keeps_them(single_turn: Path) -> None:
    """On a GPU the copies hold every query head's keys (the memory-efficient kernel takes no
    grouped queries with a mask) in the compute dtype; on a CPU the key heads, in fp32, and none
    where the responses attend in two parts (engine/two_part.py): the same rule the update reads."""
    from rlvr_cli.contract.layout import Layout
    from rlvr_cli.contract.load import load
    from rlvr_cli.engine.limits import TWO_PART_BYTES
    from rlvr_cli.train.memory_estimate import estimate, load_shape

    contract = load(single_turn / "experiment.rlvr.yaml")
    own = load_shape(contract, single_turn)
    shape = Layout(**{**own.__dict__, "kv_heads": own.heads // 2})  # grouped queries
    hp, length = contract.hyperparameters, contract.length
    rows, prompt = hp.micro_batch_sequences, length.max_prompt_tokens
    assert hp.group_size < rows  # several groups a micro-batch
    per_head = 2 * rows * prompt * shape.head_dim * shape.layers  # keys and values, all layers
    assert estimate(contract, shape)["prompt K/V copies"] == per_head * shape.heads * 4  # fp32 compute
    groups = -(-rows // hp.group_size)
    below = (rows - groups) * shape.kv_heads * prompt * shape.head_dim * 4 < TWO_PART_BYTES
    assert below  # this small model's copies stay below the two-part threshold
    assert estimate(contract, shape, cpu=True)["prompt K/V copies"] == per_head * shape.kv_heads * 4
    longer = contract.model_copy(update={"length": length.model_copy(update={"max_prompt_tokens": 1 << 16})})
    assert "prompt K/V copies" not in estimate(longer, shape, cpu=True)  # in two parts
    assert estimate(longer, shape)["prompt K/V copies"] > 0


def test_the_rollout_kv_cache_holds_the_rows_a_process_samples_at_once(single_turn: Path) -> None:
    """Under torchrun a single-turn process samples its groups one at a time (each with a seed of
    its own: rollout/single_turn.py), or its whole share at once with `sample_groups: together`;
    one process samples the whole step in one batch. The KV cache is that many rows."""
    from rlvr_cli.contract.load import load
    from rlvr_cli.train.memory_estimate import estimate, load_shape

    contract = load(single_turn / "experiment.rlvr.yaml")
    shape, hp = load_shape(contract, single_turn), contract.hyperparameters
    per_row = estimate(contract, shape, 1)["rollout KV cache"] / (hp.prompts_per_step * hp.group_size)
    parallel = {a: hp.strategy.model_copy(update={"sample_groups": a}) for a in ("alone", "together")}
    rows = {}
    for how, section in parallel.items():
        changed = contract.model_copy(update={"hyperparameters": hp.model_copy(update={"parallel": section})})
        rows[how] = estimate(changed, shape, 2)["rollout KV cache"] / per_row
        assert estimate(changed, shape, 1)["rollout KV cache"] / per_row == hp.prompts_per_step * hp.group_size
    assert rows == {"alone": hp.group_size, "together": hp.prompts_per_step * hp.group_size / 2}


def test_the_plan_holds_a_reference_wherever_the_trainer_loads_one(tmp_path: Path) -> None:
    """The trainer loads the reference when the KL is in the loss or a rule watches it (it is
    measured then): the plan counts its memory and its pass in both cases, and neither without."""
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")  # plan reads only its config.json
    kl, watched = "kl: {coef: 0.01, estimator: k3, placement: loss}", "    - {name: kl-drift, metric: kl, "
    text = SEVEN_B.read_text()
    assert kl in text and watched in text
    unwatched = "\n".join(line for line in text.splitlines() if watched not in line) + "\n"
    tables = {}
    for name, edit in (
        ("loss", text),
        ("watched", text.replace(kl, "kl: {coef: 0.0}")),
        ("none", unwatched.replace(kl, "kl: {coef: 0.0}")),
    ):
        contract = tmp_path / f"{name}.rlvr.yaml"
        contract.write_text(edit)
        out = rlvr("plan", contract, "--gpus", "8")
        assert out.code == 0, out.stdout
        tables[name] = _table(out.stdout)[0]
    assert tables["loss"]["reference"] == tables["watched"]["reference"] and tables["watched"]["reference"][0] > 0
    assert tables["none"]["reference"][0] == 0 and "gathered reference" not in tables["none"]
    assert tables["watched"]["logits"][1] == "reference pass, update" and tables["none"]["logits"][1] == "update"


def test_the_plan_divides_memory_only_where_the_trainer_shards(tmp_path: Path) -> None:
    """Data parallel keeps a whole copy of the weights, gradients and optimizer state on every GPU:
    the same 7B contract without fsdp2 does not fit 8 × 80 GiB, and the plan names what does."""
    ddp = tmp_path / "ddp.rlvr.yaml"
    text = SEVEN_B.read_text()
    line = "  parallel: {strategy: fsdp2, activation_checkpointing: true}\n"
    assert line in text
    ddp.write_text(text.replace(line, ""))
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")  # plan reads only its config.json
    plan = rlvr("plan", ddp, "--gpus", "8", "--gpu-memory", "80")
    assert plan.code == 1 and "8 device(s), ddp" in plan.stdout and "does NOT fit" in plan.stdout, plan.stdout
    assert "fits with parallel.strategy: fsdp2" in plan.stdout


def _table(out: str) -> tuple[dict[str, tuple[float, str]], float, str]:
    """`rlvr plan`'s terms (GiB, when held) and its peak (GiB, the phase)."""
    units = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024**2, "B": 1 / 1024**3}
    rows, top = {}, None
    for line in out.splitlines()[2:]:
        name, value, unit, held = line[:22].strip(), *line[22:].split(None, 2)
        if name == "peak":
            top = (float(value) * units[unit], held)
            break
        rows[name] = (float(value) * units[unit], held)
    assert top is not None, out
    return rows, *top


def test_the_plan_counts_each_phase_of_a_step_at_its_own_time(tmp_path: Path) -> None:
    """The KV cache and the weights gathered to sample are freed before the update, whose
    gradients, activations and logits are freed before the next sampling: the peak is what is
    held throughout plus the largest phase, not every term at once. A colocated vLLM keeps its
    weights and cache all run long, so there they are held throughout."""
    plan = rlvr("plan", SEVEN_B, "--gpus", "8")
    rows, top, phase = _table(plan.stdout)
    held = sum(v for v, when in rows.values() if when == "throughout")
    phases = {p: sum(v for v, when in rows.values() if p in when) for p in ("sampling", "reference pass", "update")}
    assert phase == "sampling" and phases["sampling"] == max(phases.values())
    assert top == pytest.approx(held + phases["sampling"], abs=0.02)
    assert top < sum(v for v, _ in rows.values()) - 5  # the update's terms are not added to sampling's
    text = SEVEN_B.read_text()
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")
    sampling = "  sampling: {temperature: 1.0, top_p: 1.0, top_k: 0}\n"
    assert sampling in text
    vllm = tmp_path / "vllm.rlvr.yaml"
    text = text.replace(sampling, sampling.replace("top_k: 0}", "top_k: 0, engine: vllm}"))
    vllm.write_text(text.replace("  aggregation:", "  ratio: {level: token, denominator: engine}\n  aggregation:", 1))
    out = rlvr("plan", vllm, "--gpus", "8")
    assert out.code == 0, out.stdout + out.stderr
    rows, top, phase = _table(out.stdout)
    assert rows["rollout KV cache"][1] == rows["rollout weights"][1] == "throughout"
    assert phase != "sampling" and top == pytest.approx(
        sum(v for v, w in rows.values() if w == "throughout") + sum(v for v, w in rows.values() if phase in w), abs=0.02
    )


@pytest.fixture(scope="module")
def fifty_million(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The single-turn template on a 53 M-parameter model (hidden 768, 9 layers), 4 sequences a
    micro-batch: weights, gradients and optimizer state are most of the memory. 2 groups a step
    (16 sequences, 2 micro-batches a process at 2 processes): the peak is one micro-batch's."""
    from rlvr_cli.toy.tiny import build_tiny

    folder = tmp_path_factory.mktemp("plan") / "exp"
    shutil.copytree(single_turn, folder, ignore=shutil.ignore_patterns("model", "runs"))
    build_tiny(folder / "model", hidden=768, layers=9)
    text = (folder / "experiment.rlvr.yaml").read_text()
    assert "micro_batch_sequences: 16" in text
    assert "prompts_per_step: 8" in text
    text = text.replace("micro_batch_sequences: 16", "micro_batch_sequences: 4")
    (folder / "experiment.rlvr.yaml").write_text(text.replace("prompts_per_step: 8", "prompts_per_step: 2"))
    return folder


STEPS = ("--max-steps", "2")


@pytest.mark.slow
@pytest.mark.parametrize(("processes", "strategy"), [(1, "ddp"), (2, "ddp"), (2, "fsdp2")])
def test_the_plan_is_within_25_percent_of_each_process_measured_peak(
    fifty_million: Path, tmp_path: Path, processes: int, strategy: str
) -> None:
    """`rlvr train` for 2 steps; each process's peak resident memory, less what it held before
    the run (the interpreter and libraries, the model's code included: transformers imports it
    when a model is first built), against the plan's total for that many devices.
    glibc's allocator keeps freed blocks in its heap by default, and FSDP2 frees a gathered
    layer many times a step, so the resident size would count the allocator's cache: with
    MALLOC_TRIM_THRESHOLD_=0 it returns them, and the resident peak is the live memory the plan
    estimates (as a GPU's allocated memory is, not its caching allocator's reserve)."""
    contract = tmp_path / "experiment.rlvr.yaml"
    text = (fifty_million / "experiment.rlvr.yaml").read_text()
    parallel = f"  precision: fp32\n  parallel: {{strategy: {strategy}}}\n"
    shutil.copytree(fifty_million, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("model"))
    (tmp_path / "model").symlink_to(fifty_million / "model")
    contract.write_text(text.replace("  precision: fp32\n", parallel))
    (tmp_path / "measure.py").write_text(MEASURE)
    launch = [sys.executable]
    if processes > 1:
        launch += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    proc = subprocess.run(
        [*launch, str(tmp_path / "measure.py"), "train", str(contract), "--run-dir", str(tmp_path / "run"), *STEPS],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_TRIM_THRESHOLD_": "0", "MEASURED": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank-*.json"))]
    assert sorted(r["rank"] for r in ranks) == list(range(processes))
    print(processes, strategy, [(r["rank"], r["measured"] / 2**20, r["estimate"] / 2**20) for r in ranks])
    for r in ranks:
        assert 0.75 <= r["estimate"] / r["measured"] <= 1.25, ranks
    # this model's layers are sampled through oneDNN's packed products (768 × 768 and up, fp32) where
    # the sampler copies them (not from fsdp2's gathered weights): its log-probs are the trainer's
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    drift = [row["engine_logprob_diff_max"] for row in rows if "engine_logprob_diff_max" in row]
    print("engine − trainer log-prob, largest", drift)
    assert len(drift) == 2 and max(drift) < 1e-3, drift


def test_train_refuses_a_plan_that_does_not_fit_the_devices_with_the_change_that_fits(
    single_turn: Path, tmp_path: Path
) -> None:
    """`--device-memory` stands in on CPU for the memory CUDA reports on a GPU."""
    run = tmp_path / "run"
    small = rlvr("train", single_turn / "experiment.rlvr.yaml", "--run-dir", run, "--device-memory", "0.004")
    assert small.code == 1 and "the plan needs" in small.stderr and "than the 4.1 MiB" in small.stderr, small.stderr
    assert "fits with precision: bf16" in small.stderr or "no single change" in small.stderr, small.stderr
    assert not run.exists()  # refused before anything was written
    plan = rlvr("plan", single_turn / "experiment.rlvr.yaml", "--gpu-memory", "0.004")
    needs = small.stderr.split("the plan needs ")[1].split(" per device")[0]
    assert plan.code == 1 and f"total {needs}".split()[-2] in plan.stdout  # the same total as `rlvr plan`
    # a run under way is advised only what a resume allows: not another precision, nor an adapter
    assert rlvr("train", single_turn / "experiment.rlvr.yaml", "--run-dir", run, "--max-steps", "1").code == 0
    for how in ("--resume", "--auto"):
        again = rlvr("train", single_turn / "experiment.rlvr.yaml", "--run-dir", run, how, "--device-memory", "0.004")
        assert again.code == 1 and "no change a resume allows" in again.stderr, again.stderr
        assert "precision" not in again.stderr and "adapter" not in again.stderr, again.stderr


def test_a_served_engine_samples_on_devices_of_its_own(tmp_path: Path) -> None:
    """With `sampling.server` the rollout KV cache and the engine's weights are the server's: the
    trainer's plan leaves them out (the same contract sampling in process counts them)."""
    served = tmp_path / "served.rlvr.yaml"
    text = SEVEN_B.read_text()
    sampling = "  sampling: {temperature: 1.0, top_p: 1.0, top_k: 0}\n"
    assert sampling in text and "  aggregation:" in text
    server = "engine: vllm, server: {url: 'http://127.0.0.1:8000', model: policy}"
    text = text.replace(sampling, sampling.replace("top_k: 0}", f"top_k: 0, {server}}}"))
    served.write_text(text.replace("  aggregation:", "  ratio: {level: token, denominator: engine}\n  aggregation:", 1))
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")
    plan = rlvr("plan", served, "--gpus", "8", "--gpu-memory", "80")
    assert plan.code == 0, plan.stdout + plan.stderr
    assert "rollout KV cache" not in plan.stdout and "rollout weights" not in plan.stdout
    assert "policy parameters" in plan.stdout and "activations" in plan.stdout
    ahead = tmp_path / "ahead.rlvr.yaml"  # the server samples ahead too: no copy of the weights here
    ahead.write_text(served.read_text().replace("  max_policy_lag: 0\n", "  max_policy_lag: 1\n  sample_ahead: true\n"))
    again = rlvr("plan", ahead, "--gpus", "8", "--gpu-memory", "80")
    assert again.code == 0 and "sampled ahead" not in again.stdout, again.stdout + again.stderr


def test_the_sampler_weight_copy_is_counted_only_where_the_lean_sampler_makes_one(single_turn: Path) -> None:
    """The fused forward stacks the weights it computes side by side (queries, keys and values;
    gate and up) when they fit COPY_BYTES, and copies every linear layer where it computes in
    another dtype; another engine, or a larger model, copies nothing."""
    from rlvr_cli.contract.layout import Layout
    from rlvr_cli.contract.load import load
    from rlvr_cli.engine.limits import COPY_BYTES, JOINED
    from rlvr_cli.train.memory_estimate import estimate, load_shape

    contract = load(single_turn / "experiment.rlvr.yaml")
    shape = load_shape(contract, single_turn)
    terms = estimate(contract, shape)
    joined = shape.layers * sum(a * b for name, a, b in shape.linears if name in JOINED)
    assert 0 < joined < shape.linear_weights and terms["sampler's weight copy"] == joined * 4  # fp32
    hp = contract.hyperparameters.model_copy(update={"precision": "bf16"})
    mixed = contract.model_copy(update={"hyperparameters": hp})
    assert estimate(mixed, shape)["sampler's weight copy"] == shape.linear_weights * 2  # cast, every layer
    # the lean sampler's KV cache is fp32 on a CPU whatever the compute dtype; bf16 on a GPU
    assert estimate(mixed, shape, cpu=True)["rollout KV cache"] == 2 * estimate(mixed, shape)["rollout KV cache"]
    # on a CPU the single layers it holds in oneDNN's packed layout are copied too: every one in bf16
    # compute, in fp32 those of 512 × 512 elements and up (none in this tiny model; all in a wider one)
    assert estimate(contract, shape, cpu=True)["sampler's weight copy"] == joined * 4
    from rlvr_cli.contract.scale import Precision

    hp_pure = contract.hyperparameters.model_copy(update={"precision": Precision(params="bf16", compute="bf16")})
    pure = contract.model_copy(update={"hyperparameters": hp_pure})
    assert estimate(pure, shape, cpu=True)["sampler's weight copy"] == shape.linear_weights * 2
    assert estimate(pure, shape)["sampler's weight copy"] == joined * 2
    big = Layout(
        **{
            **shape.__dict__,
            "hidden": 512,
            "intermediate": 2048,
            "heads": 8,
            "kv_heads": 4,
            "head_dim": 64,
            "vocab": 64,
        }
    )
    assert estimate(contract, big, cpu=True)["sampler's weight copy"] == (big.linear_weights - 64 * 512) * 4
    sampling = contract.hyperparameters.sampling.model_copy(update={"engine": "transformers"})
    other = contract.model_copy(
        update={"hyperparameters": contract.hyperparameters.model_copy(update={"sampling": sampling})}
    )
    assert "sampler's weight copy" not in estimate(other, shape)
    wide = Layout(**{**shape.__dict__, "hidden": 4096, "intermediate": 11008, "heads": 32, "kv_heads": 32})
    assert wide.layers * sum(a * b for _, a, b in wide.linears) * 4 > COPY_BYTES
    assert "sampler's weight copy" not in estimate(contract, wide)
    assert "sampler's weights cast" not in estimate(contract, wide)  # fp32 computes in the weights' dtype
    # mixed precision: too large to keep a copy, the weights are cast for each sampling call, then freed
    from rlvr_cli.train.memory_estimate import when

    assert estimate(mixed, wide)["sampler's weights cast"] == wide.linear_weights * 2
    assert "sampler's weight copy" not in estimate(mixed, wide) and when(mixed, "sampler's weights cast") == "sampling"
    from rlvr_cli.contract.scale import Parallel

    fsdp2 = mixed.hyperparameters.model_copy(update={"parallel": Parallel(strategy="fsdp2")})
    sharded = mixed.model_copy(update={"hyperparameters": fsdp2})
    assert "sampler's weights cast" not in estimate(sharded, wide, devices=2)  # gathered in the compute dtype
    # the model's own forward (the transformers engine) casts for each call at every size
    hp_own = mixed.hyperparameters.model_copy(update={"sampling": sampling})
    own = mixed.model_copy(update={"hyperparameters": hp_own})
    assert estimate(own, shape)["sampler's weights cast"] > 0
    # ...each projection's weight, and a head tied to the input table stays as it is
    for tied in (False, True):
        layout = Layout(**{**wide.__dict__, "tied": tied})
        head = 0 if tied else wide.vocab * wide.hidden
        assert (
            estimate(own, layout)["sampler's weights cast"]
            == (wide.linear_weights - wide.vocab * wide.hidden + head) * 2
        )
    assert "sampler's weights cast" not in estimate(other, shape)  # fp32: nothing to cast


def test_sampling_ahead_under_fsdp2_is_planned_as_a_whole_copy_in_the_compute_dtype(tmp_path: Path) -> None:
    """`sample_ahead` under fsdp2 samples during the update from a copy of the whole weights in the
    compute dtype (train/sharding.py `Lender.whole_copy`), as large as the weights gathered to
    sample; under ddp it copies the policy as it is (fp32 master weights: twice that). The copy
    is held throughout, its KV cache beside the reference pass and the update (which it runs
    alongside), and the peak is what is held throughout plus the largest phase."""
    text = SEVEN_B.read_text()
    assert "  max_policy_lag: 0\n" in text and "  aggregation:" in text
    text = text.replace("  max_policy_lag: 0\n", "  max_policy_lag: 1\n  sample_ahead: true\n")
    text = text.replace("  aggregation:", "  ratio: {level: token, denominator: engine}\n  aggregation:", 1)
    shutil.copytree(SEVEN_B.parent / "llama-7b", tmp_path / "llama-7b")
    sharded, ddp = tmp_path / "sharded.rlvr.yaml", tmp_path / "ddp.rlvr.yaml"
    sharded.write_text(text)
    ddp.write_text(text.replace("  parallel: {strategy: fsdp2, activation_checkpointing: true}\n", ""))
    assert rlvr("validate", sharded).code == 0  # no longer refused (RLV010)
    rows, top, phase = _table(rlvr("plan", sharded, "--gpus", "8").stdout)
    assert rows["weights sampled ahead"][0] == rows["rollout weights"][0]
    assert rows["weights sampled ahead"][1] == "throughout" and rows["rollout weights"][1] == "sampling"
    assert rows["KV cache sampled ahead"] == (rows["rollout KV cache"][0], "reference pass, update")
    held = sum(v for v, when in rows.values() if when == "throughout")
    phases = {p: sum(v for v, when in rows.values() if p in when) for p in ("sampling", "reference pass", "update")}
    assert top == pytest.approx(held + phases[phase], abs=0.02) and phases[phase] == max(phases.values())
    assert rows["weights sampled ahead"][0] == pytest.approx(6.74e9 * 2 / 2**30, rel=0.01)  # bf16
    whole, _, _ = _table(rlvr("plan", ddp, "--gpus", "8").stdout)
    assert whole["weights sampled ahead"][0] == pytest.approx(2 * rows["weights sampled ahead"][0], rel=0.01)
