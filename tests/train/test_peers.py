"""The objective against a peer's own code on shared tensors, in float64: TRL 1.16's
`GRPOTrainer._compute_loss` (the `peers` extra) is run on the log-probs, old log-probs,
advantages and mask rlvr's `policy_loss` gets — the trainer's state it reads given as plain
attributes, its model forward replaced by the shared log-probs — and the two losses and their
gradients with respect to the log-probs must be the same numbers. Covered: TRL's loss types that
are a contract's aggregation, the token- and sequence-level ratio (GSPO), and TRL's vLLM
importance-sampling weights multiplying the clipped loss. (TRL computes those weights inline in
its generation step, not in a function one can call: their values are checked by hand in
test_off_policy.py; here, where they enter the loss.)"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from rlvr_cli.contract.models import Objective
from rlvr_cli.contract.off_policy import Correction
from rlvr_cli.train.objective import correction_weights, policy_loss

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / ".venv-verl" / "bin" / "python"  # verl needs ray and an older transformers: its own environment
#: the contract's aggregation → verl's loss_agg_mode of the same number
VERL_AGG = {
    "token_mean": "token-mean",
    "seq_mean_token_mean": "seq-mean-token-mean",
    "seq_mean_token_sum": "seq-mean-token-sum",
}
CORRECTIONS = [
    Correction(kind="tis", level="token", cap=1.3),
    Correction(kind="tis", level="sequence", cap=2.0),
    Correction(kind="mis", level="token", low=0.7, high=1.4),
    Correction(kind="mis", level="sequence", low=0.5, high=2.0),
]

B, P, T = 6, 3, 5
#: TRL's loss_type → the contract's aggregation that is the same number
LOSS_TYPES = {"grpo": "seq_mean_token_mean", "bnpo": "token_mean", "dapo": "token_mean", "dr_grpo": "constant_norm"}
LOSS_TYPES["luspo"] = "seq_mean_token_sum"  # LUSPO: each answer's summed token loss, averaged over answers
VESPO_DEFAULTS = {"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0}
#: an objective's reward and advantage the loss tests share (one component, group-centred, no scale)
PLAIN = {
    "reward": {"unit": "response", "components": [{"name": "c", "weight": 1.0}], "on_invalid": "exclude"},
    "advantage": {"baseline": "group_mean", "scale": "none"},
}


def shared(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    lengths = torch.tensor([5, 3, 4, 1, 5, 2])
    return {
        "logp": logp,
        "old": logp + (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.5) * 0.8,  # ratios well past the clip
        "engine": logp + (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.5) * 1.2,
        "adv": torch.randn(B, generator=g, dtype=torch.float64),
        "mask": (torch.arange(T)[None, :] < lengths[:, None]).double(),
        "ref": logp + (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.5) * 0.6,
    }


def trl_loss(
    t: dict[str, torch.Tensor],
    loss_type: str,
    level: str,
    weights: torch.Tensor | None,
    args: Any = None,
    accumulate: int = 1,
    beta: float = 0.0,
    bias_correction: bool = False,
    sampled: torch.Tensor | None = None,
) -> tuple:
    """TRL's `_compute_loss` on the shared tensors: its loss and d loss / d logp; `args` (a
    GRPOConfig) gives the clip range, else 0.2 / 0.28; `beta` its KL (k3 to `ref`), multiplied by
    the ratio with `bias_correction` (use_bias_correction_kl)."""
    pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    from accelerate import Accelerator
    from trl.trainer.grpo_trainer import GRPOTrainer

    logp = t["logp"].clone().requires_grad_(True)
    trainer: Any = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, t.get("entropy", torch.zeros_like(logp)), None),
        top_entropy_quantile=getattr(args, "top_entropy_quantile", 1.0),
        get_high_entropy_mask=lambda *a: GRPOTrainer.get_high_entropy_mask(trainer, *a),
        off_policy_mask_threshold=getattr(args, "off_policy_mask_threshold", None),
        get_off_policy_mask=GRPOTrainer.get_off_policy_mask,  # a static method: TRL's own
        importance_sampling_level=level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=args.epsilon if args else 0.2,
        epsilon_high=(args.epsilon_high or args.epsilon) if args else 0.28,
        args=SimpleNamespace(
            delta=getattr(args, "delta", None),
            use_bias_correction_kl=bias_correction,
            steps_per_generation=1,
            sapo_temperature_pos=getattr(args, "sapo_temperature_pos", 1.0),
            sapo_temperature_neg=getattr(args, "sapo_temperature_neg", 1.05),
            **{k: getattr(args, k, v) for k, v in VESPO_DEFAULTS.items()},
        ),
        get_gamma_weights=GRPOTrainer.get_gamma_weights,  # a static method: TRL's own
        use_vllm=weights is not None,
        vllm_importance_sampling_correction=weights is not None,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=accumulate,
        max_completion_length=T,
        accelerator=Accelerator(cpu=True),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
    )
    rows = t["logp"].shape[0]
    inputs = {
        "prompt_ids": torch.ones(rows, P, dtype=torch.long),
        "prompt_mask": torch.ones(rows, P, dtype=torch.long),
        "completion_ids": torch.ones(rows, T, dtype=torch.long),
        "completion_mask": t["mask"],
        "advantages": t["adv"],
        "old_per_token_logps": t["old"],
        "num_items_in_batch": t["mask"].sum(),
    }
    if weights is not None:
        inputs["importance_sampling_ratio"] = weights
    if sampled is not None:  # vLLM's log-probs, which trl's off-policy mask compares with π_θ
        inputs["sampling_per_token_logps"] = sampled
    if beta:
        inputs["ref_per_token_logps"] = t["ref"]
    loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    loss.backward()
    return float(loss.detach()), logp.grad


def rlvr_loss(
    t: dict[str, torch.Tensor], aggregation: str, level: str, correction: Correction | None, dual: float | None = None
) -> tuple:
    objective = Objective.model_validate(
        {
            **PLAIN,
            "clip": {"low": 0.2, "high": 0.28, "dual": dual},
            "kl": {"coef": 0.0},
            "aggregation": aggregation,
            "ratio": {"level": level, "denominator": "trainer_recomputed"},
            "correction": correction.model_dump() if correction else None,
        }
    )
    logp = t["logp"].clone().requires_grad_(True)
    engine = t["engine"] if correction is not None else None
    loss, _ = policy_loss(
        logp, t["old"], None, t["adv"], t["mask"], objective, max_response_tokens=T, engine_logp=engine
    )
    loss.backward()
    return float(loss.detach()), logp.grad


def same(ours: tuple, theirs: tuple) -> None:
    assert ours[0] == pytest.approx(theirs[0], abs=1e-12, rel=1e-12)
    assert torch.allclose(ours[1], theirs[1], atol=1e-12, rtol=1e-10), (ours[1], theirs[1])


@pytest.mark.parametrize("loss_type", sorted(LOSS_TYPES))
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_loss_and_its_gradient_equal_trls(loss_type: str, level: str) -> None:
    for seed in range(3):
        t = shared(seed)
        same(rlvr_loss(t, LOSS_TYPES[loss_type], level, None), trl_loss(t, loss_type, level, None))


@pytest.mark.parametrize("correction", CORRECTIONS, ids=lambda c: f"{c.kind}-{c.level}")
def test_importance_weights_enter_the_loss_as_trls_do(correction: Correction) -> None:
    for seed in range(3):
        t = shared(seed)
        weights = correction_weights(t["old"], t["engine"], t["mask"], correction)
        assert weights is not None and bool((weights[t["mask"].bool()] != 1).any())
        theirs = trl_loss(t, "dapo", "token", weights)
        same(rlvr_loss(t, "token_mean", "token", correction), theirs)
        unweighted = trl_loss(t, "dapo", "token", None)
        assert abs(theirs[0] - unweighted[0]) > 1e-6  # the weights change the number


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_kl_weighed_by_the_ratio_is_trls_bias_corrected_kl(loss_type: str, level: str) -> None:
    """`kl: {coef, estimator: k3, placement: loss, weight: ratio}` is GRPOTrainer's KL with
    use_bias_correction_kl (its 1.16 default): k3 × π_θ/π_old at the ratio's level, the
    gradient through both; `weight: none` is TRL's without it, and the two differ."""
    objective = {
        **PLAIN,
        "clip": {"low": 0.2, "high": 0.28},
        "aggregation": LOSS_TYPES[loss_type],
        "ratio": {"level": level, "denominator": "trainer_recomputed"},
    }
    for seed in range(2):
        t = shared(seed)
        found = {}
        for weight, corrected in (("ratio", True), ("none", False)):
            kl = {"coef": 0.04, "estimator": "k3", "placement": "loss", "weight": weight}
            logp = t["logp"].clone().requires_grad_(True)
            loss, _ = policy_loss(
                logp, t["old"], t["ref"], t["adv"], t["mask"], Objective.model_validate({**objective, "kl": kl}),
                max_response_tokens=T,
            )  # fmt: skip
            loss.backward()
            found[weight] = (float(loss.detach()), logp.grad)
            same(found[weight], trl_loss(t, loss_type, level, None, beta=0.04, bias_correction=corrected))
        assert not torch.allclose(found["ratio"][1], found["none"][1], atol=1e-6)  # the weight changes the gradient


