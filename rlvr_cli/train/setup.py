"""What a run is made of, built from the contract: models, optimizer, schedule, data, device.

`build` is a plain function returning a `Setup`; nothing here changes during the run except
the weights and the optimizer's own state. The counters that do change live in `TrainState`.
"""

from __future__ import annotations

import hashlib
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr_cli.chat.render import ChatRenderer
from rlvr_cli.contract import hub, waivers
from rlvr_cli.contract.lock import module_source
from rlvr_cli.contract.models import Contract
from rlvr_cli.contract.tasks import read_splits
from rlvr_cli.data.check import check
from rlvr_cli.data.findings import DataReport
from rlvr_cli.engine.engines import PolicyEngine
from rlvr_cli.engine.precision import DTYPES
from rlvr_cli.errors import RlvrError
from rlvr_cli.files import sha256_file
from rlvr_cli.train import collectives
from rlvr_cli.train import distributed as dist
from rlvr_cli.train.faults import Fault
from rlvr_cli.train.sharding import meta_loader, shard_loaded


@dataclass
class Setup:
    contract: Contract
    folder: Path  # the contract's folder: relative paths resolve here
    device: torch.device
    dtype: torch.dtype  # the weights the optimizer updates (and its state)
    renderer: ChatRenderer
    policy: Any
    reference: Any | None  # frozen; None when kl.coef is 0
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    train_tasks: list[dict[str, Any]]
    holdout_tasks: list[dict[str, Any]]
    rank: int
    world: int
    fault: Fault  # test-only fault injection, parsed once from RLVR_FAULT
    verifier_id: str  # `module:function version sha256:...`, in every record
    engine: PolicyEngine  # what samples (built once; receives the weights after every update)
    engine_version: str  # the rollout engine and its version, in the plan and every record
    data_check: str | None = None  # sha256 of the run's data-check.json, in every record
    compute: torch.dtype | None = None  # the dtype matrix products run in, when narrower than `dtype` (autocast)
    scaler: Any | None = None  # fp16 compute: the loss scaler (torch.amp.GradScaler), checkpointed
    peft_model: Any | None = None  # with an adapter: peft's handle on the policy (saving, switching it off)

    @property
    def reference_is_base(self) -> bool:
        """The reference is the policy with its adapter switched off (no second copy)."""
        return self.peft_model is not None and self.reference is self.policy

    @property
    def tokenizer(self) -> Any:
        return self.renderer.tokenizer

    @property
    def main(self) -> bool:
        """One process writes the run folder."""
        return self.rank == 0

    @property
    def sampled_by(self) -> str:
        """How a step's samples are seeded, which says what a resume with other processes keeps:
        `group` (under torchrun, each group its own seed: the same samples at any number of
        processes), `rank` (under torchrun, a process's share in one batch seeded by its rank:
        those of this number of processes), `run` (one plain process, the run's seed)."""
        if not dist.active():
            return "run"
        return "group" if self.contract.seeds_each_group(torchrun=True) else "rank"


