"""What `rlvr export` writes: for TRL the GRPOConfig keywords (YAML) and, with an adapter, peft's
LoraConfig keywords for GRPOTrainer's peft_config; for verl a Hydra config over
verl's own ppo_trainer, the reward function that runs the contract's verifier, and the task data
as the parquet files verl reads (each row carrying its rlvr task)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rlvr_cli.contract.models import Contract
from rlvr_cli.interop import nemo_rl_export, trl_export, trl_rloo_export, verl_export
from rlvr_cli.interop.common import Mapping
from rlvr_cli.interop.trl_map import VERSION as TRL_VERSION
from rlvr_cli.interop.verl_map import VERSION as VERL_VERSION
from rlvr_cli.interop.write import peer_yaml

REWARD_MODULE = '''"""verl's custom reward function for {name}: the contract's own verifier (rlvr export).
verl loads it by path (reward.custom_reward_function); rlvr must be installed where verl runs."""

from rlvr_cli.interop.verl_reward import ContractReward

compute_score = ContractReward({contract!r})
'''

TRL_MODULE = '''"""TRL reward functions for {name}: one per reward component of the contract, each its value
from the contract's own verifier (rlvr export); {kind}Config's reward_weights are the components'
weights. rlvr must be installed where TRL runs, and the script that trains needs an
`if __name__ == "__main__":` guard (the verifier runs in a spawned worker process).

    {kind}Trainer(model=..., reward_funcs=REWARD_FUNCS, args={kind}Config(output_dir=..., **config),
                train_dataset=load_dataset("json", data_files="train.jsonl")["train"])
