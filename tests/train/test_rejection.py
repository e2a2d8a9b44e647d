"""`objective.rejection` (verl's rollout rejection sampling): the masks equal verl's own function
for every kind of option verl has, through the import's reading of verl's option strings; a run
that samples ahead rejects the tokens its older weights drew too differently; and where it could
never act it is refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from rlvr_cli.contract.models import Objective
from rlvr_cli.interop import verl_rejection
from rlvr_cli.interop.common import Mapping
from rlvr_cli.train.rejection import keep_mask
from tests.conftest import copy_experiment, rlvr

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / ".venv-verl" / "bin" / "python"
#: verl's rollout_rs and rollout_rs_threshold, as users write them
OPTIONS = [
    ("token_k1", "0.8_1.25"),
    ("token_k2", 0.02),
    ("token_k3", "0.02"),
    ("seq_sum_k1", "0.5_2.0"),
    ("seq_sum_k3", 0.1),
    ("seq_mean_k1", 1.1),  # one value u: the bounds [1/u, u]
    ("seq_mean_k2", 0.01),
    ("seq_mean_k3", 0.01),
    ("seq_max_k2", 0.05),
    ("seq_max_k3", 0.05),
    ("token_k1,seq_mean_k3", "0.7_1.4,0.02"),
]
B, T = 8, 6


class Get:
    """The two calls verl_rejection makes of verl_map's Reader."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def __call__(self, key: str) -> Any:
        return self.values.get(key)

    def source(self, key: str) -> str:
        return f"verl {key}"


def imported(rs: str, threshold: Any) -> Mapping:
    out = Mapping()
    verl_rejection.rejection(
        Get({f"{verl_rejection.C}.rollout_rs": rs, f"{verl_rejection.C}.rollout_rs_threshold": threshold}), out
    )
    return out