def test_cispo_is_trls_cispo_loss() -> None:
    """`clip: {kind: cispo, low: 1.0, high: h}` is GRPOTrainer's loss_type cispo with epsilon_high
    1 + h (TRL caps the weight at epsilon_high itself, with no floor): −sg(min(ρ, 1+h))·A·log π,
    token_mean; the loss and gradient equal TRL's, the cap acts on some tokens, and PPO's clip
    with the same range gives another gradient."""
    from rlvr_cli.train.objective import importance_ratio

    objective = {
        **PLAIN,
        "kl": {"coef": 0.0},
        "aggregation": "token_mean",
    }
    cispo = Objective.model_validate({**objective, "clip": {"low": 1.0, "high": 0.1, "kind": "cispo"}})
    ppo = Objective.model_validate({**objective, "clip": {"low": 0.2, "high": 0.1}})
    args = SimpleNamespace(epsilon=0.2, epsilon_high=1.1)
    for seed in range(3):
        t = shared(seed)
        theirs = trl_loss(t, "cispo", "token", None, args)
        same(ours_on(t, cispo), theirs)
        assert bool((importance_ratio(t["logp"], t["old"], t["mask"], "token")[t["mask"].bool()] > 1.1).any())
        assert not torch.allclose(ours_on(t, ppo)[1], theirs[1], atol=1e-6)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_sapo_is_trls_sapo_loss(level: str) -> None:
    """`clip: {kind: sapo, temperature: {positive, negative}}` is GRPOTrainer's loss_type sapo with
    sapo_temperature_pos/neg: −A·σ(τ(ρ − 1))·4/τ per token, each answer's token mean averaged; the
    loss and gradient equal TRL's at either ratio level (rlvr's per-answer ratio in GSPO's token
    form, TRL's broadcast), and other temperatures or PPO's clip give another gradient."""
    objective = {
        **PLAIN,
        "kl": {"coef": 0.0},
        "aggregation": "seq_mean_token_mean",
        "ratio": {"level": level, "denominator": "trainer_recomputed"},
    }
    tau = {"positive": 1.5, "negative": 3.0}
    sapo = Objective.model_validate({**objective, "clip": {"kind": "sapo", "temperature": tau}})
    swapped = Objective.model_validate(
        {**objective, "clip": {"kind": "sapo", "temperature": {"positive": 3.0, "negative": 1.5}}}
    )
    ppo = Objective.model_validate({**objective, "clip": {"low": 0.2, "high": 0.28}})
    args = SimpleNamespace(epsilon=0.2, epsilon_high=0.28, sapo_temperature_pos=1.5, sapo_temperature_neg=3.0)
    for seed in range(3):
        t = shared(seed)
        theirs = trl_loss(t, "sapo", level, None, args)
        same(ours_on(t, sapo), theirs)
        assert not torch.allclose(ours_on(t, swapped)[1], theirs[1], atol=1e-6)
        assert not torch.allclose(ours_on(t, ppo)[1], theirs[1], atol=1e-6)


