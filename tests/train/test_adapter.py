"""LoRA adapters (`hyperparameters.adapter`, through peft): the reference is the base with the
adapter switched off, the samplers sample the adapted model, checkpoints hold the adapter alone and
resume exactly after SIGKILL, and what does not fit the policy is refused with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import QUICK_STEPS, copy_experiment, edit, kill_rlvr, rlvr, spawn_rlvr

CONTRACT = "experiment.rlvr.yaml"
LORA = "{kind: lora, rank: 4, alpha: 8, dropout: 0.0, target_modules: all-linear, bias: none, init: default}"


def with_adapter(spec: str = LORA) -> tuple[str, str]:
    return ("  precision: fp32\n", f"  precision: fp32\n  adapter: {spec}\n")


@pytest.fixture(scope="module")
def lora_experiment(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    edits = [*QUICK_STEPS, with_adapter(LORA.replace("dropout: 0.0", "dropout: 0.1"))]  # dropout draws: resumed too
    return copy_experiment(single_turn, tmp_path_factory.mktemp("lora") / "arith", edits)


def _adapted(model_dir: Path, seed: int = 0):
    """The model at `model_dir` with an adapter whose B is random (the adapter changes outputs)."""
    import peft
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    return model, base


def test_the_reference_is_the_base_with_the_adapter_switched_off(tiny_chatml: Path) -> None:
    from transformers import AutoModelForCausalLM

    from rlvr_cli.train.lora import switched_off

    model, policy = _adapted(tiny_chatml)
    separate = AutoModelForCausalLM.from_pretrained(tiny_chatml).eval()  # a second copy, as without an adapter
    ids = torch.tensor([[3, 7, 11, 19, 23, 5, 8]])
    with torch.no_grad():
        base = torch.log_softmax(separate(ids).logits, -1)
        with switched_off(model):
            off = torch.log_softmax(policy(ids).logits, -1)
        on = torch.log_softmax(policy(ids).logits, -1)
    assert torch.equal(off, base)  # bit for bit: the same weights, the same arithmetic
    assert not torch.allclose(on, base, atol=1e-3)  # and the adapter does change the policy (the check can fail)


@pytest.mark.parametrize("packed", [False, True], ids=["merged copies", "merged copies packed (oneDNN)"])
def test_the_lean_samplers_fused_forward_runs_the_adapter_and_vllm_gets_it_merged(
    monkeypatch, tiny_chatml: Path, packed: bool
) -> None:
    import rlvr_cli.engine.fused as fused
    import rlvr_cli.engine.limits as limits
    from rlvr_cli.engine.adapted import merged_state
    from rlvr_cli.engine.fused import Decoder, why_not

    if packed and not fused.ONEDNN:
        pytest.skip("this PyTorch has no oneDNN")
    monkeypatch.setattr(limits, "PACK_FP32", 0 if packed else 1 << 62)
    model, policy = _adapted(tiny_chatml)
    assert why_not(policy) is None
    ids = torch.tensor([[3, 7, 11, 19, 23, 5, 8]])
    with torch.no_grad():
        want = policy(ids).logits[:, -1].float()
        decoder = Decoder(policy)
        got, _ = decoder.prefill(ids, torch.ones_like(ids))
    assert {layer.down.packed for layer in decoder.layers} == {packed}
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    merged = merged_state(policy)
    reference = {k: v.clone() for k, v in model.merge_and_unload().state_dict().items()}
    assert merged.keys() == reference.keys()  # the unadapted model's names, as vLLM loads them
    assert all(torch.allclose(merged[k], reference[k], atol=1e-6) for k in merged)


def test_adapter_dropout_acts_in_the_update_forward_only(tiny_chatml: Path) -> None:
    import peft
    from transformers import AutoModelForCausalLM

    from rlvr_cli.train.lora import dropout_on

    base = AutoModelForCausalLM.from_pretrained(tiny_chatml).eval()
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.5, target_modules="all-linear", task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, config).eval()  # as lora.attach leaves it
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.5)
        ids = torch.tensor([[3, 7, 11, 19, 23]])
        plain = base(ids).logits
        with dropout_on(model):
            dropped = base(ids).logits
        after = base(ids).logits
    assert not torch.allclose(dropped, plain)  # the key changes the update's forward
    assert torch.equal(after, plain)  # and nothing else: sampling and rollout log-probs see none


def test_both_local_engines_sample_the_adapted_policy(tiny_chatml: Path) -> None:
    """Greedy decoding through the lean sampler and through transformers' `generate` gives the same
    tokens on the adapted policy, and not the base's (the adapter changes what is sampled)."""
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.engine.types import SamplingParams
    from rlvr_cli.train.lora import switched_off

    model, policy = _adapted(tiny_chatml)
    params = SamplingParams(max_new_tokens=8, temperature=0.0, top_p=1.0, top_k=0, stop_ids=(), pad_id=1)
    prompts = [[3, 7, 11, 19], [5, 8, 13, 21, 34]]

    def greedy(name: str) -> list[list[int]]:
        return [g.response_ids for g in PolicyEngine.of(name, policy).sample(prompts, params, seed=0, revision=0)]

    lean, hf = greedy("lean"), greedy("transformers")
    assert lean == hf
    with switched_off(model):
        base = greedy("lean")
    assert base != lean