def tensors(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    return {
        "old": old,
        "engine": old + (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.5) * 0.6,
        # a tool result inside some answers (tool_use): tokens the engine never sampled, out of the mask
        "mask": (
            (torch.arange(T)[None, :] < lengths[:, None])
            & ~((torch.arange(T) == 2) & (torch.arange(B) % 3 == 0)[:, None])
        ).double(),
    }


@pytest.mark.skipif(not VERL.exists(), reason="verl's environment .venv-verl is built by make install")
def test_the_masks_are_verls(tmp_path: Path) -> None:
    cases, ours = [], []
    for rs, threshold in OPTIONS:
        mapping = imported(rs, threshold)
        assert not mapping.refused, (rs, mapping.refused)
        reward = {"unit": "response", "components": [{"name": "c", "weight": 1.0}], "on_invalid": "exclude"}
        objective = Objective.model_validate(
            {"reward": reward, "advantage": {"baseline": "group_mean", "scale": "none"},
             "clip": {"low": 0.2, "high": 0.2}, "kl": {"coef": 0.0}, "aggregation": "token_mean",
             "rejection": mapping.values["objective.rejection"]}
        )  # fmt: skip
        for seed in range(2):
            t = tensors(seed)
            cases.append({**{k: v.tolist() for k, v in t.items()}, "rs": rs, "threshold": threshold})
            ours.append(keep_mask(t["old"], t["engine"], t["mask"], objective.rejection) * t["mask"])
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    done = subprocess.run([str(VERL), str(Path(__file__).with_name("verl_rejection.py")), str(path)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    for case, mine, their in zip(cases, ours, theirs, strict=True):
        assert torch.equal(mine, torch.tensor(their, dtype=torch.float64)), (case["rs"], case["threshold"])
    told = [0 < float(m.sum()) < float(torch.tensor(c["mask"]).sum()) for c, m in zip(cases, ours, strict=True)]
    assert sum(told) >= len(OPTIONS), "most options should keep some tokens and reject others here"


def test_what_verl_would_refuse_is_refused() -> None:
    for rs, threshold in (("seq_max_k1", 1.1), ("token_k2", "0.1_0.2"), ("token_k4", 1.0), ("token_k1", "2_1"),
                          ("token_k1,token_k2", "1.1,2,3")):  # fmt: skip
        assert imported(rs, threshold).refused, (rs, threshold)


def test_a_run_sampling_ahead_rejects_what_older_weights_drew(single_turn: Path, tmp_path: Path) -> None:
    """Sampled a step ahead, step 2's answers come from the weights before step 1's update: π_old
    (recomputed) and the engine's log-probs differ, and a tight bound rejects tokens that a loose
    one keeps; step 1 (nothing moved yet) rejects nothing."""
    recomputed = "  ratio: {level: token, denominator: trainer_recomputed}\n  aggregation: "
    ahead = [("max_policy_lag: 0", "max_policy_lag: 1\n  sample_ahead: true"), ("  aggregation: ", recomputed)]
    found = {}
    for name, bound in (("tight", 1e-4), ("loose", 1e9)):
        rejection = f"  rejection: [{{estimator: k3, over: token, high: {bound}}}]\n"
        edits = [*ahead, ("  entropy_coef: 0.0\n", f"  entropy_coef: 0.0\n{rejection}")]
        exp = copy_experiment(single_turn, tmp_path / name, edits)
        run = tmp_path / f"run-{name}"
        done = rlvr("train", exp / "experiment.rlvr.yaml", "--max-steps", "2", "--run-dir", run, timeout=600)
        assert done.code == 0, done.stderr[-3000:]
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        found[name] = [r["rejected_share"] for r in rows if "rejected_share" in r]
        assert "rejected before the update" in (run / "plan.json").read_text()
    assert len(found["tight"]) == 2 and found["tight"][0] == 0 and found["tight"][1] > 0, found
    assert found["loose"] == [0, 0]


def test_where_it_could_never_act_it_is_refused(single_turn: Path, tmp_path: Path) -> None:
    for i, (rejection, ratio, refused) in enumerate(
        (
            ("[{estimator: k3, over: token, high: 0.01}]", "trainer_recomputed", False),
            ("[{estimator: k3, over: token, high: 0.01}]", "engine", True),  # π_old is the engine's own
            ("[{estimator: k1, over: token, high: 1.1}]", "trainer_recomputed", True),  # k1 needs low
            ("[{estimator: k2, over: token, low: 0.5, high: 1.1}]", "trainer_recomputed", True),
            ("[{estimator: k1, over: sequence_max, low: 0.9, high: 1.1}]", "trainer_recomputed", True),
            ("[]", "trainer_recomputed", True),
        )
    ):
        edits = [
            (
                "  aggregation: ",
                f"  ratio: {{level: token, denominator: {ratio}}}\n  rejection: {rejection}\n  aggregation: ",
            )
        ]
        exp = copy_experiment(single_turn, tmp_path / f"e{i}", edits)
        done = rlvr("validate", exp / "experiment.rlvr.yaml")
        assert ("error[RLV003] objective.rejection" in done.stdout) == refused, (rejection, ratio, done.stdout)


def test_the_engine_mismatch_metrics_still_see_the_rejected_tokens(single_turn: Path, tmp_path: Path) -> None:
    """On-policy the lean sampler's and the trainer's log-probs differ by float rounding: a bound
    below it rejects tokens, and the step's engine-mismatch metrics — what a user watches to set
    such a bound — are the same as without the rejection (the tokens it took out are the most
    different ones)."""
    recomputed = "  ratio: {level: token, denominator: trainer_recomputed}\n  aggregation: "
    found = {}
    for name, extra in (("plain", ""), ("rejecting", "  rejection: [{estimator: k2, over: token, high: 1.0e-16}]\n")):
        edits = [("  aggregation: ", recomputed), ("  entropy_coef: 0.0\n", f"  entropy_coef: 0.0\n{extra}")]
        exp = copy_experiment(single_turn, tmp_path / name, edits)
        run = tmp_path / f"run-{name}"
        done = rlvr("train", exp / "experiment.rlvr.yaml", "--max-steps", "1", "--run-dir", run, timeout=600)
        assert done.code == 0, done.stderr[-3000:]
        found[name] = next(json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())
    assert found["rejecting"]["rejected_share"] > 0
    for key in ("engine_logprob_diff_max", "engine_logprob_diff_mean"):
        assert found["rejecting"][key] == pytest.approx(found["plain"][key], rel=0.05), key
