"""`rlvr import nemo-rl` on NeMo RL's own published configs (tests/interop/nemo_rl, with their
source): grpo_math_1B.yaml and the DAPO recipe that names it as its `defaults:`, read as NeMo RL
reads them (defaults merged, overrides, `${...}` interpolations). The imported advantage is
checked against NeMo RL's own unit-test numbers for its GRPO estimator."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr_cli.contract.load import load
from rlvr_cli.train.objective import group_advantages
from tests.conftest import copy_experiment, rlvr

CONFIGS = Path(__file__).with_name("nemo_rl") / "examples" / "configs"
GRPO = CONFIGS / "grpo_math_1B.yaml"
DAPO = CONFIGS / "recipes" / "llm" / "dapo-qwen2.5-7b.yaml"
PRORL = CONFIGS / "prorlv2.yaml"
QWEN_MATH = CONFIGS / "recipes" / "llm" / "grpo-qwen2.5-math-1.5b-instruct-1n8g-fsdp2tp1.v3.yaml"
CONTRACT = "experiment.rlvr.yaml"
LOG_BY = "length:\n  dynamic_sampling: {drop_uniform_groups: false, log_by: [difficulty]}\n"


@pytest.fixture
def exp(single_turn: Path, tmp_path: Path) -> Path:
    return copy_experiment(single_turn, tmp_path / "exp")


def imported(exp: Path, config: Path, *overrides: str, name: str = "nemo.rlvr.yaml"):
    done = rlvr("import", "nemo-rl", config, *overrides, "--into", exp / CONTRACT, "--out", exp / name)
    assert done.code == 0, done.stderr
    return load(exp / name), done.stderr


def test_nemo_rls_grpo_config_imports_with_its_leave_one_out_advantage(exp: Path) -> None:
    contract, stderr = imported(exp, GRPO)
    o, h, length = contract.objective, contract.hyperparameters, contract.length
    a = o.advantage
    assert (a.baseline, a.scale, a.std, a.epsilon) == ("leave_one_out", "leave_one_out_std", "sample", 1e-6)
    assert (o.clip.low, o.clip.high, o.clip.dual, o.aggregation) == (0.2, 0.2, None, "token_mean")
    assert (o.kl.coef, o.kl.estimator, o.kl.placement) == (0.01, "k3", "loss")
    assert (h.group_size, h.prompts_per_step, h.mini_batches, h.micro_batch_sequences) == (16, 32, 1, 4)
    assert (h.optimizer.lr, h.optimizer.weight_decay, h.schedule.name, h.schedule.warmup_steps) == (
        5e-6,
        0.01,
        "constant",
        50,
    )
    assert (h.sampling.engine, length.max_response_tokens, length.on_truncated) == ("vllm", 512, "keep")
    assert "differs: policy.scheduler: NeMo RL's warm-up is lr·(0.1 + 0.9·s/50)" in stderr
    assert "a response stops at 512 − its prompt's tokens" in stderr  # ${policy.max_total_sequence_length} resolved
    text = (exp / "nemo.rlvr.yaml").read_text()
    assert "baseline: leave_one_out  # nemo-rl grpo.adv_estimator.use_leave_one_out_baseline: true" in text


@pytest.mark.parametrize(
    ("loo", "normalize", "expected"),
    [  # NeMo RL's tests/unit/algorithms/test_grpo_advantage_estimator.py, the masked sample left out
        ("false", "false", [0.6666667, -0.3333333, -0.3333333]),
        ("false", "true", [1.1546985, -0.5773493, -0.5773493]),
        ("true", "false", [1.0, -0.5, -0.5]),
        ("true", "true", [1.0, -0.7071058, -0.7071058]),
    ],
)
def test_the_imported_advantage_gives_nemo_rls_own_numbers(exp: Path, loo: str, normalize: str, expected: list) -> None:
    """Rewards [1, 1, 0, 0] with the second masked; the overrides set the top-level keys, which
    reach grpo.adv_estimator through its interpolations."""
    overrides = (f"grpo.use_leave_one_out_baseline={loo}", f"grpo.normalize_rewards={normalize}")
    contract, _ = imported(exp, GRPO, *overrides)
    rewards = torch.tensor([1.0, float("nan"), 0.0, 0.0], dtype=torch.float64)
    advantages = group_advantages(rewards, 4, contract.objective)
    assert torch.allclose(advantages[[0, 2, 3]], torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0)


def test_nemo_rls_dapo_recipe_imports_through_its_defaults_once_the_experiment_names_log_by(exp: Path) -> None:
    refused = rlvr("import", "nemo-rl", DAPO, "--into", exp / CONTRACT, "--out", exp / "dapo.rlvr.yaml")
    assert refused.code == 1 and "RLV502" in refused.stderr and not (exp / "dapo.rlvr.yaml").exists()
    (exp / CONTRACT).write_text((exp / CONTRACT).read_text().replace("length:\n", LOG_BY, 1))
    contract, stderr = imported(exp, DAPO, name="dapo.rlvr.yaml")
    o, h, length = contract.objective, contract.hyperparameters, contract.length
    assert (o.advantage.baseline, o.advantage.scale) == ("group_mean", "group_std")  # the recipe turns LOO off
    assert (o.clip.low, o.clip.high, o.clip.dual, o.kl.coef) == (0.2, 0.28, 10.0, 0.0)
    assert [c.weight for c in o.reward.components] == [2.0, 0.4]  # reward_scaling [0, 1] → [-1, 1]: × 2
    assert (h.prompts_per_step, h.mini_batches, h.max_policy_lag, h.schedule.warmup_steps) == (512, 16, 15, 160)
    assert (length.dynamic_sampling.drop_uniform_groups, length.dynamic_sampling.max_rounds) == (True, 10)
    assert length.dynamic_sampling.uniform_on == "verifier_reward"  # NeMo RL compares unshaped_total_reward
    assert length.overlong_penalty.model_dump() == {"buffer_tokens": 2048, "factor": 1.0}  # penalty from the base
    assert (length.max_prompt_tokens, length.max_response_tokens, h.optimizer.lr) == (2048, 16384, 1e-6)
    assert "differs: grpo.reward_shaping.max_response_length: 14336" in stderr
    assert "differs: grpo.reward_scaling: NeMo RL adds -1 to every reward" in stderr


def nemo_rls_reinforce_plus_plus(rewards: torch.Tensor, groups: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ReinforcePlusPlusAdvantageEstimator.compute_advantage's lines with minus_baseline and no KL in
    the reward (NeMo RL nemo_rl/algorithms/advantage_estimator.py): r − its prompt's mean reward,
    then normalised over every token the mask holds; each answer's advantage, read off a token."""
    mean = torch.stack([rewards[groups == g].mean() for g in groups])
    adv = (rewards - mean).unsqueeze(-1).expand(mask.shape)
    adv_mean = (adv * mask).sum() / mask.sum()
    adv_var = ((adv - adv_mean).pow(2) * mask).sum() / mask.sum()
    return ((adv - adv_mean) * adv_var.clamp(min=1e-8).rsqrt())[:, 0]


