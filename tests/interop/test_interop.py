"""`rlvr import` and `rlvr export` through the CLI: the peers' default configs import into
contracts that validate with every implicit default written out; what the contract cannot state
is refused, each choice listed, nothing written; contract → export → import gives the same
objective back; the default tables are the installed peers' own."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import yaml

from rlvr_cli.contract.load import load
from rlvr_cli.contract.models import Whiten
from rlvr_cli.interop import export_files, trl_map, trl_rloo_map, verl_map
from rlvr_cli.interop.common import flat
from tests.conftest import copy_experiment, rlvr

ROOT = Path(__file__).resolve().parents[2]
VERL_SITE = (
    next((ROOT / ".venv-verl" / "lib").glob("python3*/site-packages/verl"), None)
    if (ROOT / ".venv-verl").exists()
    else None
)
CONTRACT = "experiment.rlvr.yaml"
EPS6 = ("epsilon: 1.0e-4}", "epsilon: 1.0e-6}")
WEIGHT = ("{name: format, weight: 0.2}", "{name: format, weight: 0.25}")


@pytest.fixture
def exp(single_turn: Path, tmp_path: Path) -> Path:
    return copy_experiment(single_turn, tmp_path / "exp")


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_trls_defaults_table_is_the_installed_trls() -> None:
    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    assert trl.__version__.startswith(trl_map.VERSION)
    fields = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}
    for key, default in trl_map.DEFAULTS.items():
        field = fields[key]
        theirs = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
        assert theirs == default, (key, theirs, default)


def test_trls_rloo_defaults_table_is_the_installed_rlooconfigs() -> None:
    """Every option the RLOO mapping reads is an RLOOConfig field with that default, and none of
    the GRPO-only options it leaves out is one."""
    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    fields = {f.name: f for f in dataclasses.fields(trl.RLOOConfig)}
    for key, default in trl_rloo_map.DEFAULTS.items():
        field = fields[key]
        theirs = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
        assert theirs == default, (key, theirs, default)
    assert not set(trl_rloo_map.GRPO_ONLY) & set(fields)


def test_an_rloo_config_imports_as_rloo_and_what_rloo_cannot_state_is_refused(exp: Path, tmp_path: Path) -> None:
    """`rlvr import trl --trainer rloo`: RLOOTrainer's fixed objective written out with where each
    key came from; the imported contract validates; normalize_advantages is the batch whitening;
    reward_clip_range (no equivalent) is refused; a GRPOConfig-only option is listed as not read;
    a misspelt --trainer is a usage error."""
    config = write(tmp_path / "rloo.yaml", {"num_generations": 4, "per_device_train_batch_size": 8, "max_steps": 5})
    done = rlvr("import", "trl", config, "--trainer", "rloo", "--into", exp / CONTRACT)
    assert done.code == 0, done.stderr
    contract = load(exp / "rloo.rlvr.yaml")
    o = contract.objective
    assert (o.advantage.baseline, o.advantage.scale, o.aggregation) == ("leave_one_out", "none", "seq_mean_token_mean")
    assert o.ratio is not None and o.ratio.level == "sequence_sum"
    assert (o.kl.coef, o.kl.estimator, o.kl.placement) == (0.05, "k1", "reward")
    assert (contract.hyperparameters.group_size, contract.hyperparameters.prompts_per_step) == (4, 2)
    assert "trl --trainer rloo" in (exp / "rloo.rlvr.yaml").read_text()
    assert rlvr("validate", exp / "rloo.rlvr.yaml").code == 0
    assert o.advantage.whiten is None
    whiten = write(tmp_path / "whiten.yaml", {"num_generations": 4, "normalize_advantages": True})
    assert rlvr("import", "trl", whiten, "--trainer", "rloo", "--into", exp / CONTRACT).code == 0
    w = load(exp / "whiten.rlvr.yaml").objective.advantage.whiten
    assert w is not None and (w.over, w.std, w.epsilon) == ("batch", "sample", 1e-4)
    bad = write(tmp_path / "bad.yaml", {"reward_clip_range": [-1.0, 1.0], "loss_type": "dapo"})
    refused = rlvr("import", "trl", bad, "--trainer", "rloo", "--into", exp / CONTRACT)
    assert refused.code == 1 and "reward_clip_range" in refused.stdout + refused.stderr
    assert "loss_type" in refused.stderr, refused.stderr
    assert not (exp / "bad.rlvr.yaml").exists()
    wrong = rlvr("import", "trl", config, "--trainer", "ppo", "--into", exp / CONTRACT)
    assert wrong.code == 2 and "choose grpo or rloo" in wrong.stderr


@pytest.mark.skipif(VERL_SITE is None, reason="verl's environment .venv-verl is built by make install")
def test_verls_defaults_table_is_the_installed_verls() -> None:
    generated = yaml.safe_load((VERL_SITE / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text())
    theirs = flat(generated)
    for key, default in verl_map.DEFAULTS.items():
        assert key in theirs, key
        assert theirs[key] == default, (key, theirs[key], default)


def test_trls_default_config_imports_into_a_contract_that_validates(exp: Path) -> None:
    done = rlvr("import", "trl", write(exp / "trl.yaml", {}), "--into", exp)
    assert done.code == 0, done.stderr
    written = exp / "trl.rlvr.yaml"
    assert rlvr("validate", written).code == 0
    contract = load(written)
    o, hp = contract.objective, contract.hyperparameters
    assert (o.aggregation, o.advantage.scale, o.advantage.std, o.advantage.epsilon) == (
        "token_mean",
        "group_std",
        "sample",
        1e-4,
    )
    assert (o.clip.low, o.clip.high, o.kl.coef, hp.group_size, hp.optimizer.lr) == (0.2, 0.2, 0.0, 8, 1e-6)
    text = written.read_text()
    assert "aggregation: token_mean  # trl loss_type: dapo (1.16 default)" in text
    assert "epsilon: 0.0001  # trl adds 1e-4 to the std (not an option)" in text
    assert "verifier: verifier:verify" in text  # the base contract's own sections kept


def test_a_trl_config_s_choices_land_in_the_contract(exp: Path) -> None:
    config = {
        "loss_type": "dr_grpo",
        "scale_rewards": "none",
        "beta": 0.04,
        "use_bias_correction_kl": False,
        "epsilon_high": 0.28,
        "num_iterations": 2,
        "max_steps": 40,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 4,
        "num_generations": 4,
        "reward_weights": [1.0, 0.5],
        "mask_truncated_completions": True,
        "output_dir": "x",
        "logging_steps": 3,
    }
    done = rlvr("import", "trl", write(exp / "drgrpo.json", config), "--into", exp)
    assert done.code == 0, done.stderr
    contract = load(exp / "drgrpo.rlvr.yaml")
    o, hp = contract.objective, contract.hyperparameters
    assert (o.aggregation, o.advantage.scale, o.clip.high, o.kl.coef, o.kl.estimator) == (
        "constant_norm",
        "none",
        0.28,
        0.04,
        "k3",
    )
    assert (hp.updates_per_batch, hp.max_policy_lag, hp.max_steps, hp.prompts_per_step) == (2, 1, 20, 4)
    assert [c.weight for c in o.reward.components] == [1.0, 0.5]
    assert contract.length.on_truncated == "exclude"
    assert "differs: mask_truncated_completions" in done.stderr  # stated, with the relation
    assert "not read (2" in done.stderr and "logging_steps" in done.stderr


def test_what_the_contract_cannot_state_is_refused_and_nothing_written(exp: Path) -> None:
    config = {"loss_type": "gspo", "delta": 1.1, "use_adaptive_entropy": True, "steps_per_generation": 3}
    config["gradient_accumulation_steps"] = 2  # 3 parts of a generation: not whole optimizer steps
    done = rlvr("import", "trl", write(exp / "bad.yaml", config), "--into", exp)
    assert done.code == 1
    for key in ("loss_type", "delta", "use_adaptive_entropy", "steps_per_generation"):
        assert f"no equivalent: {key}" in done.stderr, key
    assert not (exp / "bad.rlvr.yaml").exists()
    assert "Traceback" not in done.stderr


def test_an_import_never_overwrites_a_file(exp: Path) -> None:
    """A config named like the experiment's own contract would replace it: refused, nothing lost."""
    before = (exp / "experiment.rlvr.yaml").read_text()
    done = rlvr("import", "trl", write(exp / "experiment.yaml", {}), "--into", exp / "experiment.rlvr.yaml")
    assert done.code == 2 and "exists" in done.stderr
    assert (exp / "experiment.rlvr.yaml").read_text() == before