@pytest.mark.parametrize("against", ["engine", "old"])
def test_the_off_policy_mask_is_trls(against: str) -> None:
    """`off_policy_mask: {threshold: δ, against}` is TRL's off_policy_mask_threshold (DeepSeek-V3.2's
    OPSM): an answer with A < 0 whose mean log π_x − log π_θ exceeds δ loses its policy loss, π_x
    vLLM's log-probs (`sampling_per_token_logps`) or the old ones; here some answers are masked,
    some with A < 0 kept, and the loss differs from the unmasked one."""
    from rlvr_cli.train.objective import off_policy_keep

    objective = {
        **PLAIN,
        "clip": {"low": 0.2, "high": 0.28},
        "kl": {"coef": 0.04, "estimator": "k3", "placement": "loss"},
        "aggregation": "token_mean",
    }
    masked = Objective.model_validate({**objective, "off_policy_mask": {"threshold": 0.02, "against": against}})
    args = SimpleNamespace(epsilon=0.2, epsilon_high=0.28, off_policy_mask_threshold=0.02)
    told = 0
    for seed in range(4):
        t = shared(seed)
        sampled = t["engine"] if against == "engine" else None
        logp = t["logp"].clone().requires_grad_(True)
        loss, _ = policy_loss(logp, t["old"], t["ref"], t["adv"], t["mask"], masked, max_response_tokens=T,
                              engine_logp=t["engine"])  # fmt: skip
        loss.backward()
        theirs = trl_loss(t, "dapo", "token", None, args, beta=0.04, sampled=sampled)
        same((float(loss.detach()), logp.grad), theirs)
        keep = off_policy_keep(t["logp"], t["old"], t["engine"], t["adv"], t["mask"], masked.off_policy_mask)
        negative = t["adv"] < 0
        told += bool((keep[negative] == 0).any()) and bool((keep[negative] == 1).any())
        unmasked = trl_loss(t, "dapo", "token", None, SimpleNamespace(epsilon=0.2, epsilon_high=0.28), beta=0.04)
        assert (theirs[0] != pytest.approx(unmasked[0], abs=1e-9)) == bool((keep == 0).any())
    assert told, "no case masked some answers with A < 0 and kept others"


