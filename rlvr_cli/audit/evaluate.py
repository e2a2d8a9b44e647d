"""Evaluate a policy on a split: per-item rewards, and paired statistics between two policies."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path
from typing import Any

from rlvr_cli.contract.adapter import CONFIG, adapter_folder_problem
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.release_keys import LATENCY_METRICS
from rlvr_cli.errors import RlvrError, UsageProblem


def policy_folder(path: Path) -> Path:
    """A model folder or an adapter folder (peft's), or a run folder's `final/` holding either."""
    for where in (path, path / "final"):
        if (where / "config.json").is_file() or (where / CONFIG).is_file():
            return where
    raise UsageProblem(f"{path} is neither a model or adapter folder nor a run folder with final/")


def load_policy(contract: Contract, folder: Path, path: Path) -> Any:
    """The policy at `path`, in eval mode: a whole model, or an adapter over the contract's policy
    (merged into it once loaded, so evaluation runs the plain model). An adapter of another base,
    or held only as a pickle, is refused with the reason."""
    from transformers import AutoModelForCausalLM

    where = policy_folder(path)
    if not (where / CONFIG).is_file():
        return AutoModelForCausalLM.from_pretrained(where, local_files_only=True).eval()
    problem = adapter_folder_problem(contract, folder, where)
    if problem:
        raise RlvrError(f"{where}: {problem}")
    from peft import PeftModel

    base_ref = contract.artifacts.policy
    source = str(folder / base_ref.path) if base_ref.path is not None else base_ref.id
    base = AutoModelForCausalLM.from_pretrained(source, revision=base_ref.revision, local_files_only=True)
    with warnings.catch_warnings():  # peft calls a transformers property deprecated in favour of another
        warnings.simplefilter("ignore", FutureWarning)
        return PeftModel.from_pretrained(base, where).merge_and_unload().eval()


def evaluate(
    contract: Contract,
    folder: Path,
    policy: Path,
    split: str,
    *,
    samples: int = 1,
    greedy: bool = True,
    seed: int = 0,
    tasks: list[dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """{item id: {"task", "rewards", "components", "statuses", "lengths"}} for every task of `split`
    (or of `tasks`, when given), one entry per sample in each list (an invalid verdict's reward
    and components are None)."""
    from transformers.utils import logging

    from rlvr_cli.contract.tasks import read_split

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    if tasks is None:
        tasks = read_split(folder / getattr(contract.data.splits, split).path, split)
    return _by_item(sample_policy(contract, folder, policy, tasks, samples=samples, greedy=greedy, seed=seed))


def sample_policy(
    contract: Contract,
    folder: Path,
    policy: Path,
    tasks: list[dict[str, Any]],
    *,
    samples: int = 1,
    greedy: bool = True,
    seed: int = 0,
    permitted: set[str] | None = None,
) -> list[Any]:
    """The rollout rows of the policy at `policy` on `tasks`, through the one rollout path;
    `permitted`: the only tools a tool-use episode may call (the others are refused, not run)."""
    from rlvr_cli.chat.render import ChatRenderer
    from rlvr_cli.engine.engines import PolicyEngine
    from rlvr_cli.engine.precision import DTYPES
    from rlvr_cli.rollout.base import Draw
    from rlvr_cli.rollout.rollouts import open_rollout

    renderer = ChatRenderer.from_contract(contract, folder)
    model = load_policy(contract, folder, policy)
    dtypes = contract.hyperparameters.dtypes  # evaluated as trained: mixed precision computes in its dtype
    compute = DTYPES[dtypes.compute] if dtypes.mixed else None
    sampling = contract.hyperparameters.sampling
    engine = PolicyEngine.of(sampling.engine, model, compute=compute, server=sampling.server)
    with open_rollout(contract, folder, renderer, engine) as rollout:  # the rollout training runs, unhinted
        if permitted is not None and hasattr(rollout, "env"):
            rollout.env.permitted = permitted
        return rollout.sample(tasks, Draw(group_size=samples, seed=seed, greedy=greedy))  # type: ignore[no-any-return]


def _by_item(rows: list[Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        item = out.setdefault(str(row.task["id"]), {"task": row.task, **{k: [] for k in SAMPLE_FIELDS}})
        verdict = row.verdict
        item["rewards"].append(row.reward if row.valid else None)  # an invalid verdict is no reward, not 0
        item["components"].append(dict(verdict.components) if verdict is not None and verdict.valid else None)
        item["statuses"].append(verdict.status if verdict is not None else "not_verified")
        item["lengths"].append(len(row.response_ids))
        item["generated"].append(int(sum(row.mask)))  # sampled tokens (tool results are not generated)
        item["verify_seconds"].append(float(row.verify_seconds))
    return out


SAMPLE_FIELDS = ("rewards", "components", "statuses", "lengths", "generated", "verify_seconds")
#: per-sample fields a gate metric averages over an item (cost), and the timed fields (latency)
AVERAGED = {"response_length": "lengths", "tokens_per_task": "generated", "verifier_seconds": "verify_seconds"}
INVALID = ("verifier_error", "timeout", "sandbox_error")


def item_values(contract: Contract, evaluation: dict[str, dict[str, Any]], metric: str) -> dict[str, float]:
    """{item: the metric over its samples}; items without a valid sample have no reward-type value.

    Metrics (RLV803 checks a gate names one): reward_mean, success_rate (the best reward the
    components allow), error_rate (invalid verdicts, never counted as 0), response_length, the
    costs tokens_per_task (sampled tokens) and verifier_seconds, the latencies ttft_s, tpot_s and
    latency_s (audit/latency.py, when measured), and the mean of any reward component by its name
    (`correct` is the accuracy of a 0/1 component)."""
    best = contract.objective.reward.best
    out = {}
    for key, item in evaluation.items():
        if metric == "error_rate":
            statuses = item.get("statuses") or []
            out[key] = sum(s in INVALID for s in statuses) / max(len(statuses), 1)
            continue
        if metric in AVERAGED or metric in LATENCY_METRICS:
            values = item.get(AVERAGED.get(metric, metric))
            if values is None:
                raise RlvrError(f"the evaluation has no '{metric}' (an older evaluation file, or latency not measured)")
            if values:
                out[key] = sum(values) / len(values)
            continue
        valid = [r for r in item["rewards"] if r is not None]
        if not valid:
            continue
        if metric == "reward_mean":
            out[key] = sum(valid) / len(valid)
        elif metric == "success_rate":
            out[key] = sum(r >= best - 1e-9 for r in valid) / len(valid)
        else:
            if "components" not in item:
                raise RlvrError(f"the evaluation has no components to measure '{metric}' (an older evaluation file?)")
            values = [c[metric] for c in item["components"] if c is not None and metric in c]
            if values:
                out[key] = sum(values) / len(values)
    return out


def item_means(evaluation: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Mean reward per item over its valid samples."""
    means = {}
    for key, item in evaluation.items():
        valid = [r for r in item["rewards"] if r is not None]
        if valid:
            means[key] = sum(valid) / len(valid)
    return means


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
        split: {k: {"task": v["task"], **{f: v[f] for f in SAMPLE_FIELDS if f in v}} for k, v in ev.items()}
        for split, ev in evaluations.items()
    }
    path.write_text(json.dumps(slim, indent=1), encoding="utf-8")
