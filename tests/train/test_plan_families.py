"""`rlvr plan` on the config.json of model families other than Llama: GPT-2's field names and
learned positions, Qwen3's and Gemma's heads wider than hidden / heads, fused projections (Phi-3,
GPT-2, GPT-NeoX), output heads tied by the family's default. The counts are checked against the
models transformers builds from the same file (on the meta device: no weights) and the adapter
against the one peft builds over it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, rlvr

SEVEN_B = ROOT / "contracts" / "grpo-7b-plan.rlvr.yaml"
LORA = (
    "  adapter: {kind: lora, rank: 16, alpha: 32, dropout: 0.0, target_modules: all-linear, "
    "bias: none, init: default}\n"
)

# The shapes of published checkpoints, written with each family's own field names and leaving out
# what their config.json files leave out (GPT-2's tie_word_embeddings, its n_inner).
SHAPES = {
    "gpt2 (124 M)": {
        "model_type": "gpt2",
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_positions": 1024,
        "vocab_size": 50257,
    },
    "Qwen3-0.6B": {
        "model_type": "qwen3",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Gemma-2B": {
        "model_type": "gemma",
        "hidden_size": 2048,
        "intermediate_size": 16384,
        "num_hidden_layers": 18,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 256000,
    },
    "Phi-3-mini": {
        "model_type": "phi3",
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32064,
        "pad_token_id": 32000,
        "tie_word_embeddings": False,
    },
    "Pythia-160M": {
        "model_type": "gpt_neox",
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "vocab_size": 50304,
        "tie_word_embeddings": False,
    },
    # mixtures of experts, as their config.json files give them
    "Mixtral-8x7B": {
        "model_type": "mixtral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
    "Qwen3-30B-A3B": {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    },
    "Qwen1.5-MoE-A2.7B": {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    },
    "OLMoE-1B-7B": {
        "model_type": "olmoe",
        "hidden_size": 2048,
        "intermediate_size": 1024,
        "num_hidden_layers": 16,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_experts": 64,
        "num_experts_per_tok": 8,
        "vocab_size": 50304,
        "tie_word_embeddings": False,
    },
    # a Qwen MoE with dense layers among the sparse ones (mlp_only_layers, decoder_sparse_step)
    "qwen3_moe, dense layers mixed in": {
        "model_type": "qwen3_moe",
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 64,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
        "vocab_size": 1000,
    },
}

# Mixtral's layout at a size built in milliseconds (its experts, router and older names as they are)
SMALL_MIXTRAL = {
    **SHAPES["Mixtral-8x7B"],
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
}


def _contract(tmp_path: Path, config: dict, adapter: bool = False) -> Path:
    (tmp_path / "llama-7b").mkdir()
    (tmp_path / "llama-7b" / "config.json").write_text(json.dumps(config))
    text = SEVEN_B.read_text()
    if adapter:  # on ddp: an adapter does not run sharded yet
        lines = text.splitlines(keepends=True)
        text = "".join(x + (LORA if x.startswith("  precision: ") else "") for x in lines if "  parallel:" not in x)
    path = tmp_path / "plan.rlvr.yaml"
    path.write_text(text)
    return path


def _transformers_counts(folder: Path) -> tuple[int, int, int]:
    """(parameters, head size, LoRA r=16 all-linear parameters) of the model transformers and peft
    build from this config.json."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    adapted = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    lora = sum(p.numel() for name, p in adapted.named_parameters() if "lora_" in name)
    return total, head, lora


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_plan_counts_what_transformers_builds_from_a_familys_config(name: str, tmp_path: Path) -> None:
    contract = _contract(tmp_path, SHAPES[name], adapter=True)
    plan = rlvr("plan", contract, "--gpus", "8", "--gpu-memory", "80")
    assert plan.code in (0, 1), plan.stderr
    total, head, lora = _transformers_counts(tmp_path / "llama-7b")
    model = re.search(r"model: ([\d,.]+) M parameters \((\d+) layers, hidden \d+, \d+/\d+ heads of (\d+)", plan.stdout)
    assert model is not None, plan.stdout
    assert float(model.group(1).replace(",", "")) == pytest.approx(total / 1e6, abs=0.006), (name, total)
    assert int(model.group(3)) == head
    trained = re.search(r"([\d,.]+) M trained parameters", plan.stdout)
    assert trained is not None and float(trained.group(1).replace(",", "")) == pytest.approx(lora / 1e6, abs=0.006)
    assert "is not one rlvr knows" not in plan.stdout