def test_validate_refuses_targets_the_policy_lacks_and_ranks_larger_than_a_layer(
    single_turn: Path, tmp_path: Path
) -> None:
    exp = copy_experiment(single_turn, tmp_path / "exp", [with_adapter(LORA.replace("all-linear", "[q_prj, v_proj]"))])
    out = rlvr("validate", exp / CONTRACT)
    assert out.code == 1 and "RLV305" in out.stdout and "did you mean 'q_proj'" in out.stdout, out.stdout
    line = next(i for i, t in enumerate((exp / CONTRACT).read_text().splitlines(), 1) if "q_prj" in t)
    assert f"{CONTRACT}:{line}:" in out.stdout  # file:line:col of the wrong name
    edit(exp, "[q_prj, v_proj]", "[lm_head]")
    assert "cannot be adapted" in rlvr("validate", exp / CONTRACT).stdout
    edit(exp, "[lm_head]", "all-linear")
    edit(exp, "rank: 4", "rank: 4096")
    out = rlvr("validate", exp / CONTRACT)
    assert out.code == 1 and "rank 4096 exceeds" in out.stdout
    edit(exp, "rank: 4096", "rank: 4")
    assert rlvr("validate", exp / CONTRACT).code == 0  # the paired pass


def test_a_foreign_or_pickled_adapter_is_refused_and_never_executed(
    single_turn: Path, tmp_path: Path, tiny_chatml: Path
) -> None:
    exp = copy_experiment(single_turn, tmp_path / "exp", [with_adapter(LORA.replace("}", ", path: start}"))])
    model, _ = _adapted(tiny_chatml)
    model.save_pretrained(exp / "start")
    config = exp / "start" / "adapter_config.json"
    saved = json.loads(config.read_text())
    config.write_text(json.dumps({**saved, "base_model_name_or_path": "Qwen/Qwen2.5-0.5B"}))
    deep = rlvr("validate", "--deep", exp / CONTRACT)
    assert deep.code == 1 and "was trained on Qwen/Qwen2.5-0.5B, not on the policy" in deep.stdout, deep.stdout
    assert str((exp / "model").resolve()) in deep.stdout  # both names
    config.write_text(json.dumps(saved))  # trained on this very folder (by name): accepted
    assert rlvr("validate", "--deep", exp / CONTRACT).code == 0
    # a pickle payload: loading it would create the marker file
    marker = tmp_path / "owned"
    (exp / "start" / "adapter_model.safetensors").unlink()

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    import pickle

    (exp / "start" / "adapter_model.bin").write_bytes(pickle.dumps(Payload()))
    refused = rlvr("train", exp / CONTRACT, "--run-dir", tmp_path / "run", "--max-steps", "1", timeout=300)
    assert refused.code != 0 and "pickle" in refused.stderr and "never loaded" in refused.stderr, refused.stderr
    assert not marker.exists() and "Traceback" not in refused.stderr


