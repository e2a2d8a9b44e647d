"""A user's TRL script on a folder `rlvr export --to trl` wrote: TRL's GRPOTrainer with the exported
GRPOConfig, the exported reward functions (the contract's verifier) and dataset, on the given
model, for a few steps on CPU. Prints TRL's log history as JSON (the last line)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import yaml


def main(folder: Path, model: str, steps: int) -> None:
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    spec = importlib.util.spec_from_file_location("exported_reward", folder / "reward.py")
    assert spec is not None and spec.loader is not None
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    config = yaml.safe_load((folder / "grpo_config.yaml").read_text())
    config.update(max_steps=steps, bf16=False, fp16=False)  # a few steps, on this CPU
    args = GRPOConfig(output_dir=str(folder / "run"), use_cpu=True, report_to=[], logging_steps=1, **config)
    data = load_dataset("json", data_files=str(folder / "train.jsonl"))["train"]
    trainer = GRPOTrainer(model=model, reward_funcs=reward.REWARD_FUNCS, args=args, train_dataset=data)
    trainer.train()
    print(json.dumps(trainer.state.log_history))


if __name__ == "__main__":  # the verifier's worker process is spawned: TRL scripts need this guard
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