def test_nemo_rls_prorlv2_recipe_imports_as_reinforce_plus_plus_and_gives_its_advantages(exp: Path) -> None:
    """NeMo RL's published ProRLv2 recipe (REINFORCE++ with baseline, stop-properly at 0.0, IcePop,
    a batch_multiplier of 1.5): it imports, and its advantages are NeMo RL's — each answer
    counted once per token, the population variance floored at 1e-8 — where counting each answer
    once, or adding 1e-8 to the variance, gives other numbers."""
    (exp / CONTRACT).write_text((exp / CONTRACT).read_text().replace("length:\n", LOG_BY, 1))
    contract, stderr = imported(exp, PRORL)
    a, length = contract.objective.advantage, contract.length
    assert (a.baseline, a.scale) == ("group_mean", "none")
    assert a.whiten.model_dump() == {
        "over": "batch_tokens", "std": "population", "epsilon": 1e-8, "epsilon_use": "variance_floor"
    }  # fmt: skip
    assert (length.on_truncated, length.truncation_penalty, length.overlong_penalty) == ("penalize", 0.0, None)
    assert length.dynamic_sampling.uniform_on == "verifier_reward"  # truncated answers verified for the filter
    from rlvr_cli.interop import export_files

    shaped_reward = length.model_copy(
        update={"dynamic_sampling": length.dynamic_sampling.model_copy(update={"uniform_on": "reward"})}
    )
    refused = export_files.mapping(contract.model_copy(update={"length": shaped_reward}), "nemo-rl", 1).refused
    assert [d.key for d in refused] == ["length.dynamic_sampling.uniform_on"]  # NeMo RL compares unshaped rewards
    assert contract.objective.correction.kind == "mis" and contract.objective.clip.high == 0.27
    assert "differs: grpo.batch_multiplier: 1.5" in stderr
    g = torch.Generator().manual_seed(5)
    groups = torch.arange(4).repeat_interleave(4)
    lengths = torch.randint(1, 9, (16,), generator=g)
    mask = (torch.arange(8)[None, :] < lengths[:, None]).double()
    for rewards in (
        torch.randint(0, 2, (16,), generator=g).double() + 0.2 * torch.randint(0, 2, (16,), generator=g),
        1.0 + 1e-5 * torch.rand(16, generator=g, dtype=torch.float64),  # a variance under 1e-8: the floor acts
    ):
        theirs = nemo_rls_reinforce_plus_plus(rewards, groups, mask)
        ours = group_advantages(rewards, 4, contract.objective, mask.sum(dim=1))
        assert torch.allclose(ours, theirs, rtol=0, atol=1e-12), (ours, theirs)
        for other in ({"over": "batch"}, {"epsilon_use": "add_to_variance"}):
            changed = contract.objective.model_copy(
                update={"advantage": a.model_copy(update={"whiten": a.whiten.model_copy(update=other)})}
            )
            differs = not torch.allclose(group_advantages(rewards, 4, changed, mask.sum(dim=1)), theirs, atol=1e-6)
            assert differs or (other == {"epsilon_use": "add_to_variance"} and rewards.var() > 1e-4), other