def test_a_model_type_without_a_written_layout_is_said_to_be_counted_as_llama_style(tmp_path: Path) -> None:
    config = {**SHAPES["Qwen3-0.6B"], "model_type": "ernie4_5"}
    plan = rlvr("plan", _contract(tmp_path, config))
    assert plan.code == 0, plan.stderr
    assert "model type 'ernie4_5' is not one rlvr knows: counted as a Llama-style decoder" in plan.stdout


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "cannot be read"),
        ("[1, 2]", "is not a JSON object"),
        ('{"model_type": "gpt2", "n_embd": 768, "vocab_size": 50257}', "lacks a field the estimate needs"),
        (
            '{"model_type": "llama", "hidden_size": "wide", "num_attention_heads": 8, "num_hidden_layers": 2, '
            '"vocab_size": 10}',
            "cannot read",
        ),
    ],
)
def test_a_config_the_plan_cannot_read_is_named_without_a_traceback(text: str, words: str, tmp_path: Path) -> None:
    contract = _contract(tmp_path, {})
    (tmp_path / "llama-7b" / "config.json").write_text(text)
    plan = rlvr("plan", contract)
    assert plan.code == 1 and words in plan.stderr and "Traceback" not in plan.stderr, plan.stderr


def test_validate_checks_an_adapters_rank_against_fused_and_wide_layers(tmp_path: Path) -> None:
    """GPT-2's narrowest layer named c_proj is the attention's (768 × 768): rank 1024 is refused
    there. Qwen3-0.6B's k_proj is 1024 × 1024 (8 heads of 128, not of hidden / heads = 64): rank 768
    fits it (no false alarm), rank 1536 does not."""
    shutil.copytree(SEVEN_B.parent / "arith", tmp_path / "arith")
    contract = _contract(tmp_path, SHAPES["gpt2 (124 M)"], adapter=True)
    contract.write_text(contract.read_text().replace("rank: 16", "rank: 1024").replace("all-linear", "[c_proj]"))
    out = rlvr("validate", contract).stdout
    assert "RLV305" in out and "rank 1024 exceeds c_proj's smaller side (768×768)" in out, out
    (tmp_path / "llama-7b" / "config.json").write_text(json.dumps(SHAPES["Qwen3-0.6B"]))
    contract.write_text(contract.read_text().replace("rank: 1024", "rank: 768").replace("[c_proj]", "[k_proj]"))
    assert "RLV305" not in rlvr("validate", contract).stdout
    contract.write_text(contract.read_text().replace("rank: 768", "rank: 1536"))
    assert "rank 1536 exceeds k_proj's smaller side (1024×1024)" in rlvr("validate", contract).stdout


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_plans_compute_is_the_trainers_count_for_the_model_it_builds(name: str, tmp_path: Path) -> None:
    """The plan's sampling FLOPs, from config.json, equal what the trainer counts on the model
    transformers builds (train/flops.py): lookup tables (GPT-2's learned positions too) multiply
    nothing."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlvr_cli.train import flops

    contract = _contract(tmp_path, SHAPES[name])
    line = rlvr("plan", contract).stdout.splitlines()[-1]
    found = re.search(r"prompts of (\d+) and responses of (\d+) tokens\): .* sampling ([\d,.]+) ", line)
    assert found is not None, line
    prompt, response, planned = int(found.group(1)), int(found.group(2)), found.group(3)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path / "llama-7b"))
    text = SEVEN_B.read_text()
    prompts = int(re.search(r"prompts_per_step: (\d+)", text).group(1))
    group = int(re.search(r"group_size: (\d+)", text).group(1))
    counted = flops.Shape.of(model).group(prompt, [response] * group) * prompts / 1e12
    shown = f"{counted:,.0f}" if counted >= 100 else f"{counted:.2f}" if counted >= 1 else f"{counted:.3g}"
    assert planned == shown, (planned, counted)  # as the plan rounds it


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("Mixtral-8x7B", 46.7, 12.9),
        ("Qwen3-30B-A3B", 30.5, 3.3),
        ("Qwen1.5-MoE-A2.7B", 14.3, 2.7),
        ("OLMoE-1B-7B", 6.9, 1.3),
    ],
)
def test_a_mixture_of_experts_holds_every_expert_and_multiplies_by_the_active_ones(
    name: str, total: float, active: float, tmp_path: Path
) -> None:
    """The totals and active counts their publishers give (billions; active ones count the input
    table, which the plan's multiplying count leaves out as every lookup table); before, every
    mixture was counted as one Llama-style MLP (Mixtral-8x7B as 7.2 B)."""
    plan = rlvr("plan", _contract(tmp_path, SHAPES[name]))
    found = re.search(r"model: ([\d,.]+) M parameters .* per token: ([\d,.]+) M parameters multiply", plan.stdout)
    assert found is not None, plan.stdout
    held, multiplying = (float(x.replace(",", "")) / 1e3 for x in found.groups())
    table = SHAPES[name]["vocab_size"] * SHAPES[name]["hidden_size"] / 1e9
    assert held == pytest.approx(total, rel=0.02)
    assert multiplying + table == pytest.approx(active, rel=0.02)


def test_validate_takes_peft_s_names_for_experts_and_never_blocks_all_linear_on_a_gate(tmp_path: Path) -> None:
    """all-linear at rank 16 on Qwen1.5-MoE adapts its 2048 × 1 shared_expert_gate, as peft does (no
    false alarm); naming that gate at rank 16 is refused. Mixtral's experts are 3-D parameters under
    transformers 5, which peft still targets by their older names w1, w3 (validate and --deep take
    them)."""
    shutil.copytree(SEVEN_B.parent / "arith", tmp_path / "arith")
    contract = _contract(tmp_path, SHAPES["Qwen1.5-MoE-A2.7B"], adapter=True)
    assert "RLV305" not in rlvr("validate", contract).stdout
    contract.write_text(contract.read_text().replace("all-linear", "[shared_expert_gate]"))
    assert "rank 16 exceeds shared_expert_gate's smaller side (2048×1)" in rlvr("validate", contract).stdout
    (tmp_path / "llama-7b" / "config.json").write_text(json.dumps(SMALL_MIXTRAL))
    contract.write_text(
        contract.read_text().replace("[shared_expert_gate]", "[q_proj, w1, w3]").replace("rank: 16", "rank: 4")
    )
    for deep in ((), ("--deep",)):
        out = rlvr("validate", contract, *deep, timeout=300).stdout
        assert "RLV305" not in out, out
    contract.write_text(contract.read_text().replace("[q_proj, w1, w3]", "[q_proj, gate_up_proj]"))
    assert "gate_up_proj" in rlvr("validate", contract).stdout  # a parameter, not a module peft targets by name
    contract.write_text(contract.read_text().replace("[q_proj, gate_up_proj]", "[q_proj, w1]"))
    out = rlvr("validate", contract).stdout
    assert "'w1' and 'w3' are one weight in this mixture's experts" in out and ":50:" in out, out


def test_peft_refuses_half_of_a_fused_expert_pair_as_validate_says(tmp_path: Path) -> None:
    """The finding above is what the installed peft does: building the adapter fails."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**SMALL_MIXTRAL)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError, match="w1 without also targeting w3"):
        get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "w1"]))