"""

from rlvr_cli.interop.trl_reward import Components

REWARD_FUNCS = Components({contract!r}).functions()
'''


def mapping(contract: Contract, to: str, processes: int) -> Mapping:
    if to == "trl":  # RLOOTrainer takes the answer's likelihood ratio, GRPOTrainer the others
        rloo = trl_export.trainer(contract) == "rloo"
        return (trl_rloo_export if rloo else trl_export).export_config(contract, processes)
    if to == "nemo-rl":
        return nemo_rl_export.export_config(contract)
    out = verl_export.export_config(contract)
    if contract.environment.kind != "single_turn":
        out.refuse("environment.kind", "tool_use: the exported reward function judges single-turn answers only")
    if contract.artifacts.tokenizer.chat_template != "native":
        out.differs("artifacts.tokenizer.chat_template", "verl renders prompts with the tokenizer's own template")
    return out


def write(contract: Contract, contract_path: Path, to: str, found: Mapping, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    peer = {"trl": f"TRL {TRL_VERSION}", "verl": f"verl {VERL_VERSION}", "nemo-rl": "NeMo RL"}[to]
    header = [f"rlvr export of {contract_path.name} ({contract.name}) for {peer}."]
    header += [f"  {d.line()}" for d in found.differences]
    folder = contract_path.resolve().parent
    if to == "trl":
        return _trl(contract, contract_path, found, header, folder, out)
    if to == "nemo-rl":
        found.set("policy.model_name", _model(contract, folder), "artifacts.policy")
        recipe = out / "grpo_rlvr.yaml"
        header += [
            "A recipe over NeMo RL's examples/configs/grpo_math_1B.yaml: put it in examples/configs/recipes/llm/."
        ]
        text = peer_yaml(Mapping(), header, nest=False) + f"defaults: {nemo_rl_export.RECIPE_DEFAULTS}\n"
        recipe.write_text(text + peer_yaml(found, [], nest=True), "utf-8")
        return [recipe]
    train, val = out / "train.parquet", out / "val.parquet"
    _parquet(contract, folder, "train", train)
    _parquet(contract, folder, "holdout", val)
    reward = out / "reward.py"
    reward.write_text(REWARD_MODULE.format(name=contract.name, contract=str(contract_path.resolve())), "utf-8")
    found.set("data.train_files", str(train.resolve()), "the contract's train split")
    found.set("data.val_files", str(val.resolve()), "the contract's holdout split")
    found.set("reward.custom_reward_function.path", str(reward.resolve()), "the contract's verifier")
    found.set("reward.custom_reward_function.name", "compute_score", "reward.py")
    found.set("actor_rollout_ref.model.path", _model(contract, folder), "artifacts.policy")
    config = out / "rlvr.yaml"
    preamble = "hydra:\n  searchpath: [pkg://verl.trainer.config]\ndefaults:\n  - ppo_trainer\n  - _self_\n"
    config.write_text(peer_yaml(Mapping(), header, nest=False) + preamble + peer_yaml(found, [], nest=True), "utf-8")
    return [config, reward, train, val]


def _trl(
    contract: Contract, contract_path: Path, found: Mapping, header: list[str], folder: Path, out: Path
) -> list[Path]:
    from rlvr_cli.contract.tasks import read_split
    from rlvr_cli.interop.trl_reward import rows

    trainer = trl_export.trainer(contract)
    kind = "RLOO" if trainer == "rloo" else "GRPO"
    config, reward, data = out / f"{trainer}_config.yaml", out / "reward.py", out / "train.jsonl"
    config.write_text(
        peer_yaml(found, [*header, f"{kind}Config(output_dir=..., **yaml.safe_load(open(this)))"], nest=False)
    )
    module = TRL_MODULE.format(name=contract.name, contract=str(contract_path.resolve()), kind=kind)
    reward.write_text(module, "utf-8")
    tasks = read_split(folder / contract.data.splits.train.path, "train")
    data.write_text("".join(json.dumps(row) + "\n" for row in rows(tasks)), "utf-8")
    written = [config, reward, data]
    adapter = contract.hyperparameters.adapter
    if adapter is not None:  # what trains: GRPOTrainer's peft_config, peft's own LoraConfig keywords
        lora = {
            "task_type": "CAUSAL_LM",
            "r": adapter.rank,
            "lora_alpha": adapter.alpha,
            "lora_dropout": adapter.dropout,
            "target_modules": adapter.target_modules,
            "bias": adapter.bias,
            "init_lora_weights": True if adapter.init == "default" else "gaussian",
        }
        peft = out / "peft_config.yaml"
        use = f"{kind}Trainer(..., peft_config=LoraConfig(**yaml.safe_load(open(this))))"
        peft.write_text(
            f"# rlvr export of {contract_path.name}: {use}\n" + yaml.safe_dump(lora, sort_keys=False), "utf-8"
        )
        written.append(peft)
    return written


def _model(contract: Contract, folder: Path) -> str:
    ref = contract.artifacts.policy
    return str(ref.id) if ref.id else str((folder / str(ref.path)).resolve())


def _parquet(contract: Contract, folder: Path, split: str, path: Path) -> None:
    """verl's row format: prompt as chat messages, data_source, reward_model.ground_truth, and
    extra_info.rlvr_task (the task row the contract's verifier reads)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlvr_cli.contract.tasks import messages_of, read_split

    rows: list[dict[str, Any]] = []
    for index, task in enumerate(read_split(folder / getattr(contract.data.splits, split).path, split)):
        rows.append(
            {
                "data_source": f"rlvr/{contract.name}",
                "prompt": [{"role": m["role"], "content": str(m.get("content", ""))} for m in messages_of(task)],
                "ability": str(task.get("domain", "")),
                "reward_model": {"style": "rule", "ground_truth": str(task.get("answer", ""))},
                "extra_info": {"index": index, "split": split, "rlvr_task": json.dumps(task, sort_keys=True)},
            }
        )
    pq.write_table(pa.Table.from_pylist(rows), path)


def how_to_run(to: str, out: Path) -> str:
    if to == "nemo-rl":
        return (
            f"run: copy {out / 'grpo_rlvr.yaml'} into NeMo RL's examples/configs/recipes/llm/, then "
            "uv run examples/run_grpo_math.py --config examples/configs/recipes/llm/grpo_rlvr.yaml "
            "(with an environment that returns the contract's reward)\n"
        )
    if to == "trl":
        adapter = " and peft_config.yaml" if (out / "peft_config.yaml").exists() else ""
        config, kind = (
            ("rloo_config.yaml", "RLOO") if (out / "rloo_config.yaml").exists() else ("grpo_config.yaml", "GRPO")
        )
        return f"run: see {out / 'reward.py'} ({kind}Trainer with REWARD_FUNCS, {config}{adapter}, train.jsonl)\n"
    return (
        f"run: python -m verl.trainer.main_ppo --config-path={out.resolve()} --config-name=rlvr "
        "trainer.n_gpus_per_node=8 trainer.nnodes=1\n"
    )