def build(contract: Contract, folder: Path, fault: Fault, run_dir: Path | None = None) -> Setup:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    hp = contract.hyperparameters
    rank, world = dist.rank_world()
    if dist.active():
        collectives.check_shareable(contract, world)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype, compute = DTYPES[hp.dtypes.params], compute_dtype(contract)
    torch.manual_seed(hp.seed)
    policy_ref = contract.artifacts.policy
    sharded = hp.strategy.strategy == "fsdp2" and dist.active()
    # sharded: loaded in CPU memory (memory-mapped); fully_shard moves each shard to its device
    load_on = torch.device("cpu") if sharded else device
    # an adapter trains over a frozen base, which never needs more precision than it computes in
    base_dtype = compute if hp.adapter is not None and compute is not None else dtype
    loader = meta_loader if sharded and rank != 0 else load_model  # only the main process reads the weights
    policy = loader(artifact_path(policy_ref, folder, "policy"), policy_ref.revision, base_dtype, load_on)
    peft_model = None
    if hp.adapter is not None:
        from rlvr_cli.train import lora

        # policy is modified in place; a meta model receives the adapter's weights from the main process
        peft_model = lora.attach(policy, contract, folder, load=loader is load_model)
    # sharded: the engine is made once the policy holds its weights (below)
    engine = None if sharded else _engine(contract, folder, run_dir, fault, policy, compute)
    adapted = policy if peft_model is not None else None
    reference = load_reference(contract, folder, base_dtype, load_on, adapted, loader)
    if hp.strategy.activation_checkpointing:
        recompute_layers(policy)
    if sharded:  # the policy once, when the reference is the policy with its adapter switched off
        models = [policy] if reference is None or reference is policy else [policy, reference]
        shard_loaded(models, rank == 0, hp, compute, device)
        engine = _engine(contract, folder, run_dir, fault, policy, compute, (compute or base_dtype, device))
    optimizer = make_optimizer(contract, policy)
    splits = read_splits(folder, contract.data.splits)
    return Setup(
        contract=contract,
        folder=folder,
        device=device,
        dtype=dtype,
        renderer=ChatRenderer.from_contract(contract, folder),
        policy=policy,
        reference=reference,
        optimizer=optimizer,
        scheduler=make_scheduler(contract, optimizer),
        train_tasks=splits["train"],
        holdout_tasks=splits["holdout"],
        rank=rank,
        world=world,
        fault=fault,
        verifier_id=verifier_identity(contract, folder),
        engine=engine,
        engine_version=engine.describe(),
        compute=compute,
        scaler=torch.amp.GradScaler(device.type) if hp.dtypes.compute == "fp16" else None,
        peft_model=peft_model,
    )


def compute_dtype(contract: Contract) -> torch.dtype | None:
    """The autocast dtype: the contract's compute dtype where it is narrower than the weights'."""
    p = contract.hyperparameters.dtypes
    return DTYPES[p.compute] if p.mixed else None


def served_engine(contract: Contract, folder: Path, run_dir: Path | None, policy: Any) -> PolicyEngine | None:
    """A served engine (`sampling.server`), which holds its own weights, handed over by files in
    `server.weights_dir` (relative to the contract), else RUN/engine_weights — the run's own, so
    what an earlier process left there (a run stopped mid-write) is removed. None: no server."""
    sampling = contract.hyperparameters.sampling
    if sampling.server is None:
        return None
    writer = dist.rank_world()[0] == 0  # under torchrun process 0 hands the weights over, the others wait for it
    if sampling.server.weights_dir is not None:
        weights = (folder / sampling.server.weights_dir).resolve()
    else:
        weights = Path(run_dir or folder).resolve() / "engine_weights"
        if writer:
            shutil.rmtree(weights, ignore_errors=True)
    engine = PolicyEngine.of(sampling.engine, policy, server=sampling.server, weights=weights)
    engine.engine.writer, engine.engine.write_sharded = writer, _write_sharded  # type: ignore[attr-defined]
    return engine


def _write_sharded(model: Any, folder: Path, writer: bool) -> None:
    """A sharded policy's weights for a served engine, as `final/` is written (an adapter merged in)."""
    from rlvr_cli.engine.adapted import is_adapted
    from rlvr_cli.train.final_shards import merged_pieces, save_final_sharded

    save_final_sharded(model, folder, writer, merged_pieces(model) if is_adapted(model) else None)


