"""Run by verl's own environment (`.venv-verl`) on a folder `rlvr export --to verl` wrote: verl's
Hydra loads the exported config over its own ppo_trainer (the way `verl.trainer.main_ppo
--config-path DIR --config-name rlvr` does), verl's `load_reward_manager` loads the exported
reward function, and its naive reward manager scores each given response to its row of
train.parquet (read by the caller: verl's environment here holds no parquet reader). Prints
JSON: the composed values at the given keys, and each score."""

from __future__ import annotations

import json
import sys

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager


def score(manager, tokenizer, row, response: str) -> dict:
    ids = tokenizer(response, add_special_tokens=False)["input_ids"] or [tokenizer.eos_token_id]
    responses = torch.tensor([ids])
    data = DataProto.from_dict(
        tensors={"responses": responses, "attention_mask": torch.ones(1, 3 + len(ids), dtype=torch.long)},
        non_tensors={
            "data_source": [row["data_source"]],
            "reward_model": [row["reward_model"]],
            "extra_info": [dict(row["extra_info"])],
        },
    )
    return manager.loop.run_until_complete(manager.run_single(data))  # the loop verl bound it to


def main(folder: str, keys: list[str], cases: list[tuple[dict, str]]) -> None:
    with initialize_config_dir(config_dir=folder, version_base=None):
        config = compose(config_name="rlvr")
    composed = {key: OmegaConf.select(config, key) for key in keys}
    composed = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in composed.items()}
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    manager = load_reward_manager(config, tokenizer)
    scores = [score(manager, tokenizer, row, response) for row, response in cases]
    print(json.dumps({"composed": composed, "scores": scores}, default=str))


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]))
