"""Rollout and score: `prompts_per_step` groups of `group_size` samples from the current
policy, each verified; with dynamic sampling, all-equal groups are dropped and sampled
again, up to `max_rounds` rounds."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_cli.contract.tasks import fit_prompt, messages_of
from rlvr_cli.engine.generate import generate, response_text
from rlvr_cli.env.scoring import Sample, score_all
from rlvr_cli.env.single_turn import VerifierPool
from rlvr_cli.train import hints
from rlvr_cli.train.objective import uniform_groups
from rlvr_cli.train.setup import Setup
from rlvr_cli.train.state import TrainState


@dataclass
class StepResult:
    """What one step produced: accepted groups for the update, every sample for the records."""

    accepted: list[list[Sample]] = field(default_factory=list)
    generated: list[Sample] = field(default_factory=list)
    rounds: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: {"generate": 0.0, "score": 0.0, "update": 0.0})


class Prompts:
    """Prompt token ids per task, rendered once. Keyed by the task row's position in its split,
    never by its id: two rows with one id must not share a prompt."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self._cache: dict[tuple[int, bool], list[int]] = {}

    def ids(self, task: dict[str, Any], hinted: bool = False) -> list[int]:
        """The prompt's token ids; `hinted`: with the task's hint (in the prompt, or as the
        response's first tokens, as `data.hints.placement` says)."""
        key = (id(task), hinted)
        if key not in self._cache:
            self._cache[key] = self._render(task, hints.hint_of(self.setup.contract, task) if hinted else None)
        return self._cache[key]

    def _render(self, task: dict[str, Any], hint: str | None) -> list[int]:
        contract = self.setup.contract
        messages = messages_of(task)
        if hint is not None and not hints.prefix(contract):
            messages = hints.hinted_messages(contract, messages, hint)
        ids = fit_prompt(self.setup.contract.length, task, self.setup.renderer.prompt_ids(messages))
        if hint is not None and hints.prefix(contract):
            ids = ids + self.setup.tokenizer.encode(hint, add_special_tokens=False)
        return ids