def _engine(
    contract: Contract,
    folder: Path,
    run_dir: Path | None,
    fault: Fault,
    policy: Any,
    compute: torch.dtype | None,
    lent: tuple[torch.dtype, torch.device] | None = None,
) -> PolicyEngine:
    """A served engine, else `make_engine`'s; `lent` (dtype, device): the policy is sharded, and its
    engine's model is lent the gathered weights for each sampling phase (train/sharding.py `Lender`)."""
    served = served_engine(contract, folder, run_dir, policy)
    if served is not None:
        return served
    if lent is None:
        return make_engine(contract.hyperparameters.sampling.engine, policy, fault, compute)
    from rlvr_cli.train.sharding import rollout_model

    ref = contract.artifacts.policy
    adapt = None
    if contract.hyperparameters.adapter is not None:  # the skeleton carries the adapter's layers too
        from rlvr_cli.train import lora

        def adapt(model: Any) -> None:
            lora.attach(model, contract, folder, load=False)

    own, lender = rollout_model(policy, artifact_path(ref, folder, "policy"), ref.revision, lent[0], adapt)
    engine = make_engine(contract.hyperparameters.sampling.engine, policy, fault, compute, own=own)
    engine.lender, engine.device = lender, lent[1].type  # (its parameters are on the meta device until lent)
    return engine


def make_engine(
    name: str, policy: Any, fault: Fault, compute: torch.dtype | None = None, own: Any = None
) -> PolicyEngine:
    """The run's rollout engine, sampling from the policy itself (lean, transformers) or from
    a model of its own `own` (a sharded policy's, lent the gathered weights: it samples and
    never trains; on CPU `RLVR_FAULT=engine_copy` stands in for vLLM's with a copy of the policy)."""
    if fault.engine is None and own is None:
        return PolicyEngine.of(name, policy, compute=compute)
    if own is None:
        import copy as copying

        own = copying.deepcopy(policy).eval().requires_grad_(False)
    engine = PolicyEngine.of(name, own, compute=compute)
    if fault.engine == "stale_engine":  # the bug this guards against: weights never reach the engine
        engine.engine.load_weights = lambda model: None  # type: ignore[method-assign]
    return engine


def recompute_layers(model: Any) -> None:
    """Activation checkpointing: each decoder layer keeps only its input for the backward and
    runs its forward again there (torch.utils.checkpoint, non-reentrant), in eval mode too."""
    import functools

    from torch.utils.checkpoint import checkpoint

    classes = set(getattr(model, "_no_split_modules", None) or ())
    for layer in (m for m in model.modules() if type(m).__name__ in classes):
        forward = layer.forward

        @functools.wraps(forward)
        def recomputed(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            if not torch.is_grad_enabled():
                return _forward(*args, **kwargs)
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        layer.forward = recomputed
    model.rlvr_recomputes_layers = True  # the shared-prompt forward, which runs the layers' parts, steps aside


def _version_of(library: str) -> str:
    if library == "bubblewrap":
        import subprocess

        try:
            return subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=10).stdout.split()[-1]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "missing"
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(library)
    except PackageNotFoundError:
        return "missing"


def verifier_identity(contract: Contract, folder: Path) -> str:
    """Which verifier scored the run: its entry point, the contract's version string, and the
    sha256 of its module file, beside the contract or installed (contract/lock.py `module_source`)."""
    env = contract.environment
    for kind, library in (("answer_check", "math-verify"), ("unit_tests", "bubblewrap"), ("judge", "openai")):
        section = getattr(env, kind)
        if section is not None:
            settings = ", ".join(f"{k}={v}" for k, v in section.model_dump().items() if k != "rubric")
            if kind == "judge":
                settings += f", rubric sha256:{hashlib.sha256(section.rubric.encode()).hexdigest()[:16]}"
            return f"{kind}({settings}) {library} {_version_of(library)} {contract.artifacts.verifier.version}"
    spec = contract.environment.verifier or contract.environment.server or ""
    found = module_source(spec.partition(":")[0], folder) if spec else None
    digest = f" sha256:{sha256_file(found)}" if found else ""
    return f"{spec} {contract.artifacts.verifier.version}{digest}"


