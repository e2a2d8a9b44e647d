"""A sharded policy's rollout engine: the policy's own gathered weights, lent per sampling phase."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as tdist
from torch.distributed.tensor import DTensor

from rlvr_cli.engine.engines import PolicyEngine, StaleWeights
from rlvr_cli.engine.sampler import _DECODERS, lean_sample
from rlvr_cli.engine.types import SamplingParams
from rlvr_cli.toy.tiny import build_tiny
from rlvr_cli.train.setup import load_model
from rlvr_cli.train.sharding import rollout_model, shard, units

PROMPTS = [[5, 6, 7, 8], [9, 10]]


@pytest.fixture
def one_process(tmp_path: Path):
    store = tdist.FileStore(str(tmp_path / "store"), 1)
    tdist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        tdist.destroy_process_group()


def gpt2(folder: Path) -> Path:
    """Another family: a tied head and the model's own forward (the lean sampler's fused one is
    for the Llama family)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def sharded(tmp_path: Path, family: str = "llama") -> tuple:
    """A tiny policy sharded over the one process, an unsharded copy of it, and the engine's model
    with its lender."""
    folder = build_tiny(tmp_path / "model", hidden=64, layers=2) if family == "llama" else gpt2(tmp_path / "model")
    policy = load_model(str(folder), None, torch.float32, torch.device("cpu"))
    plain = copy.deepcopy(policy)
    shard(policy, SimpleNamespace(cpu_offload=False, reshard_after_forward=True), None, "fp32")
    own, lender = rollout_model(policy, str(folder), None, torch.float32)
    return policy, plain, own, lender


def draw(model, seed: int) -> list:
    return lean_sample(
        model, PROMPTS, max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=0, stop_ids=[], pad_id=0, seed=seed
    )


ROOT = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}  # the root unit (a tied head: no lm_head)


def watch_layers(policy) -> dict:
    """How many of the policy's layer units are gathered at once, at most, and how many times one is."""
    seen = {"most at once": 0, "gathered": 0}
    now: set = set()
    for unit in units(policy):
        if unit is policy:
            continue

        def unshard(unit=unit, inner=unit.unshard):
            now.add(id(unit))
            seen["gathered"] += 1
            seen["most at once"] = max(seen["most at once"], len(now))
            return inner()

        def reshard(unit=unit, inner=unit.reshard):
            now.discard(id(unit))
            return inner()

        unit.unshard, unit.reshard = unshard, reshard
    return seen


@pytest.mark.parametrize("family", ["llama", "llama-packed", "gpt2"])
def test_the_engine_samples_from_the_gathered_policy_and_holds_nothing_between_phases(
    one_process: None, tmp_path: Path, family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Llama: the lean decoder's own copies (packed: oneDNN's layout, as a CPU's bf16 run holds
    them), each made while its layer alone is gathered. GPT-2: the model's own forward, over
    every unit gathered for the phase."""
    if family == "llama-packed":
        import rlvr_cli.engine.fused as fused
        import rlvr_cli.engine.limits as limits

        if not fused.ONEDNN:
            pytest.skip("this PyTorch has no oneDNN")
        monkeypatch.setattr(limits, "PACK_FP32", 0)  # this tiny model's fp32 layers packed too
    family, packed = family.split("-")[0], family.endswith("packed")
    policy, plain, own, lender = sharded(tmp_path, family)
    engine = PolicyEngine.of("lean", own)
    engine.lender, engine.device = lender, "cpu"
    params = SamplingParams(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=0, stop_ids=(), pad_id=0)

    assert all(p.is_meta for p in own.parameters())  # no memory between phases
    with pytest.raises(StaleWeights, match="inside `lent"):
        engine.sample(PROMPTS, params, seed=3, revision=0)
    gathered = watch_layers(policy)
    with engine.lent():
        whole = {n: p.data_ptr() for n, p in policy.named_parameters() if not isinstance(p, DTensor)}
        assert {n: p.data_ptr() for n, p in own.named_parameters() if n in whole} == whole  # the same memory
        if family == "llama":  # the lean decoder copied each layer while it alone was gathered
            assert gathered == {"most at once": 1, "gathered": 2} and set(whole) == ROOT & set(
                dict(policy.named_parameters())
            )
            assert all(p.is_meta for n, p in own.named_parameters() if n not in whole)
            layers = _DECODERS[own].layers
            assert {linear.packed for layer in layers for linear in (layer.qkv, layer.o, layer.gate_up)} == {packed}
        else:  # the model's own forward reads every unit, gathered for the phase
            assert gathered["most at once"] == 2 and len(whole) == len(list(policy.named_parameters()))
        drawn = [g.response_ids for g in engine.sample(PROMPTS, params, seed=3, revision=0)]
    assert drawn == [ids for ids, _, _ in draw(plain, 3)]
    assert all(p.is_meta for p in own.parameters())
    assert all(hasattr(p, "full_tensor") for p in policy.parameters())  # resharded

    with torch.no_grad():  # an optimizer step's worth of change: the next phase samples the new weights
        for p, q in zip(policy.parameters(), plain.parameters(), strict=True):
            p.to_local().mul_(1.5)
            q.mul_(1.5)
    engine.sync(policy, 1)
    with engine.lent():
        after = [g.response_ids for g in engine.sample(PROMPTS, params, seed=3, revision=1)]
    assert after == [ids for ids, _, _ in draw(plain, 3)] and after != drawn


class Holder:
    """An engine that keeps weights of its own, as vLLM does: handed them at every sync."""

    name, holds_weights = "holder", True

    def __init__(self) -> None:
        self.given: dict[str, torch.Tensor] = {}

    def load_weights(self, model) -> None:
        self.given = {n: t.detach().clone() for n, t in model.state_dict().items()}

    def sample(self, prompts, params, seed):
        return []

    def describe(self) -> str:
        return "holder"


def test_an_engine_with_weights_of_its_own_is_handed_the_gathered_weights_at_each_sync(
    one_process: None, tmp_path: Path
) -> None:
    policy, plain, own, lender = sharded(tmp_path)
    engine = PolicyEngine(holder := Holder())
    engine.lender = lender
    engine.sync(policy, 1)
    assert holder.given.keys() == plain.state_dict().keys()
    for name, tensor in plain.state_dict().items():
        assert torch.equal(holder.given[name], tensor), name
    assert all(p.is_meta for p in own.parameters())  # taken back after the hand-over
    assert engine.sample(PROMPTS, None, seed=0, revision=1) == []  # no phase needed: it holds its own