def test_what_the_contract_cannot_state_is_refused_each_named(exp: Path) -> None:
    overrides = ["grpo.adv_estimator.name=gdpo", "policy.megatron_cfg.enabled=true"]
    overrides += ["loss_fn.use_importance_sampling_correction=true", "policy.train_global_batch_size=500"]
    overrides += ["policy.optimizer.kwargs.lr=${nonsense:1}", "grpo.not_an_option=1", "grpo.async_grpo.enabled=true"]
    done = rlvr("import", "nemo-rl", GRPO, *overrides, "--into", exp / CONTRACT, "--out", exp / "x.rlvr.yaml")
    assert done.code == 1 and not (exp / "x.rlvr.yaml").exists()
    for needle in (
        "no equivalent: grpo.adv_estimator.name: gdpo",
        "no equivalent: policy.megatron_cfg.enabled: true",
        "no equivalent: loss_fn.truncated_importance_sampling_type: null: untruncated weights",
        "no equivalent: policy.train_global_batch_size: 500 does not divide the step's 512 sequences",
        "no equivalent: policy.optimizer.kwargs.lr: ${nonsense:1} (the resolver 'nonsense')",
        "no equivalent: grpo.async_grpo.enabled: true: asynchronous GRPO",  # read, never silently dropped
    ):
        assert needle in done.stderr, done.stderr
    assert "not read (1" in done.stderr and "grpo.not_an_option" in done.stderr  # a misspelt override is seen