@pytest.mark.slow
def test_an_adapter_run_checkpoints_only_the_adapter_and_resumes_exactly_after_sigkill(
    lora_experiment: Path, tmp_path: Path
) -> None:
    straight = tmp_path / "straight"
    done = rlvr("train", lora_experiment / CONTRACT, "--run-dir", straight, "--max-steps", "4", timeout=400)
    assert done.code == 0, done.stderr[-2000:]
    final = straight / "final"
    assert (final / "adapter_config.json").is_file() and not (final / "model.safetensors").exists()
    step = straight / "checkpoints" / "step-4"
    assert sorted(p.name for p in (step / "adapter").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert not (step / "model").exists()
    plan = json.loads((straight / "plan.json").read_text())
    assert "lora r=4" in json.dumps(plan) and "switched off" in json.dumps(plan)
    # a run killed after its second checkpoint resumes to the same adapter and records
    run_dir = tmp_path / "killed"
    command = ["train", lora_experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4"]
    proc = spawn_rlvr(*command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "step-2").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_rlvr(proc)
    proc.communicate(timeout=60)
    resumed = rlvr("train", lora_experiment / CONTRACT, "--run-dir", run_dir, "--max-steps", "4", "--auto", timeout=400)
    assert resumed.code == 0 and "resuming" in resumed.stderr, resumed.stderr[-2000:]
    a, b = (load_file(r / "final" / "adapter_model.safetensors") for r in (straight, run_dir))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in a.items() if "lora_B" in k)  # it trained
    import pyarrow.parquet as pq

    shard = next((straight / "records").glob("*.parquet"))
    row = pq.read_table(shard).to_pylist()[-1]  # each record names the adapter that sampled it and its revision
    assert json.loads(row["sampling"])["adapter"].startswith("lora r=4") and row["policy_revision"] >= 0
    # gate evaluates the adapter over the contract's policy
    gate = rlvr("gate", lora_experiment / CONTRACT, "--candidate", straight, timeout=400)
    assert gate.code in (0, 1) and "Traceback" not in gate.stderr and "candidate" in gate.stdout, gate.stderr[-2000:]
    assert "the adapter is in" in rlvr("status", straight).stdout
    assert rlvr("report", straight).code == 0  # and the report says what trained
    assert "lora r=4 alpha=8" in (straight / "report.html").read_text()


def _term(plan: str, name: str) -> float:
    """A term of `rlvr plan`'s table, in MiB."""
    line = next(line for line in plan.splitlines() if line.startswith(name))
    value, unit = line[len(name) :].split()[:2]
    return float(value) * (1024 if unit == "GiB" else 1)


def test_the_plan_counts_the_adapter_alone_and_no_reference_copy(single_turn: Path, tmp_path: Path) -> None:
    exp = copy_experiment(single_turn, tmp_path / "exp", [with_adapter()])
    lora = rlvr("plan", exp / CONTRACT, "--gpu-memory", "1").stdout
    full = rlvr("plan", single_turn / CONTRACT, "--gpu-memory", "1").stdout
    assert "adapter: lora r=4 alpha=8" in lora and "reference: the base with the adapter switched off" in lora
    assert "largest group size that fits:" in lora and "largest response that fits:" in lora
    assert _term(lora, "reference") == 0 < _term(full, "reference")
    assert _term(lora, "optimizer state") < 0.5 * _term(full, "optimizer state")  # rank 4 of a 64-wide model
    edit(exp, "bias: none", "bias: all")  # a bias that trains changes the base: the reference is a copy again
    assert _term(rlvr("plan", exp / CONTRACT).stdout, "reference") > 0


def test_validate_deep_checks_targets_of_an_architecture_it_has_no_table_for(single_turn: Path, tmp_path: Path) -> None:
    """Phi (model_type `phi`): plain `validate` has no table of its layers and says nothing; `--deep`
    builds the model from its config on the meta device and names the layers it has."""
    from transformers import PhiConfig

    exp = copy_experiment(single_turn, tmp_path / "exp", [with_adapter(LORA.replace("all-linear", "[c_attn]"))])
    config = PhiConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
    config.save_pretrained(exp / "model")  # config.json only: the check reads no weights
    assert "RLV305" not in rlvr("validate", exp / CONTRACT).stdout
    deep = rlvr("validate", "--deep", exp / CONTRACT, timeout=240).stdout
    assert "target module 'c_attn' matches no linear layer" in deep and "fc1, fc2" in deep, deep
    edit(exp, "[c_attn]", "[fc1, dense]")
    assert "RLV305" not in rlvr("validate", "--deep", exp / CONTRACT, timeout=240).stdout  # the paired pass


@pytest.mark.slow
def test_the_first_step_computes_the_objective_of_full_training(single_turn: Path, tmp_path: Path) -> None:
    """B starts at zero, so before its first update the adapted policy is the base: the first step
    samples the same answers and computes the same rewards, loss, KL and entropy as full training."""
    full = copy_experiment(single_turn, tmp_path / "full", QUICK_STEPS)
    lora = copy_experiment(single_turn, tmp_path / "lora", [*QUICK_STEPS, with_adapter()])
    rows = []
    for exp in (full, lora):
        done = rlvr("train", exp / CONTRACT, "--run-dir", exp / "run", "--max-steps", "1", timeout=300)
        assert done.code == 0, done.stderr[-2000:]
        rows.append(json.loads((exp / "run" / "metrics.jsonl").read_text().splitlines()[0]))
    a, b = rows
    for key in ("reward_mean", "loss", "kl", "entropy", "response_length_mean"):
        assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), key


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("bf16", torch.float32), ("{params: bf16, compute: bf16}", torch.bfloat16), ("fp32", torch.float32)],
)
def test_the_adapter_trains_in_the_params_dtype_the_contract_writes(
    single_turn: Path, tmp_path: Path, precision: str, dtype: torch.dtype
) -> None:
    """`precision.params` acts with an adapter too: the bf16 preset keeps an fp32 adapter (peft's
    own choice), pure bf16 trains a bf16 one — where RLV304's warning is then true."""
    from transformers import AutoModelForCausalLM

    from rlvr_cli.commands.common import load_valid_contract
    from rlvr_cli.train import lora

    exp = copy_experiment(single_turn, tmp_path / "exp", [("  precision: fp32\n", f"  precision: {precision}\n")])
    edit(exp, f"  precision: {precision}\n", f"  precision: {precision}\n  adapter: {LORA}\n")
    contract = load_valid_contract(exp / CONTRACT, artifacts=True)
    model = lora.attach(AutoModelForCausalLM.from_pretrained(exp / "model"), contract, exp)
    trained = [p for p in model.parameters() if p.requires_grad]
    assert trained and {p.dtype for p in trained} == {dtype}
    warned = "RLV304" in rlvr("validate", exp / CONTRACT).stdout
    assert warned == (dtype == torch.bfloat16)