def test_a_config_that_is_not_a_mapping_is_a_clear_error(exp: Path) -> None:
    (exp / "list.yaml").write_text("- 1\n- 2\n")
    done = rlvr("import", "trl", exp / "list.yaml", "--into", exp)
    assert done.code == 1 and "not a mapping" in done.stderr
    assert rlvr("import", "trl", exp / "missing.yaml", "--into", exp).code == 2


@pytest.mark.skipif(VERL_SITE is None, reason="verl's environment .venv-verl is built by make install")
def test_verls_default_config_imports_with_grpo_and_refuses_gae(exp: Path) -> None:
    generated = VERL_SITE / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    refused = rlvr("import", "verl", generated, "--into", exp)
    assert refused.code == 1 and "no equivalent: algorithm.adv_estimator: gae" in refused.stderr
    overrides = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.train_batch_size=8"]
    overrides += ["actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.name=vllm"]
    overrides += ["trainer.nonsense=1"]
    done = rlvr("import", "verl", generated, *overrides, "--into", exp, "--out", exp / "verl.rlvr.yaml")
    assert done.code == 0, done.stderr
    assert rlvr("validate", exp / "verl.rlvr.yaml").code == 0
    contract = load(exp / "verl.rlvr.yaml")
    o = contract.objective
    assert (o.advantage.epsilon, o.clip.dual, o.aggregation, o.ratio.denominator) == (  # type: ignore[union-attr]
        1e-6,
        3.0,
        "token_mean",
        "trainer_recomputed",
    )
    assert contract.hyperparameters.optimizer.weight_decay == 0.01  # verl's default, not TRL's
    assert (
        "dual: 3.0  # verl actor_rollout_ref.actor.clip_ratio_c: 3.0: always on" in (exp / "verl.rlvr.yaml").read_text()
    )
    assert "not read (1" in done.stderr and "trainer.nonsense" in done.stderr  # a misspelt override is seen


def test_a_dapo_run_imports_once_the_experiment_names_what_verls_config_cannot(exp: Path) -> None:
    """verl's filter_groups is dynamic sampling, which needs the task fields its acceptance is
    logged by (RLV502): a verl config does not hold them, so the refusal says where they go."""
    config = write(exp / "dapo.yaml", {})
    overrides = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.train_batch_size=8"]
    overrides += ["actor_rollout_ref.actor.ppo_mini_batch_size=8", "algorithm.filter_groups.enable=True"]
    overrides += ["algorithm.filter_groups.max_num_gen_batches=3"]
    refused = rlvr("import", "verl", config, *overrides, "--into", exp, "--out", exp / "dapo.rlvr.yaml")
    assert refused.code == 1 and "RLV502" in refused.stderr
    assert f"state them in {exp / CONTRACT}" in refused.stderr and not (exp / "dapo.rlvr.yaml").exists()
    text = (
        (exp / CONTRACT)
        .read_text()
        .replace("length:\n", "length:\n  dynamic_sampling: {drop_uniform_groups: false, log_by: [difficulty]}\n", 1)
    )
    (exp / CONTRACT).write_text(text)
    done = rlvr("import", "verl", config, *overrides, "--into", exp, "--out", exp / "dapo.rlvr.yaml")
    assert done.code == 0, done.stderr
    sampling = load(exp / "dapo.rlvr.yaml").length.dynamic_sampling
    assert (sampling.drop_uniform_groups, sampling.max_rounds, sampling.log_by) == (True, 3, ["difficulty"])
    assert sampling.uniform_on == "reward"  # verl 0.9.1's default metric: rm_scores, the reward itself
    # what the filter compares: the reward function's score or acc, before the dapo manager's overlong penalty
    buffer = ["reward_model.reward_manager=dapo", "custom_reward_function.overlong_buffer.enable=True"]
    buffer += [
        "custom_reward_function.overlong_buffer.len=1",
        "custom_reward_function.overlong_buffer.penalty_factor=1",
    ]
    for metric, shaped, uniform_on, said in (
        ("reward", True, "reward", None),
        ("score", True, "verifier_reward", None),
        ("acc", True, "verifier_reward", "differs: algorithm.filter_groups.metric: acc"),
        ("acc", False, "reward", "differs: algorithm.filter_groups.metric: acc"),
        ("seq_reward", False, None, "no equivalent: algorithm.filter_groups.metric: seq_reward"),
    ):
        out = exp / f"{metric}-{shaped}.rlvr.yaml"
        extra = [f"algorithm.filter_groups.metric={metric}", *(buffer if shaped else [])]
        done = rlvr("import", "verl", config, *overrides, *extra, "--into", exp / CONTRACT, "--out", out)
        assert (done.code == 0) == (uniform_on is not None), done.stderr
        assert said is None or said in done.stderr, done.stderr
        if uniform_on is not None:
            assert load(out).length.dynamic_sampling.uniform_on == uniform_on, metric
            exported = export_files.mapping(load(out), "verl", 1).values["algorithm.filter_groups.metric"]
            assert exported == {"reward": "reward", "verifier_reward": "score"}[uniform_on]  # and back