def test_a_config_whose_defaults_are_missing_or_circular_is_a_clear_error(exp: Path, tmp_path: Path) -> None:
    lone = tmp_path / "recipe.yaml"
    lone.write_text("defaults: ../../grpo_math_1B.yaml\ngrpo: {num_prompts_per_step: 8}\n")
    done = rlvr("import", "nemo-rl", lone, "--into", exp / CONTRACT)
    assert done.code == 1 and "grpo_math_1B.yaml (the defaults of" in done.stderr and "no such file" in done.stderr
    loop = tmp_path / "loop.yaml"
    loop.write_text("defaults: loop.yaml\n")
    done = rlvr("import", "nemo-rl", loop, "--into", exp / CONTRACT)
    assert done.code == 1 and "its defaults come back to it" in done.stderr
    assert "Traceback" not in done.stderr
    partial = tmp_path / "partial.yaml"
    partial.write_text("grpo: {num_prompts_per_step: 8}\n")  # a recipe without its base
    done = rlvr("import", "nemo-rl", partial, "--into", exp / CONTRACT)
    assert done.code == 1 and "no equivalent: grpo.num_generations_per_prompt: absent" in done.stderr


def test_an_imported_nemo_rl_run_trains_with_its_leave_one_out_advantages(exp: Path) -> None:
    """The imported contract run by `rlvr train`: every recorded advantage is the leave-one-out
    one of its group's recorded rewards (the other rewards' mean and std), not GRPO's."""
    import pyarrow.parquet as pq

    small = ["grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4", "policy.train_global_batch_size=8"]
    small += ["policy.train_micro_batch_size=8", "grpo.max_num_steps=2", "policy.generation.backend=hf"]
    small += ["policy.precision=float32", "policy.max_total_sequence_length=2", "data.max_input_seq_length=64"]
    contract, _ = imported(exp, GRPO, *small)
    assert (contract.objective.advantage.baseline, contract.hyperparameters.sampling.engine) == (
        "leave_one_out",
        "transformers",
    )
    done = rlvr("train", exp / "nemo.rlvr.yaml", "--run-dir", exp / "run", timeout=600)
    assert done.code == 0, done.stderr[-2000:]
    rows = [
        r for shard in sorted((exp / "run" / "records").glob("*.parquet")) for r in pq.read_table(shard).to_pylist()
    ]
    groups: dict[tuple[int, int], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["step"], row["group"]), []).append(row)
    plain = contract.objective.advantage.model_copy(update={"baseline": "group_mean", "scale": "group_std"})
    grpo = contract.objective.model_copy(update={"advantage": plain})
    differs = 0
    for members in groups.values():
        rewards = torch.tensor([r["reward"] for r in members], dtype=torch.float64)
        recorded = torch.tensor([r["advantage"] for r in members], dtype=torch.float64)
        assert torch.allclose(recorded, group_advantages(rewards, len(members), contract.objective), atol=1e-5)
        other = group_advantages(rewards, len(members), grpo)
        differs += not torch.allclose(recorded, other, atol=1e-5)
    assert len(groups) == 4 and differs, "no group told the two baselines apart"