@pytest.mark.slow
def test_a_mixture_of_experts_trains_with_an_adapter_on_its_experts(single_turn: Path, tmp_path: Path) -> None:
    """A Mixtral-architecture policy (4 experts, 2 per token) with all-linear LoRA: peft adapts its
    attention, router and 3-D expert weights; the run trains them (the reference is the base with
    the adapter off), final/ loads with PeftModel.from_pretrained, and the plan's adapter size is
    the trained one."""
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = copy_experiment(single_turn, tmp_path / "arith", [("max_steps: 200", "max_steps: 2"), with_adapter()])
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    dense = AutoConfig.from_pretrained(folder / "model")
    config = AutoConfig.for_model(
        "mixtral",
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        vocab_size=dense.vocab_size,
        bos_token_id=dense.bos_token_id,
        eos_token_id=dense.eos_token_id,
        pad_token_id=dense.pad_token_id,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    contract = folder / CONTRACT
    assert rlvr("validate", contract, "--deep").code == 0
    run = rlvr("train", contract, "--run-dir", tmp_path / "run", timeout=600)
    assert run.code == 0, run.stderr[-2000:]
    base = AutoModelForCausalLM.from_pretrained(folder / "model")
    adapted = PeftModel.from_pretrained(base, tmp_path / "run" / "final")
    lora = {name: p for name, p in adapted.named_parameters() if "lora_" in name}
    assert any(".experts." in name for name in lora) and any(".gate." in name for name in lora)
    trained = [p for name, p in lora.items() if "lora_B" in name]
    assert all(p.abs().sum() > 0 for p in trained)  # B starts at zero: every adapted weight moved
    plan = rlvr("plan", contract).stdout
    assert f"{sum(p.numel() for p in lora.values()) / 1e6:.2f} M trained parameters" in plan, plan
