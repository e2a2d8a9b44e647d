"""Evaluate a policy on a split: per-item rewards, and paired statistics between two policies."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import RlvrError, UsageProblem


def policy_folder(path: Path) -> Path:
    """A model folder, or a run folder's `final/`."""
    if (path / "config.json").is_file():
        return path
    if (path / "final" / "config.json").is_file():
        return path / "final"
    raise UsageProblem(f"{path} is neither a model folder nor a run folder with final/")


def evaluate(
    contract: Contract, folder: Path, policy: Path, split: str, *, samples: int = 1, greedy: bool = True, seed: int = 0
) -> dict[str, dict[str, Any]]:
    """{item id: {"rewards": [...], "task": {...}}} for every task of `split`."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    from rlvr_cli.chat.render import ChatRenderer
    from rlvr_cli.contract.tasks import messages_of, read_split
    from rlvr_cli.env.scoring import answer_and_score
    from rlvr_cli.env.single_turn import VerifierPool

    if contract.environment.kind != "single_turn":
        raise RlvrError("policy evaluation runs single_turn environments")
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    tasks = read_split(folder / getattr(contract.data.splits, split).path, split)
    renderer = ChatRenderer.from_contract(contract, folder)
    model = AutoModelForCausalLM.from_pretrained(policy_folder(policy), local_files_only=True).eval()
    tok = renderer.tokenizer
    prompts = [renderer.prompt_ids(messages_of(t)) for t in tasks]
    with VerifierPool.for_contract(contract, folder) as pool:
        rows = answer_and_score(
            contract,
            model,
            tok,
            prompts,
            tasks,
            pool,
            stop_ids=renderer.stop_ids,
            pad_id=renderer.pad_id,
            samples=samples,
            greedy=greedy,
            seed=seed,
        )
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        item = out.setdefault(str(row.task["id"]), {"rewards": [], "task": row.task})
        item["rewards"].append(row.reward if row.valid else 0.0)
    return out


def item_means(evaluation: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {k: sum(v["rewards"]) / len(v["rewards"]) for k, v in evaluation.items()}


def bootstrap(
    values: list[float], confidence: float, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean and a percentile bootstrap interval over items (paired when `values` are differences)."""
    if not values:
        raise RlvrError("no items to evaluate")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    low = means[int(tail * (resamples - 1))]
    high = means[int((1 - tail) * (resamples - 1))]
    return sum(values) / n, low, high


def sign_flip_p(differences: list[float], resamples: int = 4000, seed: int = 0) -> float:
    """Two-sided paired permutation test of mean difference 0 (random sign flips)."""
    rng = random.Random(seed)
    observed = abs(sum(differences))
    if observed == 0:
        return 1.0
    hits = sum(
        abs(sum(d if rng.random() < 0.5 else -d for d in differences)) >= observed - 1e-12 for _ in range(resamples)
    )
    return (hits + 1) / (resamples + 1)


def save_evaluation(path: Path, evaluations: dict[str, dict[str, dict[str, Any]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    slim = {
        split: {k: {"rewards": v["rewards"], "task": v["task"]} for k, v in ev.items()}
        for split, ev in evaluations.items()
    }
    path.write_text(json.dumps(slim, indent=1), encoding="utf-8")