def sample_groups(
    setup: Setup,
    prompts: Prompts,
    tasks: list[dict[str, Any]],
    seed: int,
    round_: int,
    first_group: int,
    revision: int = 0,
    hinted: int = 0,
) -> list[Sample]:
    """`group_size` samples of every task, in one batched generate call; the first `hinted`
    of each group are shown the task's hint (when it has one)."""
    hp, length = setup.contract.hyperparameters, setup.contract.length
    k = hp.group_size
    shown = [hints.hint_of(setup.contract, t) if j < hinted else None for t in tasks for j in range(k)]
    prompt_ids = [prompts.ids(tasks[i // k], shown[i] is not None) for i in range(len(shown))]
    gens = generate(
        setup.policy,
        prompt_ids,
        max_new_tokens=length.max_response_tokens,
        temperature=hp.sampling.temperature,
        top_p=hp.sampling.top_p,
        top_k=hp.sampling.top_k,
        stop_ids=setup.renderer.stop_ids,
        pad_id=setup.renderer.pad_id,
        seed=seed,
        engine=hp.sampling.engine,
    )
    return build_samples(setup, tasks, prompt_ids, shown, gens, seed, round_, first_group, revision)


def build_samples(
    setup: Setup,
    tasks: list[dict[str, Any]],
    prompt_ids: list[list[int]],
    shown: list[str | None],
    gens: list[Any],
    seed: int,
    round_: int,
    first_group: int,
    revision: int,
) -> list[Sample]:
    k = setup.contract.hyperparameters.group_size
    prefix = hints.prefix(setup.contract)
    return [
        Sample(
            tasks[i // k],
            first_group + i // k,
            i % k,
            prompt_ids[i],
            gen.response_ids,
            gen.mask,
            gen.finish,
            seed,
            round_,
            text=response_text(setup.tokenizer, gen.response_ids, gen.finish),
            revision=revision,
            hint=shown[i],
            answer_prefix=shown[i] if shown[i] is not None and prefix else "",
            sampling_logp=list(gen.logprobs),
        )
        for i, gen in enumerate(gens)
    ]


def sample_own_groups(
    setup: Setup, prompts: Prompts, tasks: list[dict[str, Any]], seed: int, round_: int, revision: int, hinted: int
) -> list[Sample]:
    """This rank's groups (g ≡ rank mod world), each sampled alone with its own seed."""
    samples: list[Sample] = []
    for g in range(setup.rank, len(tasks), setup.world):
        samples += sample_groups(setup, prompts, [tasks[g]], seed * 10_007 + g, round_, g, revision, hinted)
    return samples


def _episodes(
    setup: Setup, env: Any, tasks: list[dict[str, Any]], seed: int, round_: int, revision: int, result: StepResult
) -> tuple[list[Sample], list[dict[str, Any]]]:
    """Tool-use episodes of this round's groups; under torchrun, this process's share
    (g ≡ rank mod world) as one batch against its own server, seeded by rank."""
    from rlvr_cli.env.episodes import run_episodes

    hp = setup.contract.hyperparameters
    if setup.world > 1:
        groups = list(range(setup.rank, len(tasks), setup.world))
        tasks, seed = [tasks[g] for g in groups], seed * 10_007 + setup.rank
    else:
        first = len(result.generated) // hp.group_size
        groups = list(range(first, first + len(tasks)))
    samples = run_episodes(setup, env, tasks, hp.group_size, seed, groups=groups, round_=round_, revision=revision)
    return samples, tasks


def step_seed(setup: Setup, step: int, round_: int) -> int:
    return setup.contract.hyperparameters.seed * 1_000_003 + step * 101 + round_


def collect(setup: Setup, state: TrainState, prompts: Prompts, pool: Any, ahead: Any = None) -> StepResult:
    """`pool`: the verifier worker (single_turn) or the resources server (tool_use, `ToolEnv`)."""
    hp = setup.contract.hyperparameters
    ds = setup.contract.length.dynamic_sampling
    drop = bool(ds and ds.drop_uniform_groups)
    result = StepResult()
    for round_ in range(ds.max_rounds if drop else 1):  # type: ignore[union-attr]
        missing = hp.prompts_per_step - len(result.accepted)
        if missing <= 0:
            break
        start = time.perf_counter()
        early = ahead.take(state.step) if ahead is not None and round_ == 0 else None
        if early is not None:  # sampled during the previous step's update (train/overlap.py)
            tasks = [setup.train_tasks[i] for i in early.indices]
            gens = early.generations()
            samples = build_samples(setup, tasks, early.prompt_ids, early.shown, gens, early.seed, 0, 0, early.revision)
            result.seconds["generate"] += time.perf_counter() - start  # the wait, if any
            _score(setup, samples, pool, result, round_)
            _accept(hp, samples, tasks, drop, result)
            continue
        tasks = [setup.train_tasks[i] for i in state.sampler.take(missing)]
        seed = step_seed(setup, state.step, round_)
        hinted = hints.hinted_per_group(setup.contract, state.step)
        if setup.contract.environment.kind == "tool_use":  # episodes: sampled and verified together
            samples, tasks = _episodes(setup, pool, tasks, seed, round_, state.optimizer_steps, result)
            result.seconds["generate"] += time.perf_counter() - start
            result.generated += samples
            result.rounds = round_ + 1
            _accept(hp, samples, tasks, drop, result)
            continue
        if setup.per_group_seeds:
            samples = sample_own_groups(setup, prompts, tasks, seed, round_, state.optimizer_steps, hinted)
            tasks = tasks[setup.rank :: setup.world]
        else:
            first = len(result.generated) // hp.group_size
            samples = sample_groups(setup, prompts, tasks, seed, round_, first, state.optimizer_steps, hinted)
        result.seconds["generate"] += time.perf_counter() - start
        _score(setup, samples, pool, result, round_)
        _accept(hp, samples, tasks, drop, result)
    return result


def _score(setup: Setup, samples: list[Sample], pool: VerifierPool, result: StepResult, round_: int) -> None:
    start = time.perf_counter()
    score_all(setup.contract, samples, pool)
    result.seconds["score"] += time.perf_counter() - start
    result.generated += samples
    result.rounds = round_ + 1


def _accept(hp: Any, samples: list[Sample], tasks: list[dict[str, Any]], drop: bool, result: StepResult) -> None:
    """Groups into the update; with dynamic sampling, all-equal groups are discarded."""
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float64).view(-1, hp.group_size)
    uniform = uniform_groups(rewards).tolist() if drop else [False] * len(tasks)  # (G,)
    for g, flat in enumerate(uniform):
        group = samples[g * hp.group_size : (g + 1) * hp.group_size]
        if flat:
            for s in group:
                s.kept, s.reason = False, s.reason or "uniform_group"
        else:
            result.accepted.append(group)