@pytest.mark.parametrize(
    ("kind", "overrides"),
    [
        ("tis", ["loss_fn.truncated_importance_sampling_type=tis", "loss_fn.truncated_importance_sampling_ratio=2.0"]),
        (
            "mis",
            [
                "loss_fn.truncated_importance_sampling_type=icepop",
                "loss_fn.truncated_importance_sampling_ratio=1.5",
                "loss_fn.truncated_importance_sampling_ratio_min=0.8",
            ],
        ),
    ],
)
def test_nemo_rls_importance_correction_imports_as_the_contracts(exp: Path, kind: str, overrides: list[str]) -> None:
    """The imported correction's loss is NeMo RL's, as ClippedPGLossFn writes it for a token-level
    loss: Σ w·max(−A·r, −A·clip(r)) over the global tokens, w = exp(prev − generation) clamped to
    [0, max] (tis) or zeroed outside [min, max] (icepop)."""
    from rlvr_cli.train.objective import policy_loss

    on = ["loss_fn.use_importance_sampling_correction=true", "loss_fn.reference_policy_kl_penalty=0", *overrides]
    contract, _ = imported(exp, GRPO, *on)
    c = contract.objective.correction
    assert (c.kind, c.level) == (kind, "token")
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(6, 5, generator=g, dtype=torch.float64) * 2
    prev = logp + (torch.rand(6, 5, generator=g, dtype=torch.float64) - 0.5) * 0.6
    gen = prev + (torch.rand(6, 5, generator=g, dtype=torch.float64) - 0.5) * 1.6
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 3, 4, 1, 5, 2])[:, None]).double()
    adv = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.75, -0.25], dtype=torch.float64)

    def nemo(low: float, high: float) -> float:
        ratio = torch.exp(logp - prev)
        clip_loss = torch.max(-adv[:, None] * ratio, -adv[:, None] * ratio.clamp(0.8, 1.2))
        w = torch.exp(prev - gen)
        w = w.clamp(0.0, high) if kind == "tis" else torch.where((w >= low) & (w <= high), w, torch.zeros_like(w))
        return float((w * clip_loss * mask).sum() / mask.sum())

    loss, _ = policy_loss(
        logp, prev, logp, adv, mask, contract.objective,
        max_response_tokens=contract.length.max_response_tokens, engine_logp=gen,
    )  # fmt: skip
    bounds = (0.0, 2.0) if kind == "tis" else (0.8, 1.5)
    assert float(loss) == pytest.approx(nemo(*bounds), rel=1e-12)
    assert float(loss) != pytest.approx(nemo(bounds[0], bounds[1] * 1.5), rel=1e-6)  # the bound matters here


def test_a_correction_the_contract_cannot_state_is_refused(exp: Path) -> None:
    base = ["loss_fn.use_importance_sampling_correction=true"]
    for extra, needle in (
        ([], "truncated_importance_sampling_type: null: untruncated weights"),
        (
            ["loss_fn.truncated_importance_sampling_type=tis", "loss_fn.truncated_importance_sampling_ratio=2",
             "loss_fn.truncated_importance_sampling_ratio_min=0.5"],
            "weights clamped from below to 0.5",
        ),
    ):  # fmt: skip
        done = rlvr("import", "nemo-rl", GRPO, *base, *extra, "--into", exp / CONTRACT, "--out", exp / "x.rlvr.yaml")
        assert done.code == 1 and needle in done.stderr, done.stderr


@pytest.mark.parametrize("config", [GRPO, DAPO, PRORL], ids=["grpo_math_1B", "dapo-qwen2.5-7b", "prorlv2"])
def test_a_contract_exported_to_nemo_rl_imports_back_to_the_same_run(exp: Path, tmp_path: Path, config: Path) -> None:
    """Import NeMo RL's config, export the contract as a recipe over grpo_math_1B.yaml, put the
    recipe where NeMo RL's recipes live, import it again: the same objective, batches and lengths."""
    import shutil

    (exp / CONTRACT).write_text((exp / CONTRACT).read_text().replace("length:\n", LOG_BY, 1))
    first, _ = imported(exp, config)
    refused = rlvr("export", exp / "nemo.rlvr.yaml", "--to", "nemo-rl", "--out", tmp_path / "out")
    assert (
        refused.code == 1 and "differs: objective.reward: NeMo RL's environment computes the reward" in refused.stderr
    )
    done = rlvr("export", exp / "nemo.rlvr.yaml", "--to", "nemo-rl", "--out", tmp_path / "out", "--allow-inexact")
    assert done.code == 0, done.stderr
    tree = shutil.copytree(CONFIGS.parents[1], tmp_path / "nemo_rl")
    recipe = tree / "examples" / "configs" / "recipes" / "llm" / "grpo_rlvr.yaml"
    shutil.copy(tmp_path / "out" / "grpo_rlvr.yaml", recipe)
    back = rlvr("import", "nemo-rl", recipe, "--into", exp / "nemo.rlvr.yaml", "--out", exp / "back.rlvr.yaml")
    assert back.code == 0, back.stderr
    second = load(exp / "back.rlvr.yaml")
    assert second.objective.model_dump() == first.objective.model_dump()
    for key in ("group_size", "prompts_per_step", "mini_batches", "updates_per_batch", "max_policy_lag", "max_steps"):
        assert getattr(second.hyperparameters, key) == getattr(first.hyperparameters, key), key
    for key in ("seed", "optimizer", "sampling", "precision"):
        assert getattr(second.hyperparameters, key) == getattr(first.hyperparameters, key), key
    assert second.hyperparameters.schedule.warmup_steps == first.hyperparameters.schedule.warmup_steps
    assert second.length.model_dump() == first.length.model_dump()