@pytest.mark.parametrize("top", [0.2, 0.5, 0.8])
def test_the_entropy_mask_is_trls_top_entropy_quantile(top: float) -> None:
    """`entropy_mask: {top: q}` is TRL's top_entropy_quantile q on a batch TRL takes whole (one
    micro-batch): the policy loss of the tokens at or above the (1 − q)-quantile of the trained
    tokens' entropies, the KL term on every token; cutting the batch in two for memory leaves
    rlvr's threshold the batch's (train/entropy_mask.py), and the loss the same."""
    from rlvr_cli.train.entropy_mask import keep_top

    objective = {
        **PLAIN,
        "clip": {"low": 0.2, "high": 0.28},
        "kl": {"coef": 0.04, "estimator": "k3", "placement": "loss"},
        "aggregation": "token_mean",
        "entropy_mask": {"top": top},
    }
    masked = Objective.model_validate(objective)
    args = SimpleNamespace(epsilon=0.2, epsilon_high=0.28, top_entropy_quantile=top)
    for seed in range(3):
        t = shared(seed)
        t["entropy"] = torch.rand(B, T, generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64) * 3
        theirs = trl_loss(t, "dapo", "token", None, args, beta=0.04)
        halves = [slice(0, B // 2), slice(B // 2, B)]
        keeps = keep_top([t["entropy"][h] for h in halves], [t["mask"][h] for h in halves], top)
        logp = t["logp"].clone().requires_grad_(True)
        loss = sum(
            policy_loss(logp[h], t["old"][h], t["ref"][h], t["adv"][h], t["mask"][h], masked, max_response_tokens=T,
                        total_tokens=float(t["mask"].sum()), total_sequences=B, token_keep=k)[0]
            for h, k in zip(halves, keeps, strict=True)
        )  # fmt: skip
        loss.backward()
        same((float(loss.detach()), logp.grad), theirs)
        kept = torch.cat(keeps)[t["mask"].bool()]
        assert 0 < float(kept.mean()) < 1  # some tokens masked, some kept
        unmasked = trl_loss(t, "dapo", "token", None, SimpleNamespace(epsilon=0.2, epsilon_high=0.28), beta=0.04)
        assert not torch.allclose(unmasked[1], theirs[1], atol=1e-6)


def test_vespo_is_trls_vespo_loss() -> None:
    """`clip: {kind: vespo, gamma}` with `ratio.level: sequence_sum` is GRPOTrainer's loss_type vespo:
    −sg(φ(w))·A·log π per token, φ(w) = e^λ·w^k·e^(−λw) of the answer's likelihood ratio, k and λ by
    the sign of A (≥ 0: positive), token_mean; other k and λ give another gradient."""
    gamma = {"positive": {"shape": 1.5, "rate": 2.5}, "negative": {"shape": 2.5, "rate": 1.5}}
    base = {**PLAIN, "kl": {"coef": 0.0}, "aggregation": "token_mean",
            "ratio": {"level": "sequence_sum", "denominator": "trainer_recomputed"}}  # fmt: skip
    vespo = Objective.model_validate({**base, "clip": {"kind": "vespo", "gamma": gamma}})
    swapped = Objective.model_validate(
        {**base, "clip": {"kind": "vespo", "gamma": {"positive": gamma["negative"], "negative": gamma["positive"]}}}
    )
    args = SimpleNamespace(epsilon=0.2, epsilon_high=0.28, vespo_k_pos=1.5, vespo_lambda_pos=2.5, vespo_k_neg=2.5,
                           vespo_lambda_neg=1.5)  # fmt: skip
    for seed in range(3):
        t = shared(seed)
        theirs = trl_loss(t, "vespo", "token", None, args)
        same(ours_on(t, vespo), theirs)
        assert not torch.allclose(ours_on(t, swapped)[1], theirs[1], atol=1e-6)


def test_trls_two_sided_clipping_is_the_dual_clip_above_the_clip_and_refused_below() -> None:
    """TRL's delta caps ρ before PPO's min: the dual clip c = δ wherever δ > 1 + epsilon_high (the
    cap acts on these tensors: TRL's number moves with it); at or below, the import refuses it."""
    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    from rlvr_cli.interop.trl_map import import_config

    args = trl.GRPOConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, delta=1.05, epsilon_high=0.02)
    objective = imported_objective(import_config({"delta": 1.05, "epsilon_high": 0.02}, train_rows=16, processes=1,
                                                 components=1, policy="p"))  # fmt: skip
    assert objective.clip.dual == 1.05
    for seed in range(2):
        t = shared(seed)
        theirs = trl_loss(t, "dapo", "token", None, args)
        same(ours_on(t, objective), theirs)
        uncapped = trl_loss(t, "dapo", "token", None, SimpleNamespace(epsilon=0.2, epsilon_high=0.02))
        assert not torch.allclose(uncapped[1], theirs[1], atol=1e-6)  # δ acts here
    refused = import_config({"delta": 1.2, "epsilon_high": 0.28}, train_rows=16, processes=1, components=1, policy="p")
    assert [d.key for d in refused.refused] == ["delta"]


def test_the_comparison_can_fail() -> None:
    """Other old log-probs on TRL's side (other ratios): another number."""
    t = shared(0)
    ours = rlvr_loss(t, "token_mean", "token", None)
    t_wide = {**t, "old": t["old"] - 0.3}  # other old log-probs: other ratios
    assert ours[0] != pytest.approx(trl_loss(t_wide, "dapo", "token", None)[0], abs=1e-9)


def verl(cases: list[dict], tmp_path: Path) -> list[dict]:
    """verl's own numbers for each case (tests/train/verl_peer.py, in verl's environment)."""
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    done = subprocess.run(
        [str(VERL), str(Path(__file__).with_name("verl_peer.py")), str(path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def case(t: dict[str, torch.Tensor], aggregation: str, level: str, dual: float, correction: Correction | None) -> dict:
    return {
        **{k: t[k].tolist() for k in ("logp", "old", "engine", "adv", "mask")},
        "agg": VERL_AGG[aggregation],
        "level": level,
        "dual": dual,
        "correction": correction.model_dump() if correction else None,
    }


@pytest.mark.skipif(not VERL.exists(), reason="verl's environment .venv-verl is built by make install")
def test_the_objective_and_the_corrections_equal_verls(tmp_path: Path) -> None:
    """verl's vanilla loss always dual-clips (clip_ratio_c, here 3), its GSPO never does; the
    weights from verl's own rollout-correction function, applied by its own loss."""
    cases, ours = [], []
    for seed in range(2):
        t = shared(seed)
        for aggregation in VERL_AGG:
            cases.append(case(t, aggregation, "token", 3.0, None))
            ours.append(rlvr_loss(t, aggregation, "token", None, dual=3.0))
            cases.append(case(t, aggregation, "sequence", 3.0, None))
            ours.append(rlvr_loss(t, aggregation, "sequence", None))
        for correction in CORRECTIONS:
            cases.append(case(t, "token_mean", "token", 3.0, correction))
            ours.append(rlvr_loss(t, "token_mean", "token", correction, dual=3.0))
    theirs = verl(cases, tmp_path)
    for c, mine, their in zip(cases, ours, theirs, strict=True):
        where = f"{c['agg']} {c['level']} {c['correction']}"
        assert mine[0] == pytest.approx(their["loss"], rel=1e-7, abs=1e-12), where  # verl's seq mean adds 1e-8
        assert torch.allclose(mine[1], torch.tensor(their["grad"], dtype=torch.float64), rtol=1e-7, atol=1e-12), where
        if c["correction"]:
            correction = Correction.model_validate(c["correction"])
            t = {k: torch.tensor(c[k], dtype=torch.float64) for k in ("old", "engine", "mask")}
            weights = correction_weights(t["old"], t["engine"], t["mask"], correction)
            assert weights is not None
            assert torch.allclose(weights, torch.tensor(their["weights"], dtype=torch.float64), atol=1e-12), where
    assert len({round(their["loss"], 9) for their in theirs}) > len(theirs) // 2  # the cases differ


#: TRL configs as users write them: each imported by `rlvr import trl`'s mapping, then TRL's loss
#: (its attributes read from the real GRPOConfig) against rlvr's under the imported objective
IMPORTED = [
    {},
    {"loss_type": "grpo", "epsilon_high": 0.28},
    {"loss_type": "dr_grpo", "scale_rewards": "none", "importance_sampling_level": "sequence"},
    {"loss_type": "bnpo", "epsilon": 0.1, "epsilon_high": 0.3},
    {"loss_type": "cispo", "epsilon_high": 1.1},  # the weight capped at 1.1, no floor
    {"loss_type": "sapo", "sapo_temperature_pos": 0.8, "sapo_temperature_neg": 2.5},  # the soft gate
    {"loss_type": "sapo", "importance_sampling_level": "sequence", "beta": 0.04},
    {"off_policy_mask_threshold": 0.02, "num_iterations": 2},  # OPSM against the old log-probs
    {"loss_type": "luspo", "importance_sampling_level": "sequence", "gradient_accumulation_steps": 2},
    {"loss_type": "vespo", "vespo_k_neg": 4.0, "beta": 0.04, "use_bias_correction_kl": False},
    {"delta": 1.05, "epsilon_high": 0.02},  # two-sided clipping: the dual clip (δ > 1 + epsilon_high)
    {"beta": 0.04},  # k3 in the loss, × the ratio (use_bias_correction_kl, 1.16's default)
    {"beta": 0.04, "use_bias_correction_kl": False, "importance_sampling_level": "sequence"},
]


def imported_objective(mapping: Any) -> Objective:
    """An import's objective (nothing refused), with a reward section of one component."""
    from rlvr_cli.interop.common import nested

    assert not mapping.refused
    reward = {"unit": "response", "components": [{"name": "c", "weight": 1.0}], "on_invalid": "fail"}
    return Objective.model_validate({**nested(mapping.values)["objective"], "reward": reward})


def ours_on(t: dict[str, torch.Tensor], objective: Objective) -> tuple:
    """rlvr's loss and d loss / d logp under `objective` on the shared tensors."""
    logp = t["logp"].clone().requires_grad_(True)
    ref = t["ref"] if objective.kl.coef > 0 else None
    loss, _ = policy_loss(logp, t["old"], ref, t["adv"], t["mask"], objective, max_response_tokens=T)
    loss.backward()
    return float(loss.detach()), logp.grad


@pytest.mark.parametrize("config", IMPORTED, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "defaults")
def test_an_imported_trl_config_computes_trls_loss(config: dict) -> None:
    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    from rlvr_cli.interop.trl_map import import_config

    args = trl.GRPOConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, **config)
    objective = imported_objective(import_config(config, train_rows=16, processes=1, components=1, policy="p"))
    for seed in range(2):
        t = shared(seed)
        theirs = trl_loss(
            t, args.loss_type, args.importance_sampling_level, None, args, beta=args.beta,
            bias_correction=args.use_bias_correction_kl,
        )  # fmt: skip
        same(ours_on(t, objective), theirs)


#: objectives TRL can express, as edits of the shipped grpo-cpu contract's objective
EXPORTED = {
    "grpo": {},
    "dapo": {"aggregation": "token_mean", "clip": {"low": 0.2, "high": 0.28}},
    "dr_grpo": {"aggregation": "constant_norm", "advantage": {"baseline": "group_mean", "scale": "none"}},
    "gspo": {"ratio": {"level": "sequence", "denominator": "trainer_recomputed"}},
    "cispo": {"clip": {"low": 1.0, "high": 0.1, "kind": "cispo"}, "aggregation": "token_mean"},
    "sapo": {"clip": {"kind": "sapo", "temperature": {"positive": 0.8, "negative": 2.5}}},
    "luspo": {"aggregation": "seq_mean_token_sum", "ratio": {"level": "sequence", "denominator": "trainer_recomputed"}},
    "vespo": {
        "clip": {
            "kind": "vespo",
            "gamma": {"positive": {"shape": 2.0, "rate": 3.0}, "negative": {"shape": 1.0, "rate": 0.5}},
        },
        "aggregation": "token_mean",
        "ratio": {"level": "sequence_sum", "denominator": "trainer_recomputed"},
    },
    "dual": {"clip": {"low": 0.2, "high": 0.02, "dual": 1.05}, "aggregation": "token_mean"},
    "kl-by-ratio": {"kl": {"coef": 0.04, "estimator": "k3", "placement": "loss", "weight": "ratio"}},
    "kl": {"kl": {"coef": 0.04, "estimator": "k3", "placement": "loss"}},
}


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_an_exported_contract_computes_the_same_loss_in_trl(name: str) -> None:
    """`rlvr export --to trl`'s keywords, given to the real GRPOConfig, make TRL's loss equal
    rlvr's under the contract."""
    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    from rlvr_cli.contract.load import load
    from rlvr_cli.interop.trl_export import export_config

    contract = load(ROOT / "contracts" / "grpo-cpu.rlvr.yaml")
    objective = Objective.model_validate({**contract.objective.model_dump(), "kl": {"coef": 0.0}, **EXPORTED[name]})
    contract = contract.model_copy(update={"objective": objective})
    mapping = export_config(contract)
    assert not mapping.refused, mapping.refused
    args = trl.GRPOConfig(output_dir="/tmp/unused", use_cpu=True, **{**mapping.values, "bf16": False})
    for seed in range(2):
        t = shared(seed)
        theirs = trl_loss(
            t, args.loss_type, args.importance_sampling_level, None, args, beta=args.beta,
            bias_correction=args.use_bias_correction_kl,
        )  # fmt: skip
        same(ours_on(t, objective), theirs)


def test_trls_bnpo_over_micro_batches_differs_as_stated() -> None:
    """`rlvr import` says TRL's bnpo with gradient accumulation averages each micro-batch's token
    mean: TRL's two micro-batch losses add up to exactly that, not to the batch's token_mean."""
    t = shared(0)
    halves = [{k: v[i : i + B // 2] for k, v in t.items()} for i in (0, B // 2)]
    objective = Objective.model_validate(
        {
            **PLAIN,
            "clip": {"low": 0.2, "high": 0.28},
            "kl": {"coef": 0.0},
            "aggregation": "token_mean",
        }
    )

    def ours(part: dict) -> float:
        loss, _ = policy_loss(
            part["logp"], part["old"], None, part["adv"], part["mask"], objective, max_response_tokens=T
        )
        return float(loss)

    theirs = sum(trl_loss(h, "bnpo", "token", None, accumulate=2)[0] for h in halves)
    assert theirs == pytest.approx((ours(halves[0]) + ours(halves[1])) / 2, rel=1e-12)  # the stated relation
    assert theirs != pytest.approx(ours(t), rel=1e-6)  # and not the batch's token_mean (the halves' counts differ)


def test_trls_luspo_over_micro_batches_is_the_batchs_seq_mean_token_sum() -> None:
    """TRL's luspo averages each micro-batch's summed answer losses and divides by the accumulation
    steps: with micro-batches of one size (TRL's per_device_train_batch_size) that is the whole
    batch's seq_mean_token_sum, whatever the accumulation."""
    t = shared(1)
    halves = [{k: v[i : i + B // 2] for k, v in t.items()} for i in (0, B // 2)]
    objective = Objective.model_validate(
        {
            **PLAIN,
            "clip": {"low": 0.2, "high": 0.28},
            "kl": {"coef": 0.0},
            "aggregation": "seq_mean_token_sum",
            "ratio": {"level": "sequence", "denominator": "trainer_recomputed"},
        }
    )
    theirs = sum(trl_loss(h, "luspo", "sequence", None, accumulate=2)[0] for h in halves)
    loss, _ = policy_loss(t["logp"], t["old"], None, t["adv"], t["mask"], objective, max_response_tokens=T)
    assert theirs == pytest.approx(float(loss), rel=1e-12)
    assert theirs != pytest.approx(trl_loss(t, "grpo", "sequence", None)[0], rel=1e-6)  # not grpo's mean


def trl_rloo_loss(t: dict[str, torch.Tensor], args: Any = None) -> tuple:
    """TRL's `RLOOTrainer._compute_loss` on the shared tensors (its old log-probs are each
    answer's sum, as its generation step stores them): its loss and d loss / d logp; `args` (an
    RLOOConfig) gives the clip range, else 0.2 / 0.28."""
    pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    from accelerate import Accelerator
    from trl.trainer.rloo_trainer import RLOOTrainer

    logp = t["logp"].clone().requires_grad_(True)
    trainer: Any = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        epsilon_low=args.epsilon if args else 0.2,
        epsilon_high=(args.epsilon_high or args.epsilon) if args else 0.28,
        model=SimpleNamespace(training=True),
        accelerator=Accelerator(cpu=True),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        aux_loss_enabled=False,
    )
    rows = t["logp"].shape[0]
    inputs = {
        "prompt_ids": torch.ones(rows, P, dtype=torch.long),
        "prompt_mask": torch.ones(rows, P, dtype=torch.long),
        "completion_ids": torch.ones(rows, T, dtype=torch.long),
        "completion_mask": t["mask"],
        "advantages": t["adv"],
        "old_logps": (t["old"] * t["mask"]).sum(1),
    }
    loss = RLOOTrainer._compute_loss(trainer, None, inputs)
    loss.backward()
    return float(loss.detach()), logp.grad


def test_the_answers_likelihood_ratio_equals_trls_rloo_loss_and_gradient() -> None:
    """`ratio.level: sequence_sum` with seq_mean_token_mean is RLOOTrainer's loss: one clipped
    ratio per answer, exp of the summed log-ratio, averaged over answers — and not GSPO's mean."""
    clipped = 0
    for seed in range(3):
        t = shared(seed)
        t = {**t, "old": t["logp"] + (t["old"] - t["logp"]) * 0.6}  # answers' ratios inside and past the clip
        s = ((t["logp"] - t["old"]) * t["mask"]).sum(1).exp()
        clipped += int((((s > 1.28) & (t["adv"] > 0)) | ((s < 0.8) & (t["adv"] < 0))).sum())
        theirs = trl_rloo_loss(t)
        same(rlvr_loss(t, "seq_mean_token_mean", "sequence_sum", None), theirs)
        assert rlvr_loss(t, "seq_mean_token_mean", "sequence", None)[0] != pytest.approx(theirs[0], abs=1e-9)
    assert clipped >= 2  # the clip acted on some answers


@pytest.mark.parametrize("config", [{}, {"epsilon": 0.1, "epsilon_high": 0.3, "beta": 0.0}], ids=["defaults", "wider"])
def test_an_imported_rloo_config_computes_rloo_trainers_loss(config: dict) -> None:
    """`rlvr import trl --trainer rloo`'s objective, under RLOOConfig's own reading of the same
    options: RLOOTrainer's loss and gradient."""
    trl = pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    from rlvr_cli.interop.trl_rloo_map import import_config

    args = trl.RLOOConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, **config)
    objective = imported_objective(import_config(config, train_rows=16, processes=1, components=1, policy="p"))
    assert (objective.kl.coef, objective.kl.placement) == (args.beta, "reward" if args.beta else None)
    for seed in range(2):
        t = shared(seed)
        t = {**t, "old": t["logp"] + (t["old"] - t["logp"]) * 0.6}
        same(ours_on(t, objective), trl_rloo_loss(t, args))


def test_whitening_over_the_batch_is_rlootrainers_normalize_advantages() -> None:
    """`advantage: {baseline: leave_one_out, scale: none, whiten: {batch, sample, 1e-4}}` gives
    the advantages RLOOTrainer computes with normalize_advantages (its lines, with TRL's own
    nanstd; an unscorable completion is NaN there, excluded here): equal, and not the unwhitened
    ones."""
    pytest.importorskip("trl", reason="TRL is the peers extra (make install installs it)")
    from trl.trainer.utils import nanstd

    from rlvr_cli.train.advantages import group_advantages

    g = torch.Generator().manual_seed(3)
    rewards = torch.randint(0, 3, (6, 4), generator=g).double() + torch.rand(6, 4, generator=g, dtype=torch.float64)
    rewards[1, 2] = rewards[4, 0] = float("nan")  # unscorable (every reward function returned None)
    rewards[2] = 1.0  # a group whose rewards are all equal
    counts = (~torch.isnan(rewards)).sum(dim=1, keepdim=True)  # RLOOTrainer's lines
    baselines = (torch.nansum(rewards, dim=1, keepdim=True) - rewards) / (counts - 1)
    theirs = rewards.view(-1) - baselines.view(-1)
    theirs = torch.nan_to_num((theirs - torch.nanmean(theirs)) / (nanstd(theirs) + 1e-4), nan=0.0)
    reward = {"unit": "response", "components": [{"name": "c", "weight": 1.0}], "on_invalid": "exclude"}
    advantage = {"baseline": "leave_one_out", "scale": "none"}
    common = {"reward": reward, "clip": {"low": 0.2, "high": 0.2}, "kl": {"coef": 0.0}, "aggregation": "token_mean"}
    whiten = {"over": "batch", "std": "sample", "epsilon": 1e-4, "epsilon_use": "add_to_std"}
    ours = group_advantages(
        rewards.view(-1), 4, Objective.model_validate({**common, "advantage": {**advantage, "whiten": whiten}})
    )
    assert torch.allclose(ours, theirs, atol=1e-12), (ours, theirs)
    plain = group_advantages(rewards.view(-1), 4, Objective.model_validate({**common, "advantage": advantage}))
    assert not torch.allclose(plain, theirs, atol=1e-3)
