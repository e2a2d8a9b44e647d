"""The numeric proof of `rlvr export --to verl`: for contracts of every exportable kind, verl's own
functions under the exported config (composed by verl's Hydra, verl's actor config built from it:
tests/interop/verl_objective.py in verl's environment) give the advantages, the loss and its
gradient rlvr gives under the contract — to 1e-10 in float64 where the export is exact, within
the stated margin where it says `exact within`, and off by the stated relation where it says
`differs` (verl's float32 rewards)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from rlvr_cli.contract.load import load
from rlvr_cli.train.objective import group_advantages, policy_loss
from tests.conftest import built_once, copy_experiment, rlvr

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / ".venv-verl" / "bin" / "python"
BASE = [
    ("epsilon: 1.0e-4}", "epsilon: 1.0e-6}"),
    ("{name: format, weight: 0.2}", "{name: format, weight: 0.25}"),
    ("max_response_tokens: 2", "max_response_tokens: 6"),
]
KL = "kl: {coef: 0.01, estimator: k3, placement: loss}"
CLIP = "clip: {low: 0.2, high: 0.2}"
AGG = "aggregation: seq_mean_token_mean"
SCALE = "scale: group_std, std: sample, epsilon: 1.0e-6}"
#: contract edits → one exportable objective each
VARIANTS = {
    "grpo-k3": [],
    "dapo-dual": [
        (AGG, "aggregation: token_mean"),
        (CLIP, "clip: {low: 0.2, high: 0.28, dual: 3.0}"),
        (KL, "kl: {coef: 0.0}"),
    ],
    "token-sum-k1": [
        (AGG, "aggregation: seq_mean_token_sum"),
        (KL, "kl: {coef: 0.05, estimator: k1, placement: loss}"),
    ],
    "dr-grpo": [(AGG, "aggregation: constant_norm"), (SCALE, "scale: none}"), (KL, "kl: {coef: 0.0}")],
    "rloo": [
        ("baseline: group_mean", "baseline: leave_one_out"),
        (SCALE, "scale: none}"),
        (AGG, "aggregation: token_mean"),
    ],
    "reinforce-pp-baseline": [  # verl's reinforce_plus_plus_baseline: masked_whiten over the batch's tokens
        (
            SCALE,
            "scale: none, whiten: {over: batch_tokens, std: sample, epsilon: 1.0e-8, epsilon_use: add_to_variance}}",
        ),
        (AGG, "aggregation: token_mean"),
    ],
    "cispo": [  # verl's cispo: −sg(clip(ρ, 1 − low, 1 + high))·A·log π, no dual clip
        (CLIP, "clip: {low: 0.2, high: 0.1, kind: cispo}"),
        (AGG, "aggregation: token_mean"),
        (KL, "kl: {coef: 0.0}"),
    ],
    "k3-straight-through": [(KL, "kl: {coef: 0.05, estimator: k3, placement: loss, gradient: k2}")],  # verl's k3+
    "sapo": [(CLIP, "clip: {kind: sapo, temperature: {positive: 1.0, negative: 1.05}}")],  # verl's sapo, its KL
    "gspo-tis": [
        (
            KL,
            "kl: {coef: 0.02, estimator: k2, placement: loss}\n"
            "  ratio: {level: sequence, denominator: trainer_recomputed}\n"
            "  correction: {kind: tis, level: sequence, cap: 2.0}",
        ),
    ],
    "mis-token": [
        (AGG, "aggregation: token_mean"),
        (
            KL,
            "kl: {coef: 0.0}\n  ratio: {level: token, denominator: trainer_recomputed}"
            "\n  correction: {kind: mis, level: token, low: 0.5, high: 2.0}",
        ),
    ],
}
K, T = 4, 6
REWARDS = [1.25, 0.0, 1.0, 0.25, 1.25, 1.25, 1.25, 1.25, 0.0, 0.25, 0.25, 1.0]  # the second group all equal


def tensors(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n = len(REWARDS)
    logp = -torch.rand(n, T, generator=g, dtype=torch.float64) * 2
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    return {
        "logp": logp,
        "old": logp + (torch.rand(n, T, generator=g, dtype=torch.float64) - 0.5) * 0.8,
        "ref": logp + (torch.rand(n, T, generator=g, dtype=torch.float64) - 0.5) * 0.6,
        "engine": logp + (torch.rand(n, T, generator=g, dtype=torch.float64) - 0.5) * 1.2,
        "mask": (torch.arange(T)[None, :] < lengths[:, None]).double(),
    }


def ours(contract, t: dict[str, torch.Tensor]) -> tuple:
    tokens = t["mask"].sum(dim=1)  # each answer's trained tokens (whiten over batch_tokens weighs by them)
    adv = group_advantages(torch.tensor(REWARDS, dtype=torch.float64), K, contract.objective, tokens)
    logp = t["logp"].clone().requires_grad_(True)
    engine = t["engine"] if contract.objective.corrects else None
    loss, _ = policy_loss(
        logp, t["old"], t["ref"], adv, t["mask"], contract.objective,
        max_response_tokens=contract.length.max_response_tokens, engine_logp=engine,
    )  # fmt: skip
    loss.backward()
    return adv, float(loss.detach()), logp.grad


def _export_and_compute(single_turn: Path, root: Path) -> None:
    """Every variant exported (its folder: the contract, `rlvr export`'s exit code and stderr,
    the cases), then verl's code on all of them in one process of verl's environment (its
    imports take ~10 s): answers.json, one answer list per variant."""
    args = []
    for variant in sorted(VARIANTS):
        folder = root / variant
        exp = copy_experiment(single_turn, folder / "exp", BASE + VARIANTS[variant])
        done = rlvr("export", exp, "--to", "verl", "--out", folder / "verl", "--allow-inexact")
        (folder / "export.json").write_text(json.dumps({"code": done.code, "stderr": done.stderr}))
        cases = [
            {**{k: v.tolist() for k, v in tensors(seed).items()}, "rewards": REWARDS, "group_size": K}
            for seed in range(2)
        ]
        # a group of 1.2 as verl keeps it (float32): the stated relation, advantages not exactly 0
        cases.append({**cases[0], "rewards": [1.2] * K * 3, "group_size": K * 3, "float32": True})
        (folder / "cases.json").write_text(json.dumps(cases))
        args += [str(folder / "verl"), str(folder / "cases.json")] if done.code == 0 else []
    script = Path(__file__).with_name("verl_objective.py")
    done = subprocess.run([str(VERL), str(script), *args], capture_output=True, text=True, timeout=600)
    (root / "verl.stderr").write_text(done.stderr)
    if done.returncode == 0:
        answers = json.loads(done.stdout.strip().splitlines()[-1])
        exported = [v for v in sorted(VARIANTS) if json.loads((root / v / "export.json").read_text())["code"] == 0]
        (root / "answers.json").write_text(json.dumps(dict(zip(exported, answers, strict=True))))


@pytest.fixture(scope="module")
def computed(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built by the first test process that asks, shared by the other."""
    return built_once(tmp_path_factory, "verl-export-numbers", lambda root: _export_and_compute(single_turn, root))