def test_hostile_interpolations_end_quickly_with_their_reason(exp: Path, tmp_path: Path) -> None:
    """A config is untrusted input: interpolations that double a string at each level (2^40
    characters), or name each other in a cycle, are refused with the reason, in seconds."""
    import yaml

    bomb = {"k0": "x", **{f"k{i}": f"${{bomb.k{i - 1}}}${{bomb.k{i - 1}}}" for i in range(1, 31)}}
    config = tmp_path / "hostile.yaml"
    config.write_text(yaml.safe_dump({"defaults": str(GRPO), "bomb": bomb}))
    overrides = ["policy.optimizer.kwargs.lr=${bomb.k30}", "policy.max_grad_norm=${a.b}", "a.b=${policy.max_grad_norm}"]
    done = rlvr(
        "import", "nemo-rl", config, *overrides, "--into", exp / CONTRACT, "--out", exp / "x.rlvr.yaml", timeout=60
    )
    assert done.code == 1 and not (exp / "x.rlvr.yaml").exists()
    assert "policy.optimizer.kwargs.lr: ${bomb.k30} (builds a string longer than 100,000 characters)" in done.stderr
    assert "policy.max_grad_norm: ${a.b} (interpolations nested too deep, or a cycle)" in done.stderr


def test_nemo_rls_lora_imports_as_the_adapter_and_exports_back(exp: Path, tmp_path: Path) -> None:
    import shutil

    lora = ["policy.dtensor_cfg.lora_cfg.enabled=true", "policy.dtensor_cfg.lora_cfg.dim=16"]
    lora += [
        "policy.dtensor_cfg.lora_cfg.match_all_linear=false",
        "policy.dtensor_cfg.lora_cfg.target_modules=[q_proj,v_proj]",
    ]
    first, stderr = imported(exp, GRPO, *lora)
    adapter = first.hyperparameters.adapter
    assert (adapter.rank, adapter.alpha, adapter.target_modules, adapter.dropout) == (
        16,
        32.0,
        ["q_proj", "v_proj"],
        0.0,
    )
    assert "differs: policy.dtensor_cfg.lora_cfg.lora_A_init: xavier" in stderr
    excluded = rlvr("import", "nemo-rl", GRPO, *lora, "policy.dtensor_cfg.lora_cfg.exclude_modules=[o_proj]",
                    "--into", exp / CONTRACT, "--out", exp / "x.rlvr.yaml")  # fmt: skip
    assert excluded.code == 1 and "no equivalent: policy.dtensor_cfg.lora_cfg.exclude_modules" in excluded.stderr
    done = rlvr("export", exp / "nemo.rlvr.yaml", "--to", "nemo-rl", "--out", tmp_path / "out", "--allow-inexact")
    assert done.code == 0, done.stderr
    tree = shutil.copytree(CONFIGS.parents[1], tmp_path / "nemo_rl")
    recipe = tree / "examples" / "configs" / "recipes" / "llm" / "grpo_rlvr.yaml"
    shutil.copy(tmp_path / "out" / "grpo_rlvr.yaml", recipe)
    back, _ = imported(exp, recipe, name="back.rlvr.yaml")
    assert back.hyperparameters.adapter == adapter
    plain, _ = imported(exp, GRPO, name="plain.rlvr.yaml")
    assert plain.hyperparameters.adapter is None  # NeMo RL's default trains every weight