SMALL_QWEN2_MOE = {
    **SHAPES["Qwen1.5-MoE-A2.7B"],
    "hidden_size": 64,
    "intermediate_size": 96,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 100,
}


@pytest.mark.parametrize(
    ("config", "half"),
    [(SMALL_QWEN2_MOE, "gate_proj"), (SHAPES["qwen3_moe, dense layers mixed in"], "up_proj"), (SMALL_MIXTRAL, "w3")],
    ids=["qwen2_moe, a shared expert", "qwen3_moe, dense layers", "mixtral"],
)
def test_validate_refuses_half_of_a_fused_pair_exactly_where_the_installed_peft_does(
    config: dict, half: str, tmp_path: Path
) -> None:
    """Which mixtures' older names reach the experts changed with peft 0.22 (Qwen2-MoE's, whose
    shared expert bears the same names, joined): naming one of the pair is refused by validate
    where, and only where, the installed peft refuses to build the adapter."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    try:
        get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", half]))
        refused = False
    except ValueError as exc:
        assert "because they are fused" in str(exc)
        refused = True
    shutil.copytree(SEVEN_B.parent / "arith", tmp_path / "arith")
    contract = _contract(tmp_path, config, adapter=True)
    contract.write_text(contract.read_text().replace("all-linear", f"[q_proj, {half}]").replace("rank: 16", "rank: 4"))
    out = rlvr("validate", contract).stdout
    assert ("are one weight in this mixture's experts" in out) == refused, out
    assert refused or "RLV305" not in out, out


def test_a_mixture_rlvr_does_not_lay_out_is_said_to_be_counted_without_its_experts(tmp_path: Path) -> None:
    config = {**SHAPES["Qwen3-0.6B"], "model_type": "deepseek_v3", "n_routed_experts": 256}
    plan = rlvr("plan", _contract(tmp_path, config))
    assert plan.code == 0, plan.stderr
    assert "counted as a Llama-style decoder without its 256 experts per layer (an underestimate)" in plan.stdout


@pytest.mark.parametrize("name", ["gpt2 (124 M)", "Mixtral-8x7B"])
def test_the_linear_names_are_the_same_built_here_or_in_a_child_process(name: str, tmp_path: Path) -> None:
    """`train` (transformers imported) builds the meta model in its own process; `validate --deep`
    (which never imports torch) in a child started from another directory. Both find the same
    names, a mixture's older expert names included; a config transformers cannot build is None."""
    import os
    import subprocess
    import sys

    from rlvr_cli.contract.rules_adapter import loaded_linear_names

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMALL_MIXTRAL if name == "Mixtral-8x7B" else SHAPES[name]))
    here = loaded_linear_names(folder)
    probe = (
        "import json, sys\nfrom pathlib import Path\nfrom rlvr_cli.contract.rules_adapter import loaded_linear_names\n"
        "names = loaded_linear_names(Path(sys.argv[1]))\n"
        "print(json.dumps([sorted(names), 'transformers' in sys.modules]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", probe, str(folder)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300
    )
    child, imported = json.loads(done.stdout.splitlines()[-1])
    assert not imported and here is not None and set(child) == here
    assert {"q_proj", "w1", "w3"} <= here if name == "Mixtral-8x7B" else {"c_attn", "c_fc"} <= here
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": "wide"}))
    assert loaded_linear_names(folder) is None