def artifact_path(ref: Any, folder: Path, what: str) -> str:
    """A local folder (checked for config.json), or a hub id the local cache holds."""
    if ref.path is not None:
        path = folder / ref.path
        if not (path / "config.json").is_file():
            raise RlvrError(f"{what} folder {path} has no config.json")
        return str(path)
    if hub.snapshot(ref.id, ref.revision) is None:
        raise RlvrError(f"{what}: {hub.missing(ref.id, ref.revision)}")
    return ref.id


def load_model(source: str, revision: str | None, dtype: torch.dtype, device: torch.device) -> Any:
    """A causal LM from disk (never the network), in eval mode: no dropout, so rollout and
    update see the same network."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(source, revision=revision, dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise RlvrError(f"cannot load the model at {source}: {exc}") from None
    return model.to(device).eval()


def load_reference(
    contract: Contract,
    folder: Path,
    dtype: torch.dtype,
    device: torch.device,
    adapted: Any | None = None,
    loader: Any = None,
) -> Any | None:
    """The frozen reference; with an adapter over the policy (`adapted`) and no bias trained, the
    adapted policy itself, whose adapter is switched off to compute the reference. `loader`:
    `load_model`'s stand-in (a sharded run's meta model on all but the main process)."""
    from rlvr_cli.train.memory_estimate import reference_pass

    if not reference_pass(contract):  # the KL in the loss or watched by a rule: measured then
        return None
    ref = contract.artifacts.reference
    spec = contract.hyperparameters.adapter
    if adapted is not None and ref.same_as_policy and spec is not None and spec.bias == "none":
        return adapted
    if ref.same_as_policy:
        policy = contract.artifacts.policy
        source, revision = artifact_path(policy, folder, "policy"), policy.revision
    else:
        source, revision = artifact_path(ref, folder, "reference"), ref.revision
    model = (loader or load_model)(source, revision, dtype, device)
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def make_optimizer(contract: Contract, policy: Any) -> torch.optim.Optimizer:
    o = contract.hyperparameters.optimizer
    params = [p for p in policy.parameters() if p.requires_grad]
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=o.lr, weight_decay=o.weight_decay)
    cls = torch.optim.AdamW if o.name == "adamw" else torch.optim.Adam
    # PyTorch's fused kernel: one pass over each weight, its gradient and moments where the
    # default per-tensor loop makes ~10 (91 → 27 ms a step for 42 M parameters on 2 CPU threads),
    # the same update to float rounding. It leaves `Tensor._version` as it was, so the rollout
    # engine is told of every step (engine/engines.py). Sharded (DTensor) weights run it on each
    # process's shard (an element-wise update: no collective): 86 → 19 ms a step for the 53 M
    # model's halves on 2 processes.
    from torch.distributed.tensor import DTensor

    kinds = (torch.nn.Parameter, DTensor)
    fused = all(type(p) in kinds and p.device.type in ("cpu", "cuda") for p in params) or None
    return cls(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay, fused=fused)


def make_scheduler(contract: Contract, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    hp = contract.hyperparameters
    s = hp.schedule
    total = hp.max_steps * hp.steps_per_batch
    name, warmup = (s.name, s.warmup_steps) if s else ("constant", 0)

    def factor(step: int) -> float:
        if step < warmup:  # 1. linear warm-up
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if name == "linear":  # 2a. linear decay to 0
            return 1.0 - progress
        if name == "cosine":  # 2b. cosine decay to 0
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0  # 2c. constant

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def check_data(contract: Contract, contract_path: Path) -> DataReport:
    """The data check `rlvr data check` runs; a contract whose data has an error is not trained."""
    report = check(contract, contract_path.resolve().parent, contract_path.name, waivers.active(contract))
    if report.errors:
        first = next(f for f in report.findings if f.severity == "error")
        where = report.where(first.at, first.split)
        raise RlvrError(
            f"the data check found {report.errors} error(s), first {where}: [{first.code}] {first.message}; "
            f"`rlvr data check {contract_path}` lists them"
        )
    return report