def test_a_self_contained_recipe_with_stop_token_ids_imports_and_says_where_it_stops(exp: Path) -> None:
    """NeMo RL's Qwen2.5-Math recipe (no defaults:) ends responses at token id 151645 (<|im_end|>):
    not a refusal, a stated difference that names where the contract's stop tokens are."""
    contract, stderr = imported(exp, QWEN_MATH)
    h = contract.hyperparameters
    assert (h.group_size, h.prompts_per_step, h.max_steps, h.seed, h.schedule.warmup_steps) == (16, 32, 1, 42, 50)
    assert contract.objective.advantage.baseline == "leave_one_out"
    assert "differs: policy.generation.stop_token_ids: [151645]: NeMo RL also ends a response there" in stderr


def test_nemo_rls_cispo_imports_as_the_contracts_and_gives_its_loss(exp: Path, tmp_path: Path) -> None:
    """`loss_fn.use_cispo` (the ratio's bounds as NeMo RL's recipes set them: min 1.0, no floor)
    is `clip.kind: cispo`: ClippedPGLossFn's lines, −A·sg(clamp(ρ, 1 − min, 1 + max))·log π
    averaged over the batch's tokens, give rlvr's loss and gradient; it exports back."""
    from rlvr_cli.interop import export_files
    from rlvr_cli.train.objective import policy_loss

    overrides = ("loss_fn.use_cispo=true", "loss_fn.ratio_clip_min=1.0", "loss_fn.ratio_clip_max=0.1")
    contract, _ = imported(exp, GRPO, *overrides, "loss_fn.reference_policy_kl_penalty=0")
    clip = contract.objective.clip
    assert (clip.kind, clip.low, clip.high, clip.dual, contract.objective.aggregation) == (
        "cispo", 1.0, 0.1, None, "token_mean"
    )  # fmt: skip
    g = torch.Generator().manual_seed(2)
    logp = -torch.rand(6, 5, generator=g, dtype=torch.float64) * 2
    old = logp + (torch.rand(6, 5, generator=g, dtype=torch.float64) - 0.5) * 0.8
    adv = torch.randn(6, 1, generator=g, dtype=torch.float64)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 3, 4, 1, 5, 2])[:, None]).double()
    theirs_logp = logp.clone().requires_grad_(True)
    ratios_clamped = (theirs_logp - old).exp().clamp(1.0 - 1.0, 1.0 + 0.1)
    theirs = ((-adv * ratios_clamped.detach() * theirs_logp) * mask).sum() / mask.sum()  # NeMo RL's lines
    theirs.backward()
    ours_logp = logp.clone().requires_grad_(True)
    ours, _ = policy_loss(ours_logp, old, None, adv[:, 0], mask, contract.objective, max_response_tokens=5)
    ours.backward()
    assert float(ours) == pytest.approx(float(theirs), abs=1e-12)
    assert torch.allclose(ours_logp.grad, theirs_logp.grad, atol=1e-12)
    assert bool(((logp - old).exp()[mask.bool()] > 1.1).any())  # the cap acts
    values = export_files.mapping(contract, "nemo-rl", 1).values
    assert (values["loss_fn.use_cispo"], values["loss_fn.ratio_clip_min"], values["loss_fn.ratio_clip_max"]) == (
        True, 1.0, 0.1
    )  # fmt: skip