def test_the_peers_mini_batches_import_as_optimizer_steps_a_pass_and_export_back(exp: Path, tmp_path: Path) -> None:
    """verl's ppo_mini_batch_size and TRL's steps_per_generation: several optimizer steps on one
    sampled batch, each counted in the lag and the step budget; written back as the peer's."""
    overrides = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.train_batch_size=8"]
    overrides += ["actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_epochs=2"]
    overrides += ["actor_rollout_ref.actor.optim.lr_warmup_steps=3"]  # no micro-batch: the base's 16 is dropped
    done = rlvr("import", "verl", write(exp / "v.yaml", {}), *overrides, "--into", exp, "--out", exp / "v.rlvr.yaml")
    assert done.code == 0, done.stderr
    hp = load(exp / "v.rlvr.yaml").hyperparameters
    assert (hp.prompts_per_step, hp.mini_batches, hp.updates_per_batch, hp.max_policy_lag) == (8, 4, 2, 7)
    assert hp.micro_batch_sequences is None  # the base's 16 does not divide a mini-batch of 8 sequences
    text = (exp / "v.rlvr.yaml").read_text()
    assert text.index("  updates_per_batch:") < text.index("  mini_batches:") < text.index("  max_policy_lag:")
    assert hp.schedule is not None and hp.schedule.warmup_steps == 3 * 8  # verl counts its warm-up in batches
    assert "moves the learning rate once a batch" in done.stderr and "grouped otherwise" in done.stderr
    config = {"num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}
    config |= {"steps_per_generation": 6, "num_iterations": 1, "max_steps": 30}
    done = rlvr("import", "trl", write(exp / "t.yaml", config), "--into", exp / CONTRACT, "--out", exp / "t.rlvr.yaml")
    assert done.code == 0, done.stderr
    hp = load(exp / "t.rlvr.yaml").hyperparameters
    assert (hp.prompts_per_step, hp.micro_batch_sequences, hp.mini_batches, hp.max_policy_lag, hp.max_steps) == (
        6,
        4,
        3,
        2,
        10,
    )
    for to, key, expected in (("verl", "ppo_mini_batch_size", 2), ("trl", "steps_per_generation", 6)):
        out = tmp_path / to
        source = exp / ("v.rlvr.yaml" if to == "verl" else "t.rlvr.yaml")
        made = rlvr("export", source, "--to", to, "--out", out, "--allow-inexact")
        assert made.code == 0, made.stderr
        written = "\n".join(p.read_text() for p in sorted(out.glob("*.yaml")))
        assert f"{key}: {expected}" in written, written


def test_verls_rloo_imports_as_the_leave_one_out_baseline_and_exports_back(exp: Path, tmp_path: Path) -> None:
    generated = VERL_SITE / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    base = ["actor_rollout_ref.rollout.n=4", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    base += ["actor_rollout_ref.rollout.name=vllm"]
    for estimator in ("rloo", "rloo_vectorized", "grpo", "grpo_vectorized"):
        out = exp / f"{estimator}.rlvr.yaml"
        done = rlvr(
            "import",
            "verl",
            generated,
            f"algorithm.adv_estimator={estimator}",
            *base,
            "--into",
            exp / "experiment.rlvr.yaml",
            "--out",
            out,
        )
        assert done.code == 0, done.stderr
        advantage = load(out).objective.advantage
        expected = ("group_mean", "group_std") if estimator.startswith("grpo") else ("leave_one_out", "none")
        assert (advantage.baseline, advantage.scale) == expected, estimator
        assert ("exact within: algorithm.adv_estimator" in done.stderr) == estimator.endswith("_vectorized")
    done = rlvr("export", exp / "rloo.rlvr.yaml", "--to", "verl", "--out", tmp_path / "verl", "--allow-inexact")
    assert done.code == 0, done.stderr
    assert "adv_estimator: rloo_vectorized" in (tmp_path / "verl" / "rlvr.yaml").read_text()
    refused = rlvr("export", exp / "rloo.rlvr.yaml", "--to", "trl", "--out", tmp_path / "trl")
    assert refused.code == 1 and "no equivalent: objective.advantage.baseline: leave_one_out" in refused.stderr


def test_verls_reinforce_plus_plus_baseline_imports_as_whitening_over_tokens_and_exports_back(
    exp: Path, tmp_path: Path
) -> None:
    """REINFORCE++ with baseline: r − the group's mean, then verl's masked_whiten over every response
    token of the batch (tests/interop/test_export_numbers.py computes it with verl's own code)."""
    generated = VERL_SITE / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    base = ["actor_rollout_ref.rollout.n=4", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    base += ["actor_rollout_ref.rollout.name=vllm", "algorithm.adv_estimator=reinforce_plus_plus_baseline"]
    out = exp / "rfpp.rlvr.yaml"
    done = rlvr("import", "verl", generated, *base, "--into", exp / "experiment.rlvr.yaml", "--out", out)
    assert done.code == 0, done.stderr
    assert "exact within: algorithm.adv_estimator" in done.stderr
    a = load(out).objective.advantage
    assert (a.baseline, a.scale) == ("group_mean", "none")
    assert a.whiten.model_dump() == {
        "over": "batch_tokens", "std": "sample", "epsilon": 1e-8, "epsilon_use": "add_to_variance"
    }  # fmt: skip
    done = rlvr("export", out, "--to", "verl", "--out", tmp_path / "verl", "--allow-inexact")
    assert done.code == 0, done.stderr
    assert "adv_estimator: reinforce_plus_plus_baseline" in (tmp_path / "verl" / "rlvr.yaml").read_text()
    contract = load(out)
    for update, key in (
        ({"epsilon_use": "add_to_std"}, "objective.advantage.whiten.epsilon_use"),
        ({"over": "batch"}, "objective.advantage.whiten.over"),
        ({"std": "population"}, "objective.advantage.whiten.std"),
    ):
        advantage = a.model_copy(update={"whiten": a.whiten.model_copy(update=update)})
        changed = contract.model_copy(
            update={"objective": contract.objective.model_copy(update={"advantage": advantage})}
        )
        assert [d.key for d in export_files.mapping(changed, "verl", 1).refused] == [key]
    loo = contract.model_copy(
        update={
            "objective": contract.objective.model_copy(
                update={"advantage": a.model_copy(update={"baseline": "leave_one_out"})}
            )
        }
    )
    assert [d.key for d in export_files.mapping(loo, "verl", 1).refused] == ["objective.advantage.whiten"]


@pytest.mark.skipif(VERL_SITE is None, reason="verl's environment .venv-verl is built by make install")
def test_verls_sapo_imports_as_the_soft_gate_and_exports_back(exp: Path, tmp_path: Path) -> None:
    """verl's loss_mode sapo: the gate's tau_pos/tau_neg, seq-mean-token-mean whatever loss_agg_mode
    says (tests/interop/test_export_numbers.py computes the export with verl's own code); where its
    KL loss follows another loss_agg_mode, one aggregation cannot state both: refused."""
    generated = VERL_SITE / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    base = ["actor_rollout_ref.rollout.n=4", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    base += ["actor_rollout_ref.rollout.name=vllm", "algorithm.adv_estimator=grpo"]
    base += ["actor_rollout_ref.actor.policy_loss.loss_mode=sapo"]
    base += ["actor_rollout_ref.actor.tau_pos=0.9", "actor_rollout_ref.actor.tau_neg=1.6"]
    out = exp / "sapo.rlvr.yaml"
    done = rlvr("import", "verl", generated, *base, "--into", exp / CONTRACT, "--out", out)
    assert done.code == 0, done.stderr
    o = load(out).objective
    assert (o.clip.kind, o.clip.low, o.clip.high, o.clip.dual) == ("sapo", None, None, None)
    assert (o.clip.temperature.positive, o.clip.temperature.negative) == (0.9, 1.6)
    assert o.aggregation == "seq_mean_token_mean"  # verl's default loss_agg_mode is token-mean: sapo does not read it
    assert rlvr("validate", out).code == 0
    done = rlvr("export", out, "--to", "verl", "--out", tmp_path / "verl", "--allow-inexact")
    assert done.code == 0, done.stderr
    written = yaml.safe_load((tmp_path / "verl" / "rlvr.yaml").read_text())["actor_rollout_ref"]["actor"]
    assert (written["policy_loss"]["loss_mode"], written["tau_pos"], written["tau_neg"]) == ("sapo", 0.9, 1.6)
    assert "clip_ratio_low" not in written and written["loss_agg_mode"] == "seq-mean-token-mean"
    kl = ["actor_rollout_ref.actor.use_kl_loss=true"]
    done = rlvr("import", "verl", generated, *base, *kl, "--into", exp / CONTRACT, "--out", exp / "kl.rlvr.yaml")
    assert done.code == 1 and "no equivalent: actor_rollout_ref.actor.loss_agg_mode" in done.stderr, done.stderr
    agreed = [*kl, "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"]
    done = rlvr("import", "verl", generated, *base, *agreed, "--into", exp / CONTRACT, "--out", exp / "kl.rlvr.yaml")
    assert done.code == 0, done.stderr
    contract = load(out)
    for update, key in (({"aggregation": "token_mean"}, "objective.aggregation"),):
        changed = contract.model_copy(update={"objective": contract.objective.model_copy(update=update)})
        assert [d.key for d in export_files.mapping(changed, "verl", 1).refused] == [key]
    assert [d.key for d in export_files.mapping(contract, "nemo-rl", 1).refused] == ["objective.clip.kind"]
    vanilla = [b for b in base if "loss_mode" not in b]  # a PPO config imported over the sapo contract
    done = rlvr("import", "verl", generated, *vanilla, "--into", out, "--out", exp / "ppo.rlvr.yaml")
    assert done.code == 0, done.stderr
    clip = load(exp / "ppo.rlvr.yaml").objective.clip
    assert (clip.kind, clip.temperature, clip.low, clip.high) == (None, None, 0.2, 0.2)  # the peer's clip, whole


@pytest.mark.skipif(VERL_SITE is None, reason="verl's environment .venv-verl is built by make install")
def test_verls_rejection_sampling_imports_as_rejection_and_exports_back(exp: Path, tmp_path: Path) -> None:
    """verl's rollout_rs options (tests/train/test_rejection.py: the masks against verl's own function)."""
    generated = VERL_SITE / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    base = ["actor_rollout_ref.rollout.n=4", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    base += ["actor_rollout_ref.rollout.name=vllm", "algorithm.adv_estimator=grpo"]
    base += ["algorithm.rollout_correction.rollout_rs='token_k1,seq_mean_k3'"]
    base += ["algorithm.rollout_correction.rollout_rs_threshold='0.5_2.0,0.01'"]
    out = exp / "rs.rlvr.yaml"
    done = rlvr("import", "verl", generated, *base, "--into", exp / CONTRACT, "--out", out)
    assert done.code == 0, done.stderr
    rejection = [c.model_dump() for c in load(out).objective.rejection]
    assert rejection == [
        {"estimator": "k1", "over": "token", "low": 0.5, "high": 2.0},
        {"estimator": "k3", "over": "sequence_mean", "low": None, "high": 0.01},
    ]
    done = rlvr("export", out, "--to", "verl", "--out", tmp_path / "verl", "--allow-inexact")
    assert done.code == 0, done.stderr
    written = yaml.safe_load((tmp_path / "verl" / "rlvr.yaml").read_text())["algorithm"]["rollout_correction"]
    assert (written["rollout_rs"], written["rollout_rs_threshold"]) == ("token_k1,seq_mean_k3", "0.5_2.0,0.01")
    for to in ("trl", "nemo-rl"):
        assert "objective.rejection" in [d.key for d in export_files.mapping(load(out), to, 1).refused]
    bypass = ["algorithm.rollout_correction.bypass_mode=true"]  # verl then rejects in the loss, against π_θ
    done = rlvr("import", "verl", generated, *base, *bypass, "--into", exp / CONTRACT, "--out", exp / "b.rlvr.yaml")
    assert done.code == 1 and "no equivalent: algorithm.rollout_correction.rollout_rs" in done.stderr, done.stderr


def test_export_refuses_what_the_peer_cannot_express() -> None:
    dapo = ROOT / "contracts" / "dapo-cpu.rlvr.yaml"
    for to in ("trl", "verl"):
        done = rlvr("export", dapo, "--to", to, "--out", "/nonexistent/never-written")
        assert done.code == 1, done.stderr
        assert "no equivalent: objective.advantage.std: population" in done.stderr
        assert "√((K−1)/K)" in done.stderr
    assert not Path("/nonexistent/never-written").exists()


def test_a_contract_with_the_answers_likelihood_ratio_goes_to_trls_rloo_and_back(exp: Path, tmp_path: Path) -> None:
    """The shipped rloo-cpu (`ratio.level: sequence_sum`): `--to trl` writes an RLOOConfig (which
    TRL builds) that imports back to the same objective; verl and NeMo RL take a sequence ratio
    only as GSPO's mean, so they refuse it by name and write nothing (never the token ratio or
    GSPO's in its place); RLOOTrainer's fixed parts the contract states otherwise are refused."""
    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    rloo = ROOT / "contracts" / "rloo-cpu.rlvr.yaml"
    for to in ("verl", "nemo-rl"):
        done = rlvr("export", rloo, "--to", to, "--out", tmp_path / to, "--allow-inexact")
        assert done.code == 1, (to, done.stderr)
        assert "no equivalent: objective.ratio.level: sequence_sum" in done.stderr, (to, done.stderr)
        assert not (tmp_path / to).exists()
    done = rlvr("export", rloo, "--to", "trl", "--out", tmp_path / "trl", "--allow-inexact")
    assert done.code == 0, done.stderr
    assert "RLOOTrainer" in done.stdout and not (tmp_path / "trl" / "grpo_config.yaml").exists()
    options = yaml.safe_load((tmp_path / "trl" / "rloo_config.yaml").read_text())
    trl.RLOOConfig(output_dir=str(tmp_path / "unused"), use_cpu=True, **options)  # TRL takes every key
    back = rlvr("import", "trl", tmp_path / "trl" / "rloo_config.yaml", "--trainer", "rloo", "--into", exp / CONTRACT)
    assert back.code == 0, back.stderr
    imported, shipped = load(exp / "rloo_config.rlvr.yaml").objective, load(rloo).objective
    assert imported.model_dump(exclude={"correction"}) == shipped.model_dump(exclude={"correction"})
    assert not imported.corrects and not shipped.corrects
    contract = load(rloo)
    for part, update in (
        ("kl", {"coef": 0.01, "estimator": "k3", "placement": "loss"}),
        ("advantage", {"scale": "group_std", "std": "sample"}),
    ):
        changed = getattr(contract.objective, part).model_copy(update=update)
        objective = contract.objective.model_copy(update={part: changed})
        refused = export_files.mapping(contract.model_copy(update={"objective": objective}), "trl", 1).refused
        assert [d.key for d in refused] == [f"objective.{part}"], refused
    for std, refusals in (("sample", []), ("population", ["objective.advantage.whiten"])):  # RLOOTrainer's: sample
        whiten = Whiten(over="batch", std=std, epsilon=1e-4, epsilon_use="add_to_std")
        advantage = contract.objective.advantage.model_copy(update={"whiten": whiten})
        whitened = contract.model_copy(
            update={"objective": contract.objective.model_copy(update={"advantage": advantage})}
        )
        found = export_files.mapping(whitened, "trl", 1)
        assert [d.key for d in found.refused] == refusals and found.values["normalize_advantages"] is True
        for to in ("verl", "nemo-rl"):
            assert "objective.advantage.whiten" in [d.key for d in export_files.mapping(whitened, to, 1).refused]


def round_trip(exp: Path, to: str, tmp_path: Path) -> tuple:
    """The experiment's contract exported to `to` and imported back: (before, after, export's stderr)."""
    done = rlvr("export", exp, "--to", to, "--out", tmp_path / to, "--allow-inexact")
    assert done.code == 0, done.stderr
    exported = tmp_path / to / ("grpo_config.yaml" if to == "trl" else "rlvr.yaml")
    back = rlvr("import", to, exported, "--into", exp, "--out", exp / "back.rlvr.yaml")
    assert back.code == 0, back.stderr
    return load(exp / "experiment.rlvr.yaml"), load(exp / "back.rlvr.yaml"), done.stderr


def test_contract_to_trl_and_back_is_the_same_objective(exp: Path, tmp_path: Path) -> None:
    before, after, stderr = round_trip(exp, "trl", tmp_path)
    assert "differs: objective.reward.on_invalid" in stderr
    assert after.objective.model_dump(exclude={"ratio", "correction"}) == before.objective.model_dump(
        exclude={"ratio", "correction"}
    )
    for key in ("group_size", "prompts_per_step", "updates_per_batch", "max_steps", "seed", "optimizer"):
        assert getattr(after.hyperparameters, key) == getattr(before.hyperparameters, key), key
    assert after.length.max_response_tokens == before.length.max_response_tokens


def test_contract_to_verl_and_back_is_the_same_objective(single_turn: Path, tmp_path: Path) -> None:
    exp = copy_experiment(single_turn, tmp_path / "exp", [EPS6, WEIGHT])
    before, after, stderr = round_trip(exp, "verl", tmp_path)
    assert "exact within: log-ratio" in stderr
    mine, theirs = before.objective.model_dump(), after.objective.model_dump()
    assert theirs["clip"]["dual"] == 1.0e10  # the constant no ratio reaches (verl always dual-clips)
    theirs["clip"]["dual"] = None
    for key in ("reward", "advantage", "clip", "kl", "entropy_coef", "aggregation"):
        assert theirs[key] == mine[key], key
    assert after.hyperparameters.optimizer == before.hyperparameters.optimizer


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


VERL = ROOT / ".venv-verl" / "bin" / "python"


@pytest.mark.skipif(not VERL.exists(), reason="verl's environment .venv-verl is built by make install")
def test_verl_loads_the_export_and_scores_with_the_contracts_verifier(single_turn: Path, tmp_path: Path) -> None:
    """verl's own Hydra composes the exported config over its ppo_trainer, and verl's own reward
    manager, loading the exported reward function, scores as the contract's verifier does."""
    import json
    import os
    import subprocess

    import pyarrow.parquet as pq

    from rlvr_cli.env.builtin.arith import verify
    from rlvr_cli.env.scoring import weighted_reward

    exp = copy_experiment(single_turn, tmp_path / "exp", [EPS6, WEIGHT])
    out = tmp_path / "verl"
    assert rlvr("export", exp, "--to", "verl", "--out", out, "--allow-inexact").code == 0
    ours = {
        k: v
        for k, v in flat(yaml.safe_load((out / "rlvr.yaml").read_text())).items()
        if "." in k and k != "hydra.searchpath"
    }
    rows = pq.read_table(out / "train.parquet").to_pylist()[:3]
    answers = [json.loads(rows[0]["extra_info"]["rlvr_task"])["answer"], "x", "9"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            str(VERL),
            str(Path(__file__).with_name("verl_load.py")),
            str(out),
            json.dumps(list(ours)),
            json.dumps([[row, answer] for row, answer in zip(rows, answers, strict=True)]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    assert theirs["composed"] == ours  # every exported key is what verl's loader composed
    contract = load(exp / "experiment.rlvr.yaml")
    for row, answer, got in zip(rows, answers, theirs["scores"], strict=True):
        verdict = verify(json.loads(row["extra_info"]["rlvr_task"]), answer)
        assert got["reward_score"] == pytest.approx(weighted_reward(contract, verdict)), (answer, got)
    assert {s["reward_score"] for s in theirs["scores"]} != {0.0}  # a right answer scores


def test_trl_trains_on_the_export_with_the_contracts_verifier(single_turn: Path, tmp_path: Path) -> None:
    """TRL's own GRPOTrainer runs two steps on what `rlvr export --to trl` wrote (config, one
    reward function per component, dataset): TRL's logged reward is the contract's weighted sum."""
    import json
    import subprocess

    pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    out = tmp_path / "trl"
    assert rlvr("export", single_turn, "--to", "trl", "--out", out, "--allow-inexact").code == 0
    script = Path(__file__).with_name("trl_run.py")
    done = subprocess.run(
        [sys.executable, str(script), str(out), str(single_turn / "model"), "2"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [row for row in json.loads(done.stdout.strip().splitlines()[-1]) if "reward" in row]
    assert len(steps) == 2
    for row in steps:
        weighted = row["rewards/correct/mean"] * 1.0 + row["rewards/format/mean"] * 0.2
        assert row["reward"] == pytest.approx(weighted, abs=1e-6)
    assert any(row["rewards/format/mean"] > 0 for row in steps)  # the verifier's components reached TRL


def test_numbers_in_exponent_form_and_a_training_arguments_dump_import(exp: Path) -> None:
    """`learning_rate: 1e-6` is a number as TRL reads it (YAML 1.1 would make it a string), and
    the full `GRPOConfig.to_dict()` dump imports with its 100-odd other keys listed as not read."""
    import json

    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    (exp / "sci.yaml").write_text("learning_rate: 1e-6\nbeta: 4e-2\nuse_bias_correction_kl: false\n")
    assert rlvr("import", "trl", exp / "sci.yaml", "--into", exp).code == 0
    contract = load(exp / "sci.rlvr.yaml")
    assert (contract.hyperparameters.optimizer.lr, contract.objective.kl.coef) == (1e-6, 0.04)
    args = trl.GRPOConfig(output_dir="/tmp/unused", use_cpu=True, loss_type="grpo", num_generations=4)
    (exp / "dump.json").write_text(json.dumps(args.to_dict(), default=str))
    done = rlvr("import", "trl", exp / "dump.json", "--into", exp / "experiment.rlvr.yaml")
    assert done.code == 0, done.stderr
    assert load(exp / "dump.rlvr.yaml").objective.aggregation == "seq_mean_token_mean"
    assert "output_dir" in done.stderr  # read, listed as not part of the objective


def test_a_malformed_override_is_a_usage_error(exp: Path) -> None:
    done = rlvr("import", "verl", write(exp / "v.yaml", {}), "algorithm.adv_estimator", "--into", exp)
    assert done.code == 2 and "is not key=value" in done.stderr


def test_trls_peft_options_table_is_the_installed_trls_model_config() -> None:
    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    fields = {f.name: f.default for f in dataclasses.fields(trl.ModelConfig)}
    assert {key: fields[key] for key in trl_map.PEFT_DEFAULTS} == trl_map.PEFT_DEFAULTS


def test_a_trl_lora_run_imports_as_the_adapter_trls_get_peft_config_builds(exp: Path) -> None:
    """`use_peft` with its lora_* options (what `trl grpo --config` reads) trains an adapter: the
    contract's is the LoraConfig TRL builds from them; unset targets are peft's default for the
    policy's model type; what plain LoRA cannot state is refused; use_peft off trains every weight
    even over a base contract with an adapter."""
    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    from trl.trainer.utils import get_peft_config

    options = {
        "use_peft": True,
        "lora_r": 8,
        "lora_alpha": 24,
        "lora_dropout": 0.1,
        "lora_target_modules": ["q_proj", "o_proj"],
    }
    done = rlvr("import", "trl", write(exp / "lora.yaml", options), "--into", exp / "experiment.rlvr.yaml")
    assert done.code == 0, done.stderr
    adapter = load(exp / "lora.rlvr.yaml").hyperparameters.adapter
    theirs = get_peft_config(trl.ModelConfig(**options))
    assert adapter is not None and (adapter.rank, adapter.alpha, adapter.dropout) == (
        theirs.r,
        theirs.lora_alpha,
        theirs.lora_dropout,
    )
    assert set(adapter.target_modules) == set(theirs.target_modules) and adapter.bias == theirs.bias == "none"
    assert "use_peft" not in done.stderr  # read, not listed as unread

    done = rlvr("import", "trl", write(exp / "unset.yaml", {"use_peft": True}), "--into", exp / "experiment.rlvr.yaml")
    assert done.code == 0, done.stderr
    adapter = load(exp / "unset.rlvr.yaml").hyperparameters.adapter
    assert adapter is not None and adapter.target_modules == ["q_proj", "v_proj"]  # peft's for llama
    assert (adapter.rank, adapter.alpha, adapter.dropout) == (16, 32.0, 0.05)  # ModelConfig's defaults

    done = rlvr(
        "import",
        "trl",
        write(exp / "dora.yaml", {"use_peft": True, "use_dora": True}),
        "--into",
        exp / "experiment.rlvr.yaml",
    )
    assert done.code == 1 and "no equivalent: use_dora" in done.stderr and not (exp / "dora.rlvr.yaml").exists()

    done = rlvr("import", "trl", write(exp / "full.yaml", {"use_peft": False}), "--into", exp / "lora.rlvr.yaml")
    assert done.code == 0, done.stderr
    assert load(exp / "full.rlvr.yaml").hyperparameters.adapter is None


def test_an_exported_adapter_imports_back_from_the_peft_config_beside_the_trl_config(exp: Path) -> None:
    """`rlvr export --to trl` writes the adapter as peft_config.yaml (GRPOTrainer's peft_config)
    beside grpo_config.yaml; `rlvr import trl` reads it back (beside the config, or from
    --peft-config), to the same adapter. A keyword plain LoRA cannot state, one peft does not know,
    or an adapter stated twice (use_peft too) is refused, and nothing is written."""
    peft = pytest.importorskip("peft", reason="peft is the lora extra (make install installs it)")
    stated = (
        "{kind: lora, rank: 4, alpha: 8, dropout: 0.05, target_modules: [q_proj, v_proj], bias: all, init: gaussian}"
    )
    text = (exp / "experiment.rlvr.yaml").read_text()
    (exp / "lora-in.rlvr.yaml").write_text(
        text.replace("  precision: fp32\n", f"  precision: fp32\n  adapter: {stated}\n")
    )
    original = load(exp / "lora-in.rlvr.yaml").hyperparameters.adapter
    exported = rlvr("export", exp / "lora-in.rlvr.yaml", "--to", "trl", "--out", exp / "trl", "--allow-inexact")
    assert exported.code == 0, exported.stderr
    kwargs = yaml.safe_load((exp / "trl" / "peft_config.yaml").read_text())
    theirs = peft.LoraConfig(**kwargs)  # what GRPOTrainer is given
    assert (theirs.r, theirs.lora_alpha, theirs.bias, theirs.init_lora_weights) == (4, 8, "all", "gaussian")

    into = exp / "experiment.rlvr.yaml"
    back = rlvr("import", "trl", exp / "trl" / "grpo_config.yaml", "--into", into, "--out", exp / "back.rlvr.yaml")
    assert back.code == 0, back.stderr
    assert "reading the adapter from" in back.stderr and "peft_config.yaml" in back.stderr
    assert load(exp / "back.rlvr.yaml").hyperparameters.adapter == original

    (exp / "elsewhere.yaml").write_text(yaml.safe_dump(kwargs))
    config = write(exp / "alone.yaml", yaml.safe_load((exp / "trl" / "grpo_config.yaml").read_text()))
    given = rlvr("import", "trl", config, "--into", into, "--peft-config", exp / "elsewhere.yaml")
    assert given.code == 0, given.stderr
    assert load(exp / "alone.rlvr.yaml").hyperparameters.adapter == original

    for name, extra, said in [
        ("dora", {"use_dora": True}, "peft use_dora"),
        ("typo", {"lora_rank": 4}, "not a LoraConfig keyword"),
        ("patterns", {"rank_pattern": {"q_proj": 8}}, "peft rank_pattern"),
    ]:
        (exp / f"{name}-peft.yaml").write_text(yaml.safe_dump({**kwargs, **extra}))
        out = exp / f"{name}.rlvr.yaml"
        refused = rlvr(
            "import", "trl", config, "--into", into, "--peft-config", exp / f"{name}-peft.yaml", "--out", out
        )
        assert refused.code == 1 and said in refused.stderr and not out.exists(), refused.stderr
    twice = write(exp / "twice.yaml", {**yaml.safe_load(config.read_text()), "use_peft": True})
    refused = rlvr("import", "trl", twice, "--into", into, "--peft-config", exp / "elsewhere.yaml")
    assert refused.code == 1 and "say which adapter trains" in refused.stderr, refused.stderr


def test_a_verl_lora_run_imports_as_the_adapter_verls_engine_builds(exp: Path) -> None:
    """actor_rollout_ref.model.lora_rank > 0 trains the LoraConfig verl's FSDP engine builds
    (lora_alpha, target_modules, no dropout, bias none); exclude_modules has no equivalent; rank 0
    trains every weight."""
    config = write(
        exp / "verl.yaml",
        {
            "algorithm": {"adv_estimator": "grpo"},
            "actor_rollout_ref": {"rollout": {"n": 4, "name": "vllm"}, "actor": {"ppo_mini_batch_size": 8}},
            "data": {"train_batch_size": 8},
        },
    )
    into = exp / "experiment.rlvr.yaml"
    lora = ["actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.lora_alpha=64"]
    done = rlvr("import", "verl", config, *lora, "--into", into, "--out", exp / "lora.rlvr.yaml")
    assert done.code == 0, done.stderr
    adapter = load(exp / "lora.rlvr.yaml").hyperparameters.adapter
    assert adapter is not None
    assert (adapter.rank, adapter.alpha, adapter.dropout, adapter.target_modules) == (32, 64.0, 0.0, "all-linear")
    named = [*lora, "actor_rollout_ref.model.target_modules=[q_proj,v_proj]"]
    done = rlvr("import", "verl", config, *named, "--into", into, "--out", exp / "named.rlvr.yaml")
    assert done.code == 0 and load(exp / "named.rlvr.yaml").hyperparameters.adapter.target_modules == [  # type: ignore[union-attr]
        "q_proj",
        "v_proj",
    ]
    excluded = [*lora, "actor_rollout_ref.model.exclude_modules=[o_proj]"]
    done = rlvr("import", "verl", config, *excluded, "--into", into, "--out", exp / "x.rlvr.yaml")
    assert done.code == 1 and "no equivalent: actor_rollout_ref.model.exclude_modules" in done.stderr
    done = rlvr("import", "verl", config, "--into", exp / "lora.rlvr.yaml", "--out", exp / "full.rlvr.yaml")
    assert done.code == 0 and load(exp / "full.rlvr.yaml").hyperparameters.adapter is None


def test_an_adapter_exports_to_verl_and_imports_back_the_same(single_turn: Path, tmp_path: Path) -> None:
    """The adapter is part of what trains: exported as verl's model.lora_* keys, imported back
    equal; a dropout verl's LoRA lacks is refused rather than written as a run without it."""
    from tests.train.test_adapter import LORA, with_adapter

    adapter = with_adapter(LORA.replace("all-linear", "[q_proj, v_proj]"))
    exp = copy_experiment(single_turn, tmp_path / "exp", [EPS6, WEIGHT, adapter])
    before, after, _ = round_trip(exp, "verl", tmp_path)
    assert before.hyperparameters.adapter is not None
    assert after.hyperparameters.adapter == before.hyperparameters.adapter
    (exp / "experiment.rlvr.yaml").write_text(
        (exp / "experiment.rlvr.yaml").read_text().replace("dropout: 0.0", "dropout: 0.05")
    )
    done = rlvr(
        "export", exp / "experiment.rlvr.yaml", "--to", "verl", "--out", tmp_path / "dropout", "--allow-inexact"
    )
    assert done.code == 1 and "no equivalent: hyperparameters.adapter.dropout" in done.stderr


def test_an_adapter_exports_to_trl_as_the_loraconfig_grpotrainer_takes(single_turn: Path, tmp_path: Path) -> None:
    peft = pytest.importorskip("peft", reason="peft is the lora extra (make install installs it)")
    from tests.train.test_adapter import LORA, with_adapter

    spec = LORA.replace("dropout: 0.0", "dropout: 0.05").replace("init: default", "init: gaussian")
    exp = copy_experiment(single_turn, tmp_path / "exp", [with_adapter(spec)])
    done = rlvr("export", exp, "--to", "trl", "--out", tmp_path / "trl", "--allow-inexact")
    assert done.code == 0, done.stderr
    assert "hyperparameters.adapter" not in done.stderr and "peft_config.yaml" in done.stdout
    config = peft.LoraConfig(**yaml.safe_load((tmp_path / "trl" / "peft_config.yaml").read_text()))
    adapter = load(exp / "experiment.rlvr.yaml").hyperparameters.adapter
    assert (config.r, config.lora_alpha, config.lora_dropout, config.bias) == (4, 8, 0.05, "none")
    assert config.target_modules == adapter.target_modules == "all-linear"  # type: ignore[union-attr]
    assert config.init_lora_weights == "gaussian" and config.task_type == "CAUSAL_LM"
    assert not (tmp_path / "full").exists()
    full = rlvr(
        "export", single_turn / "experiment.rlvr.yaml", "--to", "trl", "--out", tmp_path / "full", "--allow-inexact"
    )
    assert full.code == 0 and not (tmp_path / "full" / "peft_config.yaml").exists()  # every weight trains: no adapter


@pytest.mark.parametrize(
    ("peer", "setting", "needle"),
    [
        ("trl", "beta: abc", "no equivalent: beta: abc: not a number"),
        ("trl", "num_iterations: two", "no equivalent: num_iterations: two: not an integer"),
        ("trl-peft", "lora_alpha: abc", "no equivalent: peft lora_alpha: abc: not a number"),
        ("verl", "actor_rollout_ref.rollout.n=abc", "no equivalent: actor_rollout_ref.rollout.n: abc: not an integer"),
        ("verl", "actor_rollout_ref.actor.use_kl_loss=yes", "use_kl_loss: yes: not true or false"),
        ("verl", "actor_rollout_ref.model.lora_rank=8", ""),  # well typed: imports
        ("nemo-rl", "policy.max_grad_norm=abc", "no equivalent: policy.max_grad_norm: abc: not a number"),
        ("nemo-rl", "grpo.overlong_filtering=maybe", "grpo.overlong_filtering: maybe: not true or false"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_by_name_never_a_crash(
    exp: Path, peer: str, setting: str, needle: str
) -> None:
    """A peer's config is untrusted input: a string where the mapping computes with a number was
    an internal error ('a bug in rlvr'); now it is refused, named, and nothing is written."""
    nemo = ROOT / "tests" / "interop" / "nemo_rl" / "examples" / "configs" / "grpo_math_1B.yaml"
    verl = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.train_batch_size=8"]
    verl += ["actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.name=vllm"]
    out = ["--into", exp / CONTRACT, "--out", exp / "x.rlvr.yaml"]
    if peer == "trl":
        done = rlvr("import", "trl", write(exp / "t.yaml", {"num_generations": 4, **yaml.safe_load(setting)}), *out)
    elif peer == "trl-peft":
        peft = write(exp / "peft.yaml", yaml.safe_load(setting))
        done = rlvr("import", "trl", write(exp / "t.yaml", {"num_generations": 4}), "--peft-config", peft, *out)
    elif peer == "verl":
        done = rlvr("import", "verl", write(exp / "v.yaml", {}), *verl, setting, *out)
    else:
        done = rlvr("import", "nemo-rl", nemo, setting, *out)
    if not needle:
        assert done.code == 0, done.stderr
        return
    assert done.code == 1 and needle in done.stderr, done.stderr
    assert "internal error" not in done.stderr and not (exp / "x.rlvr.yaml").exists()


def test_a_kl_weighed_by_the_ratio_exports_only_where_the_peer_weighs_it() -> None:
    """`kl.weight: ratio` is TRL's use_bias_correction_kl; verl's and NeMo RL's KL losses are never
    multiplied by the ratio (refused), and NeMo RL's score-function weight is said to be release-bound."""
    contract = load(ROOT / "contracts" / "grpo-cpu.rlvr.yaml")
    for weight in ("ratio", "score_function", None):
        kl = contract.objective.kl.model_copy(update={"weight": weight})
        weighed = contract.model_copy(update={"objective": contract.objective.model_copy(update={"kl": kl})})
        found = {to: export_files.mapping(weighed, to, 1) for to in ("trl", "verl", "nemo-rl")}
        refused = {to: [d.key for d in m.refused if d.key == "objective.kl.weight"] for to, m in found.items()}
        assert found["trl"].values["use_bias_correction_kl"] is (weight == "ratio")
        assert refused == {"trl": ["objective.kl.weight"] if weight == "score_function" else [],
                           "verl": ["objective.kl.weight"] if weight else [],
                           "nemo-rl": ["objective.kl.weight"] if weight == "ratio" else []}  # fmt: skip
        said = [d.key for d in found["nemo-rl"].inexact]
        assert ("objective.kl.weight" in said) == (weight == "score_function")