@pytest.mark.skipif(not VERL.exists(), reason="verl's environment .venv-verl is built by make install")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_verls_code_under_the_export_computes_the_contract(variant: str, computed: Path) -> None:
    exported = json.loads((computed / variant / "export.json").read_text())
    assert exported["code"] == 0, exported["stderr"]
    assert "differs: objective.reward.on_invalid" in exported["stderr"]  # the only difference: rewards are 0/1-weighted
    assert "differs: objective.reward.components" not in exported["stderr"]  # 1 and 0.25 are float32 numbers
    assert (computed / "answers.json").exists(), (computed / "verl.stderr").read_text()[-3000:]
    theirs = json.loads((computed / "answers.json").read_text())[variant]
    contract = load(computed / variant / "exp" / "experiment.rlvr.yaml")
    mine = [ours(contract, tensors(seed)) for seed in range(2)]
    # verl adds 1e-8 to each answer's token count and to the batch's in masked_whiten (stated as
    # `exact within`): 1e-8 of each term
    whitened = contract.objective.advantage.whiten is not None
    margin = 1e-8 if contract.objective.aggregation == "seq_mean_token_mean" or whitened else 1e-12
    tau = contract.objective.clip.temperature
    if tau is not None:  # sapo's per-token loss is A times a gate of up to 4/τ, and so is verl's 1e-8 of it
        margin *= 4 / min(tau.positive, tau.negative)
    for (adv, loss, grad), their in zip(mine, theirs[:-1], strict=True):
        assert torch.allclose(
            adv, torch.tensor(their["advantages"], dtype=torch.float64), rtol=0, atol=max(margin, 1e-10)
        )
        assert loss == pytest.approx(their["loss"], rel=1e-10, abs=margin), variant
        assert torch.allclose(grad, torch.tensor(their["grad"], dtype=torch.float64), rtol=1e-10, atol=margin)
    assert abs(mine[0][1] - mine[1][1]) > 1e-6  # two different cases, not one number twice
    other = "token_mean" if contract.objective.aggregation != "token_mean" else "seq_mean_token_sum"
    changed = contract.model_copy(update={"objective": contract.objective.model_copy(update={"aggregation": other})})
    assert ours(changed, tensors(0))[1] != pytest.approx(theirs[0]["loss"], rel=1e-6)  # the comparison can fail
    if whitened:  # each answer counted once, not once per token: other advantages than verl's
        once = contract.objective.advantage.whiten.model_copy(update={"over": "batch"})
        advantage = contract.objective.advantage.model_copy(update={"whiten": once})
        objective = contract.objective.model_copy(update={"advantage": advantage})
        other = ours(contract.model_copy(update={"objective": objective}), tensors(0))[0]
        assert not torch.allclose(other, torch.tensor(theirs[0]["advantages"], dtype=torch.float64), atol=1e-3)
    float32 = theirs[-1]["advantages"]
    equal = group_advantages(
        torch.full((K * 3,), 1.2, dtype=torch.float64), K * 3, contract.objective, torch.ones(K * 3)
    )
    assert bool((equal == 0).all())
    if contract.objective.advantage.scale != "none":
        assert max(abs(a) for a in float32) == pytest.approx(0.106, abs=0.001)  # docs/interop.md: 0.106, not 0
