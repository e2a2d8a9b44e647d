"""torchrun on CPU (gloo): 2 processes × B/2 prompts equal 1 process × B prompts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import copy_experiment, rlvr, stopped_at_step_2, torchrun_launch, warm_launch

CONTRACT = "experiment.rlvr.yaml"


@pytest.fixture(scope="module")
def scaffold(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_experiment(
        single_turn, tmp_path_factory.mktemp("dist") / "arith", [("every_steps: 20", "every_steps: 2")]
    )


def torchrun(
    nproc: int,
    contract: Path,
    run_dir: Path,
    *extra: str,
    fault: str = "",
    restarts: int = 0,
    fresh: bool = False,
    **env: str,
) -> subprocess.CompletedProcess:
    """`torchrun … -m rlvr_cli train CONTRACT --run-dir RUN_DIR EXTRA…`, its processes forked from
    a warm interpreter (tests/zygote_workers.py) unless `fresh`."""
    launch = {**os.environ, "OMP_NUM_THREADS": "1", "RLVR_FAULT": fault, **env}
    argv = ["--standalone", f"--nproc_per_node={nproc}", f"--max-restarts={restarts}", "-m", "rlvr_cli", "train"]
    argv += [str(contract), "--run-dir", str(run_dir), *extra]
    if not fresh:
        return torchrun_launch(*argv, env=launch)
    launch.pop("PYTHON_EXEC", None)
    command = [sys.executable, "-m", "torch.distributed.run", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=launch)


def whitened_as_one(run: Path) -> None:
    """Each step's recorded advantages (every process's records) are its recorded rewards whitened
    over the whole batch, each answer weighed by its recorded trained tokens."""
    import pyarrow.parquet as pq

    from rlvr_cli.contract.load import load
    from rlvr_cli.train.advantages import group_advantages

    objective = load(run.parent / "exp" / CONTRACT).objective
    rows = [r for f in sorted((run / "records").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    for step in sorted({r["step"] for r in rows}):
        mine = sorted((r for r in rows if r["step"] == step), key=lambda r: (r["group"], r["sample"]))
        rewards = torch.tensor([r["reward"] for r in mine], dtype=torch.float64)
        tokens = torch.tensor([sum(r["loss_mask"]) for r in mine], dtype=torch.float64)
        recorded = torch.tensor([r["advantage"] for r in mine], dtype=torch.float64)
        assert len(set(tokens.tolist())) > 1, "every answer as long: the weighing tells nothing apart"
        torch.testing.assert_close(recorded, group_advantages(rewards, 8, objective, tokens), atol=1e-5, rtol=0)


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


FSDP2 = "  precision: fp32\n  parallel: {strategy: fsdp2, activation_checkpointing: %s}\n"
MINI = "  precision: fp32\n  mini_batches: 2\n"  # two optimizer steps a batch: groups 0, 2, … then 1, 3, …
#: REINFORCE++ with baseline: the advantages whitened over every process's answers, weighed by their tokens
WHITEN = "  precision: fp32\n  # advantage whitened over the batch's tokens\n"
ADVANTAGE = "advantage: {baseline: group_mean, scale: group_std, std: sample, epsilon: 1.0e-4}"
WHITENED = (
    "advantage: {baseline: group_mean, scale: none, whiten: "
    "{over: batch_tokens, std: sample, epsilon: 1.0e-8, epsilon_use: add_to_variance}}"
)
#: the entropy mask: its threshold the quantile of every process's tokens
ENTROPY = "  precision: fp32\n  # the policy loss on the top 0.2 of the step's tokens by entropy\n"
ENTROPY_FSDP2 = ENTROPY + "  parallel: {strategy: fsdp2}\n"  # its forward without gradient, sharded
LORA = (
    "  precision: fp32\n  adapter: {kind: lora, rank: 4, alpha: 8, dropout: 0.0, target_modules: all-linear, "
    "bias: none, init: default}\n"
)


def experiment(scaffold: Path, folder: Path, aggregation: str, parallel: str | None) -> Path:
    """The scaffold with this aggregation and parallel section, per-layer statistics each step."""
    shutil.copytree(scaffold, folder)
    contract = folder / CONTRACT
    text = contract.read_text().replace("aggregation: seq_mean_token_mean", f"aggregation: {aggregation}")
    text = text.replace("  holdout_every: 10\n", "  holdout_every: 10\n  layer_stats_every: 1\n")
    if parallel and "mini_batches" in parallel:  # its second mini-batch trains on rollouts one step old
        text = text.replace("max_policy_lag: 0", "max_policy_lag: 1")
    if parallel == WHITEN:  # answers of several lengths: each weighs as many tokens as it trains
        assert ADVANTAGE in text
        text = text.replace(ADVANTAGE, WHITENED).replace("max_response_tokens: 2", "max_response_tokens: 5")
        text = text.replace('response_length_mean, when: "> 2"', 'response_length_mean, when: "> 5"')
    if parallel and "by entropy" in parallel:  # answers of several tokens, some above the threshold and some below
        text = text.replace(
            f"aggregation: {aggregation}\n", f"aggregation: {aggregation}\n  entropy_mask: {{top: 0.2}}\n"
        )
        text = text.replace("max_response_tokens: 2", "max_response_tokens: 5")
        text = text.replace('response_length_mean, when: "> 2"', 'response_length_mean, when: "> 5"')
    contract.write_text(text.replace("  precision: fp32\n", parallel or "  precision: fp32\n"))
    return contract


_RUNS: dict[tuple[int, str, str | None], Path] = {}


def shared_run(
    processes: int, scaffold: Path, factory: pytest.TempPathFactory, aggregation: str, parallel: str | None
) -> Path:
    """A 3-step run of this many processes, aggregation and parallel section: made once per test
    process and shared by the tests that compare against it or resume from a copy of it."""
    key = (processes, aggregation, parallel)
    if key not in _RUNS:
        folder = factory.mktemp(f"run-{processes}")
        contract = experiment(scaffold, folder / "exp", aggregation, parallel)
        done = torchrun(processes, contract, folder / "run", "--max-steps", "3")
        assert done.returncode == 0, done.stderr[-3000:]
        _RUNS[key] = folder / "run"
    return _RUNS[key]


def one_process(scaffold: Path, factory: pytest.TempPathFactory, aggregation: str, parallel: str | None) -> Path:
    """The run a parallel one is held to: 1 process, no parallel section (with the adapter, if
    the run has one), or activation checkpointing alone where the run recomputes: the model's own
    forward then runs each row's prompt, which the layers' activation RMS counts. A 2-process
    run, ddp or fsdp2, equals it; so does a run resumed with another number of processes."""
    if parallel and "mini_batches" in parallel:
        parallel = MINI
    elif parallel == WHITEN:
        pass
    elif parallel and "by entropy" in parallel:
        parallel = ENTROPY
    elif parallel and "adapter" in parallel:
        parallel = LORA
    elif parallel and "activation_checkpointing: true" in parallel:
        parallel = FSDP2 % "true"
    else:
        parallel = None
    return shared_run(1, scaffold, factory, aggregation, parallel)


def two_processes(scaffold: Path, factory: pytest.TempPathFactory, aggregation: str, parallel: str | None) -> Path:
    return shared_run(2, scaffold, factory, aggregation, parallel)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("aggregation", "parallel"),
    [
        ("seq_mean_token_mean", None),
        ("token_mean", None),
        ("seq_mean_token_mean", FSDP2 % "false"),
        ("token_mean", FSDP2 % "true"),
        ("seq_mean_token_mean", FSDP2 % "false, reshard_after_forward: false, accumulate_whole_gradients: true"),
        ("token_mean", FSDP2 % "true, reshard_after_forward: false, accumulate_whole_gradients: true"),
        ("token_mean", LORA),
        ("seq_mean_token_mean", LORA + "  parallel: {strategy: fsdp2}\n"),
        ("token_mean", MINI),
        ("token_mean", WHITEN),
        ("seq_mean_token_mean", ENTROPY),
        ("seq_mean_token_mean", ENTROPY_FSDP2),
        (
            "seq_mean_token_mean",
            MINI + "  parallel: {strategy: fsdp2, reshard_after_forward: false, accumulate_whole_gradients: true}\n",
        ),
    ],
    ids=[
        "ddp-seq_mean_token_mean",
        "ddp-token_mean",
        "fsdp2-seq_mean_token_mean",
        "fsdp2-checkpointing-token_mean",
        "fsdp2-kept-gathered-whole-gradients-seq_mean_token_mean",
        "fsdp2-kept-gathered-whole-gradients-checkpointing-token_mean",
        "ddp-lora-token_mean",
        "fsdp2-lora-seq_mean_token_mean",
        "ddp-mini-batches-token_mean",
        "ddp-whitened-over-tokens-token_mean",
        "ddp-entropy-mask-seq_mean_token_mean",
        "fsdp2-entropy-mask-seq_mean_token_mean",
        "fsdp2-kept-gathered-whole-gradients-mini-batches-seq_mean_token_mean",
    ],
)
def test_two_processes_equal_one(
    scaffold: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, aggregation: str, parallel: str | None
) -> None:
    """The same parameters, whether every process holds the model (ddp) or 1/N of it (fsdp2),
    as one process training alone."""
    adapter = bool(parallel and "adapter" in parallel)
    one = one_process(scaffold, tmp_path_factory, aggregation, parallel)
    two = two_processes(scaffold, tmp_path_factory, aggregation, parallel)
    sharded = bool(parallel and "fsdp2" in parallel)
    weights = "adapter_model.safetensors" if adapter else "model.safetensors"  # an adapter run: the adapter
    a, b = load_file(one / "final" / weights), load_file(two / "final" / weights)
    assert sorted(a) == sorted(b)
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
    for x, y in zip(metrics(one), metrics(two), strict=True):
        assert x["reward_mean"] == y["reward_mean"]
        assert x["loss"] == pytest.approx(y["loss"], abs=1e-6)
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-5)
        layers = {k for k in x if k.startswith(("layer_grad_norm/", "layer_activation_rms/"))}
        assert len(layers) == 4 and layers == {k for k in y if k.startswith("layer_")}  # 2 layers, both signals
        for key in layers:  # a layer's gradient norm is over every shard, its RMS over every process's tokens
            assert x[key] == pytest.approx(y[key], rel=1e-4), key
    if parallel == WHITEN:  # every process's answers, each weighed by its own tokens, as rlvr_cli computes them
        whitened_as_one(two)
    for row in metrics(two):  # where the time went across processes
        assert row["time_collectives_s"] > 0 and row["rank_lag_s"] >= 0 and row["slowest_rank"] in (0.0, 1.0)
        assert 0 < row["mfu"] < 1
        assert 0.1 < row["memory_peak_gib"] < 16  # the larger process's resident peak so far
    plan = json.loads((two / "plan.json").read_text())
    assert plan["processes"] == 2
    assert plan["parallel"]["strategy"] == ("fsdp2" if sharded else "ddp")
    recomputed = bool(parallel and "activation_checkpointing: true" in parallel)
    assert ("model's own forward" in plan["update_forward"]) == recomputed, plan["update_forward"]
    assert plan["update_forward"].startswith("shared prompts") != recomputed  # fsdp2's units run it too
    manifest = json.loads((two / "records" / "manifest.json").read_text())
    assert sum(s["rows"] for s in manifest["shards"]) == 3 * 64  # one manifest, every rank's samples


@pytest.mark.slow
def test_nproc_launcher_and_world_size_on_resume(scaffold: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    launch = ("train", scaffold / CONTRACT, "--nproc", "2", "--run-dir", run_dir, "--auto")
    launched = rlvr(*launch, "--max-steps", "2", timeout=600)  # --auto on a new folder: every rank starts
    assert launched.code == 0 and "starting from step 0" in launched.stderr, launched.stderr[-3000:]
    again = rlvr(*launch, "--max-steps", "4", timeout=600)  # the same command again: every rank resumes
    assert again.code == 0 and "resuming from checkpoint step-2" in again.stderr, again.stderr[-3000:]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    single = rlvr("train", scaffold / CONTRACT, "--run-dir", run_dir, "--max-steps", "6", "--resume", timeout=600)
    assert single.code == 1 and "written under torchrun" in single.stderr, single.stderr[-2000:]


TEARDOWN = """
import atexit, os, sys


def teardown():  # runs only in the interpreter's teardown; noted for a process of `rlvr` (not its workers)
    import multiprocessing

    if sys.argv[0].endswith("rlvr_cli/__main__.py") and multiprocessing.parent_process() is None:
        open(os.path.join(os.environ["RLVR_TEARDOWN_DIR"], f"rank-{os.environ.get('RANK', 'alone')}"), "w").close()


if "RLVR_TEARDOWN_DIR" in os.environ:
    atexit.register(teardown)
"""


@pytest.mark.slow
def test_a_process_of_a_finished_run_of_several_ends_without_the_interpreters_teardown(
    scaffold: Path, tmp_path: Path
) -> None:
    """FSDP2's state and its gloo groups outlive the run; the interpreter's teardown would destroy
    them with gloo's threads still holding work, which can abort a process after a finished run
    (torchrun then reports it failed). Every process of a run of several ends without that
    teardown, with its exit code and its output whole; a single process keeps the teardown."""
    hooks, marks = tmp_path / "hooks", tmp_path / "marks"
    hooks.mkdir()
    marks.mkdir()
    (hooks / "sitecustomize.py").write_text(TEARDOWN)
    env = {
        "PYTHONPATH": os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]),
        "RLVR_TEARDOWN_DIR": str(marks),
    }
    contract = experiment(scaffold, tmp_path / "exp", "seq_mean_token_mean", FSDP2 % "false")
    done = torchrun(2, contract, tmp_path / "run", "--max-steps", "1", fresh=True, **env)  # interpreters' own ends
    assert done.returncode == 0, done.stderr[-3000:]
    assert "finished: reached step 1" in done.stderr + done.stdout
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "finished"
    assert sorted(p.name for p in marks.iterdir()) == []  # no process ran the teardown
    command = [sys.executable, "-m", "rlvr_cli", "train", str(contract), "--run-dir", str(tmp_path / "alone")]
    alone = subprocess.run(
        [*command, "--max-steps", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert sorted(p.name for p in marks.iterdir()) == ["rank-alone"]  # the marker works where it should


def _rank_gradient(rank: int, world: int, port: int, global_counts: bool, out: str) -> None:
    import torch.distributed as tdist

    from rlvr_cli.train import distributed
    from rlvr_cli.train.objective import policy_loss
    from tests.train.test_objective import objective

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    tdist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    base, mask, adv = torch.randn(8, 5), (torch.rand(8, 5) > 0.5).int(), torch.randn(8)
    mask[:, 0] = 1
    mask[4:, 1:] = 0  # rank 1's half holds far fewer tokens: local means weigh them differently
    rows = torch.arange(8).chunk(world)[rank]
    logp = base[rows].clone().requires_grad_(True)
    totals = (
        {"total_tokens": distributed.total(float(mask[rows].sum())), "total_sequences": 8.0} if global_counts else {}
    )
    loss, _ = policy_loss(logp, base[rows], None, adv[rows], mask[rows], objective(), max_response_tokens=5, **totals)
    loss.backward()
    grads = [None] * world
    tdist.all_gather_object(grads, logp.grad)
    if rank == 0:
        torch.save(torch.cat(grads), out)
    tdist.destroy_process_group()


def _gradient(world: int, global_counts: bool, tmp_path: Path) -> torch.Tensor:
    import torch.multiprocessing as mp

    from rlvr_cli.env.agent import free_port

    out = str(tmp_path / f"g-{world}-{global_counts}.pt")
    mp.spawn(_rank_gradient, args=(world, free_port(), global_counts, out), nprocs=world, join=True)
    return torch.load(out)


@pytest.mark.slow
def test_per_rank_local_token_means_would_differ(tmp_path: Path) -> None:
    """The equivalence above can fail: dividing by each rank's own token count is the wrong way."""
    single = _gradient(1, True, tmp_path)
    assert torch.allclose(_gradient(2, True, tmp_path), single, atol=1e-7)
    assert not torch.allclose(_gradient(2, False, tmp_path) / 2, single, atol=1e-4)


def assert_same_final(run: Path, reference: Path, weights: str = "model.safetensors") -> None:
    a, b = load_file(run / "final" / weights), load_file(reference / "final" / weights)
    assert sorted(a) == sorted(b)
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_a_run_resumes_with_another_number_of_processes_and_between_whole_weights_and_shards(
    scaffold: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """1 → 2 processes continue the same run (2 → 1: the adapter test below): the data cursor and
    the per-group seeds are global, each process re-derives its share of the groups, and DCP gives
    each its part of the shards. A run may also change `parallel.strategy` on resume: fsdp2's
    shards load whole into a ddp run, and a ddp run's whole weights and optimizer state load
    into fsdp2's shards. Each ends where one process training straight through ends (2 processes
    equal it: the test above); without the optimizer state the last step would land ~5e-3 away."""
    straight = one_process(scaffold, tmp_path_factory, "seq_mean_token_mean", None)
    sharded = experiment(scaffold, tmp_path / "sharded", "seq_mean_token_mean", FSDP2 % "false")
    whole = experiment(scaffold, tmp_path / "whole", "seq_mean_token_mean", None)
    run = tmp_path / "one-then-two"
    begun = torchrun(1, sharded, run, "--max-steps", "2")
    assert begun.returncode == 0, begun.stderr[-3000:]
    written = run / "checkpoints" / "step-2"
    assert json.loads((written / "trainer.json").read_text())["world_size"] == 1
    assert [p.name for p in (written / "shards").glob("*.distcp")] == ["__0_0.distcp"]
    assert not (written / "model").exists()
    shutil.copytree(run, tmp_path / "shards-then-whole")
    resumed = torchrun(2, sharded, run, "--max-steps", "3", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_final(run, straight)
    for contract, folder, then, change in (
        (whole, tmp_path / "shards-then-whole", 1, "fsdp2 → ddp"),
        (sharded, stopped_at_step_2(straight, tmp_path / "whole-then-shards"), 2, "ddp → fsdp2"),
    ):
        resumed = torchrun(then, contract, folder, "--max-steps", "3", "--resume")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"hyperparameters.parallel.strategy: {change}" in resumed.stderr, resumed.stderr[-2000:]
        assert_same_final(folder, straight)
    # whole weights that hold NaN: the main process refuses them, and every process stops (none waits)
    from safetensors.torch import save_file

    diverged = stopped_at_step_2(straight, tmp_path / "diverged")
    nan = {k: torch.full_like(v, float("nan")) for k, v in load_file(straight / "final" / "model.safetensors").items()}
    written = diverged / "checkpoints" / "step-2"
    save_file(nan, str(tmp_path / "nan.safetensors"), metadata={"format": "pt"})
    _forge(written, (tmp_path / "nan.safetensors").read_bytes(), "model/model.safetensors")
    refused = torchrun(2, sharded, diverged, "--max-steps", "3", "--resume")
    assert refused.returncode != 0 and "hold(s) NaN or infinity" in refused.stderr, refused.stderr[-2000:]


@pytest.mark.slow
def test_a_sharded_adapter_run_keeps_the_adapter_alone_and_resumes_with_another_number_of_processes(
    scaffold: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """fsdp2 with an adapter: each process holds 1/N of the base and of the adapter; the
    checkpoint's shards hold the adapter and its optimizer state (never the frozen base, nor its
    tied head); 2 → 1 processes continue the run; final/ is the adapter in peft's format, and
    final/merged/ the base with it merged, as peft merges it. A one-process run's adapter (peft's
    format, whole) continues in shards on 2 processes."""
    import pickle

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    sharded = LORA.replace("init: default}", "init: default, save_merged: true}") + "  parallel: {strategy: fsdp2}\n"
    folder, run = tmp_path / "exp", tmp_path / "run"
    contract = experiment(scaffold, folder, "seq_mean_token_mean", sharded)
    straight = one_process(scaffold, tmp_path_factory, "seq_mean_token_mean", sharded)  # the adapter, 1 process
    begun = torchrun(2, contract, run, "--max-steps", "2")
    assert begun.returncode == 0, begun.stderr[-3000:]
    written = run / "checkpoints" / "step-2" / "shards" / ".metadata"
    weights = [k for k in pickle.loads(written.read_bytes()).state_dict_metadata if k.startswith("model.")]
    assert weights and all(".lora_" in k for k in weights), weights  # our own file: plain pickle is safe here
    resumed = torchrun(1, contract, run, "--max-steps", "3", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = (load_file(r / "final" / "adapter_model.safetensors") for r in (run, straight))
    assert sorted(a) == sorted(b) and len(a) == 2 * 7 * 2  # 2 layers, 7 linear layers each, A and B
    assert_same_final(run, straight, "adapter_model.safetensors")
    whole = stopped_at_step_2(straight, tmp_path / "whole-then-shards")
    assert (whole / "checkpoints" / "step-2" / "adapter").is_dir()
    lora_fsdp2 = experiment(
        scaffold, tmp_path / "exp-whole", "seq_mean_token_mean", LORA + "  parallel: {strategy: fsdp2}\n"
    )
    resumed = torchrun(2, lora_fsdp2, whole, "--max-steps", "3", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_final(whole, straight, "adapter_model.safetensors")
    assert any(a[k].abs().max() > 0 for k in a if "lora_B" in k)  # B starts at 0: it trained
    base = AutoModelForCausalLM.from_pretrained(folder / "model")
    expected = PeftModel.from_pretrained(base, run / "final").merge_and_unload().state_dict()
    merged = AutoModelForCausalLM.from_pretrained(run / "final" / "merged").state_dict()
    assert sorted(merged) == sorted(expected)
    for key in merged:
        torch.testing.assert_close(merged[key], expected[key], atol=1e-6, rtol=1e-5)


def _forge(checkpoint: Path, data: bytes, file: str = "shards/.metadata") -> None:
    """Replace a file of a checkpoint, with a COMPLETE marker that matches (a foreign checkpoint
    brings its own)."""
    from rlvr_cli.files import sha256_file

    (checkpoint / file).write_bytes(data)
    sums = {p.relative_to(checkpoint).as_posix(): sha256_file(p) for p in sorted(checkpoint.rglob("*")) if p.is_file()}
    sums.pop("COMPLETE", None)
    (checkpoint / "COMPLETE").write_text(json.dumps({"files": sums}))


@pytest.mark.slow
def test_a_kill_while_shards_are_written_leaves_the_last_checkpoint_and_foreign_shards_run_no_code(
    scaffold: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import pickle

    contract = experiment(scaffold, tmp_path / "exp", "seq_mean_token_mean", FSDP2 % "false")
    contract.write_text(contract.read_text().replace("every_steps: 2", "every_steps: 1"))
    run = tmp_path / "run"
    killed = torchrun(2, contract, run, "--max-steps", "3", fault="kill_in_shards@2")
    assert killed.returncode != 0
    assert (run / "checkpoints" / ".step-2.tmp" / "shards").is_dir()  # shards written, never published
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if not p.name.startswith(".")) == ["step-1"]
    resumed = torchrun(2, contract, run, "--max-steps", "3", "--auto")
    assert resumed.returncode == 0 and "resuming from checkpoint step-1" in resumed.stderr, resumed.stderr[-3000:]
    straight = two_processes(scaffold, tmp_path_factory, "seq_mean_token_mean", FSDP2 % "false")  # every 2 steps
    a, b = load_file(run / "final" / "model.safetensors"), load_file(straight / "final" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)

    class Payload:
        def __reduce__(self):  # what a hostile checkpoint's pickle would run on load
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    _forge(run / "checkpoints" / "step-3", pickle.dumps(Payload()))
    again = torchrun(1, contract, run, "--max-steps", "4", "--resume")
    assert again.returncode == 1 and "not part of a checkpoint's metadata" in again.stderr, again.stderr[-3000:]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.slow
def test_a_rank_that_dies_or_hangs_stops_the_run_with_a_truthful_status_and_auto_goes_on(
    scaffold: Path, tmp_path: Path
) -> None:
    """Rank 1 dies at the start of step 3; relaunched, it hangs there instead (the others wait
    RLVR_COLLECTIVE_TIMEOUT_S seconds in their next collective); relaunched again under torchrun's
    restarts, it dies once more and the restarted processes finish the run."""
    run = tmp_path / "run"
    contract = scaffold / CONTRACT
    died = torchrun(2, contract, run, "--max-steps", "4", fault="kill_rank@3")
    assert died.returncode != 0 and "a bug in rlvr" not in died.stderr, died.stderr[-3000:]
    status = json.loads((run / "status.json").read_text())
    # which comes first is timing: the main rank's next collective fails, or torchrun's SIGTERM arrives
    if status["state"] == "failed":
        assert "another process of the run stopped during step 3" in status["reason"], status
        assert "another process of the run stopped during step 3" in died.stderr
    else:
        assert status["state"] == "paused" and "interrupted by SIGTERM at step 3" in status["reason"], status
    assert "kept checkpoint step-2" in status["next"] and "--auto" in status["next"]
    assert "--max-steps 4 --nproc 2" in status["next"]  # the command goes on with this run's shape
    wrong = torchrun(1, contract, run, "--max-steps", "4", "--auto", RLVR_COLLECTIVE_TIMEOUT_S="soon")
    said = "error: RLVR_COLLECTIVE_TIMEOUT_S='soon': give the seconds"  # rlvr's message, not a crash
    assert wrong.returncode == 1 and said in wrong.stderr, wrong.stderr[-2000:]
    hung = torchrun(2, contract, run, "--max-steps", "4", "--auto", fault="hang_rank@3", RLVR_COLLECTIVE_TIMEOUT_S="8")
    assert hung.returncode != 0, hung.stderr[-3000:]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and "did not answer in time" in status["reason"], status
    assert "during step 3" in status["reason"] and "kept checkpoint step-2" in status["next"], status
    # relaunched as docs/scale.md says, with torchrun restarting the processes when one dies: rank
    # 1 dies again (the same moment, once), and the restarted processes go on from step-2 again
    again = torchrun(2, contract, run, "--max-steps", "4", "--auto", fault="kill_rank@3", restarts=1)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("resuming from checkpoint step-2") == 2, again.stderr[-3000:]
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3], steps  # each of the 4 steps once (metrics count from 0)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for runs without a GPU")
def test_cpu_offload_without_a_gpu_is_refused_with_the_reason(scaffold: Path, tmp_path: Path) -> None:
    folder = tmp_path / "exp"
    shutil.copytree(scaffold, folder)
    contract = folder / CONTRACT
    offload = "  precision: fp32\n  parallel: {strategy: fsdp2, cpu_offload: true}\n"
    contract.write_text(contract.read_text().replace("  precision: fp32\n", offload))
    refused = rlvr("train", contract, "--nproc", "1", "--run-dir", tmp_path / "run", "--max-steps", "1", timeout=300)
    assert refused.code != 0 and "drop cpu_offload for CPU runs" in refused.stderr, refused.stderr[-2000:]
    assert "internal error" not in refused.stderr


SETUP = """
import json, os, resource, sys
from pathlib import Path
from rlvr_cli.contract.load import load
from rlvr_cli.train import distributed as dist, setup
from rlvr_cli.train.faults import Fault

peak = {}
shard_loaded = setup.shard_loaded


def measured(*args, **kwargs):  # the peak up to the end of loading and sharding
    shard_loaded(*args, **kwargs)
    peak["loaded"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


if __name__ == "__main__":  # the verifier's worker processes import this file too
    dist.init()
    path = Path(sys.argv[1])
    base = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    setup.shard_loaded = measured
    built = setup.build(load(path), path.resolve().parent, Fault.none())
    out = Path(sys.argv[2]) / f"rank-{built.rank}.json"  # a file each: two ranks' prints can share a line
    out.write_text(json.dumps({"rank": built.rank, "added": peak["loaded"] - base}))
    dist.shutdown()
"""


@pytest.mark.slow
def test_only_the_main_process_reads_the_weights_of_a_sharded_run(scaffold: Path, tmp_path: Path) -> None:
    """A bf16 checkpoint trained with fp32 weights: a process that loads it holds the policy and
    the reference whole in fp32 while it shards them. Under fsdp2 only the main process does; the
    other builds the model on the meta device and receives its shard tensor by tensor, so up to
    the end of sharding it adds at least one whole fp32 copy less (before, both processes loaded
    the same). The torchrun tests above show it receives the same weights (2 processes train
    what 1 does)."""
    from transformers import AutoModelForCausalLM

    from rlvr_cli.toy.tiny import build_tiny

    folder = tmp_path / "exp"
    shutil.copytree(scaffold, folder, ignore=shutil.ignore_patterns("model"))
    build_tiny(folder / "model", hidden=768, layers=9)
    model = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.bfloat16)
    model.save_pretrained(folder / "model")
    parameters = sum(p.numel() for p in model.parameters())
    contract = folder / CONTRACT
    contract.write_text(contract.read_text().replace("  precision: fp32\n", FSDP2 % "false"))
    (tmp_path / "setup.py").write_text(SETUP)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run(
        [*command, str(tmp_path / "setup.py"), str(contract), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_TRIM_THRESHOLD_": "0"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(path.read_text()) for path in tmp_path.glob("rank-*.json")]
    added = {r["rank"]: r["added"] for r in rows}
    print("setup adds (bytes, by rank):", added, "parameters:", parameters)
    assert added[1] < added[0] - 4 * parameters, (added, parameters)


COUNT = """
import json, os, sys
import torch.distributed.fsdp._fully_shard._fsdp_param_group as group
from rlvr_cli.__main__ import main

counts = {"gathers": 0, "scatters": 0}


def counting(real, key):
    def counted(*args, **kwargs):
        counts[key] += 1
        return real(*args, **kwargs)

    return counted


if __name__ == "__main__":  # the verifier's worker processes import this file too
    group.foreach_all_gather = counting(group.foreach_all_gather, "gathers")
    group.foreach_reduce = counting(group.foreach_reduce, "scatters")
    sys.argv = ["rlvr", *sys.argv[1:]]
    try:
        main()
    except SystemExit as stop:
        assert not stop.code, stop.code
    run = os.path.basename(os.environ["RLVR_TEST_RUN"])
    out = os.path.join(os.environ["RLVR_TEST_COUNTS"], f"{run}-{os.environ['RANK']}.json")
    with open(out, "w") as fh:
        json.dump(counts, fh)
"""


@pytest.mark.slow
def test_what_stays_gathered_or_whole_in_a_training_pass_saves_the_collectives_the_plan_names(
    scaffold: Path, tmp_path: Path
) -> None:
    """One step, 2 processes, 2 micro-batches each, 3 units (2 layers and the rest): FSDP2's
    all-gathers and reduce-scatters counted. The runs differ only in the training pass. By
    default a unit is gathered for each micro-batch's forward and again for its backward (4 a
    unit) and reduce-scattered once a micro-batch (2); `reshard_after_forward: false` gathers it
    once a pass (3 × 3 fewer all-gathers); `accumulate_whole_gradients` reduce-scatters once a
    pass (3 fewer), and gathers no more: both keys in one run, each saving what it names.
    `rlvr plan` says how many a step runs."""
    (tmp_path / "count.py").write_text(COUNT)
    counts, planned = {}, {}
    runs = {"default": "", "kept-whole": ", reshard_after_forward: false, accumulate_whole_gradients: true"}
    for name, keys in runs.items():
        folder = tmp_path / name
        shutil.copytree(scaffold, folder)
        contract = folder / CONTRACT
        parallel = f"  precision: fp32\n  parallel: {{strategy: fsdp2{keys}}}\n"
        contract.write_text(contract.read_text().replace("  precision: fp32\n", parallel))
        run = tmp_path / f"run-{name}"
        done = torchrun_launch(
            *["--standalone", "--nproc_per_node=2", tmp_path / "count.py", "train", contract, "--run-dir", run],
            *["--max-steps", "1"],
            env={**os.environ, "OMP_NUM_THREADS": "1", "RLVR_TEST_COUNTS": str(tmp_path), "RLVR_TEST_RUN": str(run)},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        ranks = [json.loads((tmp_path / f"run-{name}-{rank}.json").read_text()) for rank in (0, 1)]
        assert ranks[0] == ranks[1], ranks  # in lockstep
        counts[name] = ranks[0]
        plan = rlvr("plan", contract, "--gpus", "2").stdout  # what it says a step runs (the holdout apart)
        said = plan.split("all-gathers,")[0].rsplit(None, 1)[-1], plan.split(" reduce-scatters,")[0].rsplit(None, 1)[-1]
        planned[name] = {"gathers": int(said[0]) + 3, "scatters": int(said[1])}  # + the holdout at step 0: 3
    print(counts, planned)
    assert planned == counts
    assert counts["default"]["gathers"] - counts["kept-whole"]["gathers"] == 3 * 3
    assert counts["default"]["scatters"] == 2 * 3 and counts["kept-whole"]["scatters"] == 3


@pytest.mark.parametrize("key", ["reshard_after_forward: false", "accumulate_whole_gradients: true"])
def test_an_fsdp2_key_under_ddp_is_refused_as_changing_nothing(scaffold: Path, tmp_path: Path, key: str) -> None:
    folder = tmp_path / "exp"
    shutil.copytree(scaffold, folder)
    contract = folder / CONTRACT
    text = contract.read_text()
    contract.write_text(
        text.replace("  precision: fp32\n", f"  precision: fp32\n  parallel: {{strategy: ddp, {key}}}\n")
    )
    out = rlvr("validate", contract)
    assert out.code == 1 and "RLV003" in out.stdout and "applies to strategy fsdp2 only" in out.stdout, out.stdout
    contract.write_text(
        text.replace("  precision: fp32\n", f"  precision: fp32\n  parallel: {{strategy: fsdp2, {key}}}\n")
    )
    assert rlvr("validate", contract).code == 0  # the paired pass


def test_sample_groups_is_refused_where_episodes_are_sampled_together_always(
    scaffold: Path, tool_use: Path, tmp_path: Path
) -> None:
    section = "  precision: fp32\n  parallel: {strategy: ddp, sample_groups: together}\n"
    agent = copy_experiment(tool_use, tmp_path / "agent", [("  precision: fp32\n", section)])
    out = rlvr("validate", agent / CONTRACT)
    assert out.code == 1 and "RLV003" in out.stdout and "sample_groups applies to single-turn" in out.stdout, out.stdout
    arith = copy_experiment(scaffold, tmp_path / "arith", [("  precision: fp32\n", section)])
    assert rlvr("validate", arith / CONTRACT).code == 0  # the paired pass


def seeds_by_group(run: Path) -> dict[tuple[int, int], set[int]]:
    import pyarrow.parquet as pq

    rows = [r for shard in sorted((run / "records").glob("*.parquet")) for r in pq.read_table(shard).to_pylist()]
    out: dict[tuple[int, int], set[int]] = {}
    for row in rows:
        out.setdefault((row["step"], row["group"]), set()).add(row["seed"])
    return out


@pytest.mark.slow
def test_groups_sampled_together_resume_exactly_with_as_many_processes_and_say_so_with_another(
    scaffold: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`parallel.sample_groups: together`: each process samples its share of a step's groups in
    one batch seeded by its rank (the records say so: a process's groups share one seed, where
    alone each group has its own), which changes the samples; resumed by as many processes the
    run ends where it ends straight through; resumed by another number it goes on and says that
    the samples from there are that number's."""
    parallel = "  precision: fp32\n  parallel: {strategy: ddp, sample_groups: together}\n"
    contract = experiment(scaffold, tmp_path / "exp", "token_mean", parallel)
    straight = tmp_path / "straight"
    done = torchrun(2, contract, straight, "--max-steps", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    together, alone = (
        seeds_by_group(straight),
        seeds_by_group(two_processes(scaffold, tmp_path_factory, "token_mean", None)),
    )
    assert together.keys() == alone.keys() and all(len(s) == 1 for s in [*together.values(), *alone.values()])
    for step in {step for step, _ in together}:
        mine = [together[(s, g)] for s, g in sorted(together) if s == step]
        assert mine[0::2] == [mine[0]] * len(mine[0::2]) and mine[1::2] == [mine[1]] * len(mine[1::2])  # one a rank
        assert mine[0] != mine[1]
        assert len({next(iter(alone[(s, g)])) for s, g in alone if s == step}) == len(mine)  # one a group
    resumed = stopped_at_step_2(straight, tmp_path / "resumed")
    again = torchrun(2, contract, resumed, "--max-steps", "3", "--resume")
    assert again.returncode == 0 and "samples are those of" not in again.stderr, again.stderr[-3000:]
    assert_same_final(resumed, straight)
    other = stopped_at_step_2(straight, tmp_path / "other")
    one = torchrun(1, contract, other, "--max-steps", "3", "--resume")
    assert one.returncode == 0, one.stderr[-3000:]
    said = "resuming as 1 process under torchrun from a checkpoint of 2 processes under torchrun"
    assert said in one.stderr and "samples are those of 1 process under torchrun" in one.stderr, one.stderr[-3000:]


@pytest.mark.slow
def test_two_nodes_launched_as_docs_scale_says_train_as_one_process_does(
    scaffold: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """docs/scale.md's several-node torchrun line, run as written on this machine as two nodes
    of one process each (the c10d rendezvous on 127.0.0.1): one run, one main process; rank 1
    dies once after step 2's checkpoint, torchrun restarts both processes, they go on from it,
    and the run ends with the same parameters as one process training alone."""
    import re
    import socket

    from tests.conftest import ROOT

    block = (ROOT / "docs" / "scale.md").read_text().split("Several nodes")[1].split("```")[1]
    words = block.replace("\\\n", " ").split()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RLVR_FAULT": "kill_rank@2"}
    while "=" in words[0]:  # the line's environment
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    line = " ".join(words)
    assert line.startswith("torchrun --nnodes=4 --nproc_per_node=8 --max-restarts=3 "), line
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    contract = experiment(scaffold, tmp_path / "exp", "seq_mean_token_mean", None)
    for name, value in {
        "--nnodes=4": "--nnodes=2",
        "--nproc_per_node=8": "--nproc_per_node=1",
        "$HEAD_NODE:29500": f"127.0.0.1:{port}",
        "$JOB_ID": "two-nodes",
        "experiment.rlvr.yaml": str(contract),
        "/shared/runs/r1": str(tmp_path / "run"),
    }.items():
        assert name in line, name
        line = line.replace(name, value)
    assert not re.search(r"\$\w+", line), line  # nothing left for a node to fill in
    command = [sys.executable, "-m", "torch.distributed.run", *line.split()[1:], "--max-steps", "3"]
    nodes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=warm_launch(env))
        for _ in "ab"
    ]
    outputs = [node.communicate(timeout=600)[1] for node in nodes]
    assert [n.returncode for n in nodes] == [0, 0], [err[-3000:] for err in outputs]
    assert not any("warning: torchrun restarts" in err for err in outputs)  # the line's store is not shared
    printed = [err for err in outputs if "finished: reached step 3" in err]
    assert len(printed) == 1, [err[-2000:] for err in outputs]  # one main process, on one node
    assert "resuming from checkpoint step-2" in printed[0]
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "finished"
    assert json.loads((tmp_path / "run" / "plan.json").read_text())["processes"] == 2
    one = one_process(scaffold, tmp_path_factory, "seq_mean_token_mean", None)
    a, b = load_file(one / "final" / "model.safetensors"), load_file(tmp_path / "run" / "final" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
    assert [json.loads(x)["reward_mean"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()] == [
        row["reward_mean"] for row in metrics(one)
    ]


@pytest.mark.parametrize(
    ("env", "warned", "own_keys"),
    [
        ({"GROUP_WORLD_SIZE": "2", "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_USE_AGENT_STORE": "True"}, 1, 0),
        ({"GROUP_WORLD_SIZE": "2", "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_USE_AGENT_STORE": "False"}, 0, 0),
        ({"GROUP_WORLD_SIZE": "2", "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"}, 0, 0),
        ({"GROUP_WORLD_SIZE": "1", "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_USE_AGENT_STORE": "True"}, 0, 1),
    ],
    ids=["nodes-restarts-shared-store", "nodes-own-stores", "nodes-no-restarts", "one-node"],
)
def test_restarts_over_a_shared_store_are_made_safe_on_one_node_and_said_on_several(
    monkeypatch: pytest.MonkeyPatch, env: dict, warned: int, own_keys: int
) -> None:
    """What torchrun tells each process decides: on one node each attempt's keys go under a
    prefix of its own; across nodes with restarts and the store shared, the run warns."""
    from rlvr_cli.train import distributed

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert distributed._restarts_share_a_store() == bool(warned)
    assert distributed._keys_apart() == bool(own_keys)


@pytest.mark.slow
def test_a_process_that_cannot_see_the_run_folder_or_a_refused_start_stops_every_process_with_the_reason(
    scaffold: Path, tmp_path: Path
) -> None:
    """Two nodes whose run folders differ (as a node-local disk under the same path would): every
    process stops before training, naming the one that cannot see what process 0 writes. And a
    start the main process refuses stops the others with a message, not an internal error."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1"]
    launch += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=apart"]
    env = warm_launch({**os.environ, "OMP_NUM_THREADS": "1"})
    nodes = [
        subprocess.Popen(
            [
                *launch,
                "-m",
                "rlvr_cli",
                "train",
                str(scaffold / CONTRACT),
                "--run-dir",
                str(tmp_path / f"run-{n}"),
                "--auto",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in "ab"
    ]
    outputs = [node.communicate(timeout=300)[1] for node in nodes]
    assert all(node.returncode != 0 for node in nodes), outputs
    for err in outputs:
        assert "process 1 on " in err and "cannot see the run folder" in err, err[-3000:]
        assert "bug in rlvr" not in err
    assert not list(tmp_path.glob("run-*/metrics.jsonl")) and not list(tmp_path.glob("run-*/plan.json"))

    held = tmp_path / "held"
    held.mkdir()
    (held / "notes.txt").write_text("a run's folder\n")
    refused = torchrun(2, scaffold / CONTRACT, held, "--max-steps", "1")
    assert refused.returncode != 0
    assert (
        "already holds a run" in refused.stderr
        and "process 0 of the run stopped before training began" in refused.stderr
    )
    assert "bug in rlvr" not in refused.stderr, refused.stderr[-3000:]


@pytest.mark.slow
def test_the_data_check_runs_in_the_main_process_alone_and_its_refusal_stops_every_process(
    scaffold: Path, tmp_path: Path
) -> None:
    """The data check before training runs once (process 0), not once a process at the same time;
    data it refuses stops every process: the reason said once, by process 0, the others naming it."""
    folder = copy_experiment(scaffold, tmp_path / "exp", [])
    leaked = (folder / "data" / "holdout.jsonl").read_text().splitlines()[0]
    with (folder / "data" / "train.jsonl").open("a") as train:
        train.write(leaked + "\n")
    done = rlvr("train", folder / CONTRACT, "--nproc", "2", "--run-dir", tmp_path / "run", "--max-steps", "1")
    assert done.code == 1 and not (tmp_path / "run" / "metrics.jsonl").exists(), done.stderr[-3000:]
    assert done.stderr.count("the data check found") == 1 and "[RLV405]" in done.stderr, done.stderr[-3000:]
    assert "process 0 of the run stopped before training began" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "bug in rlvr" not in done.stderr, done.stderr[-3000:]


RATIO = "  ratio: {level: token, denominator: engine}\n  aggregation: "
DYNAMIC = "  padding_side: left\n  dynamic_sampling: {drop_uniform_groups: true, max_rounds: 3, log_by: [difficulty]}\n"


@pytest.mark.slow
def test_dynamic_sampling_over_two_sharded_processes_trains_what_one_process_trains(
    scaffold: Path, tmp_path: Path
) -> None:
    """DAPO's dynamic sampling under torchrun: each round samples the groups the step still lacks
    over every process (they agree on how many were accepted), numbers them after the earlier
    rounds' groups, and each process trains the groups it accepted, however many (fsdp2: the one
    with fewer micro-batches joins the others' collectives with empty ones, as in holdout_nll's
    forwards). Two sharded processes draw the same samples and end at the same weights as one."""
    runs = {}
    for n, parallel in ((1, "  precision: fp32\n"), (2, FSDP2 % "false")):
        contract = experiment(scaffold, tmp_path / f"exp-{n}", "token_mean", parallel)
        text = contract.read_text()
        assert "  padding_side: left\n" in text
        text = text.replace("  holdout_every: 10\n", "  holdout_every: 10\n  reference_answers: answer\n")
        contract.write_text(text.replace("  padding_side: left\n", DYNAMIC))
        done = torchrun(n, contract, tmp_path / f"run-{n}", "--max-steps", "3")
        assert done.returncode == 0, done.stderr[-3000:]
        runs[n] = tmp_path / f"run-{n}"
    # holdout_nll's one micro-batch of references on process 0; process 1 joins its gathers empty
    nll = [json.loads((runs[n] / "holdout-start.json").read_text())["holdout_nll"] for n in (1, 2)]
    assert nll[1] == pytest.approx(nll[0], rel=1e-6)
    one, two = metrics(runs[1]), metrics(runs[2])
    counted = ("groups_generated", "groups_accepted", "dynamic_sampling_rounds", "reward_mean")
    for x, y in zip(one, two, strict=True):
        assert {k: x[k] for k in counted} == {k: y[k] for k in counted}
        rates = {k: v for k, v in x.items() if k.startswith("accept_rate/")}
        assert rates and rates == {k: v for k, v in y.items() if k.startswith("accept_rate/")}
    assert any(r["dynamic_sampling_rounds"] > 1 and r["groups_accepted"] > 0 for r in one), one
    assert sum(r["groups_generated"] for r in one) > 3 * 8  # later rounds sampled more groups
    import pyarrow.parquet as pq

    def rows(run: Path) -> list[tuple]:
        found = [r for s in sorted((run / "records").glob("*.parquet")) for r in pq.read_table(s).to_pylist()]
        return sorted(
            (r["step"], r["round"], r["group"], r["sample"], r["response_text"], r["discard_reason"]) for r in found
        )

    a, b = rows(runs[1]), rows(runs[2])
    assert a == b and len({r[:4] for r in a}) == len(a)  # the same samples, each group numbered once in its step
    for step in range(3):
        numbers = sorted({(r[1], r[2]) for r in a if r[0] == step})
        assert [g for _, g in numbers] == list(range(len(numbers)))  # later rounds go on from the earlier ones
    assert_same_final(runs[2], runs[1])


def test_groups_that_cannot_be_shared_out_are_refused_with_the_reason_before_any_launch(
    scaffold: Path, tmp_path: Path
) -> None:
    """`rlvr train --nproc 3` of a contract whose 2 groups a step cannot be shared among 3
    processes: refused before torchrun starts, with the reason said once, exit 1, no traceback."""
    folder = copy_experiment(scaffold, tmp_path / "exp", [("prompts_per_step: 8", "prompts_per_step: 2")])
    assert rlvr("validate", folder / CONTRACT).code == 0  # the contract itself is sound
    done = rlvr("train", folder / CONTRACT, "--nproc", "3", "--run-dir", tmp_path / "run", "--max-steps", "1")
    assert done.code == 1 and not (tmp_path / "run").exists(), done.stderr[-3000:]
    said = "prompts_per_step (2) must be divisible by the 3 processes"
    assert done.stderr.count(said) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "launching:" not in done.stderr and "stopped first" not in done.stderr, done.stderr[-3000:]
    fine = rlvr("train", folder / CONTRACT, "--nproc", "2", "--run-dir", tmp_path / "run", "--max-steps", "0")
    assert fine.code == 2 and "--max-steps must be at least 1" in fine.stderr, fine.stderr[-3000:]  # not the contract's


def test_an_invalid_contract_under_nproc_is_said_once_before_any_launch(scaffold: Path, tmp_path: Path) -> None:
    """A contract `validate` refuses: `--nproc 2` says so once, with file:line:col and the rule
    code, and starts no process (before, each process said it among torchrun's lines)."""
    folder = copy_experiment(scaffold, tmp_path / "exp", [("group_size: 8", "group_size: 1")])
    checked = rlvr("validate", folder / CONTRACT)
    assert checked.code == 1, checked.stdout + checked.stderr
    done = rlvr("train", folder / CONTRACT, "--nproc", "2", "--run-dir", tmp_path / "run", "--max-steps", "1")
    assert done.code == 1 and not (tmp_path / "run").exists(), done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error[RLV" in line]
    assert errors and len(errors) == len(set(errors)), done.stderr[-3000:]
    assert f"{CONTRACT}:" in errors[0] and "launching:" not in done.stderr, done.stderr[-3000:]


COUNTING = """
import os
from pathlib import Path

from verifier_base import verify as answer


def verify(task: dict, response: str):
    with open(Path(__file__).parent / "verified.log", "a") as log:
        log.write(task["id"] + "\\n")
    return answer(task, response)
"""


@pytest.mark.slow
def test_a_round_of_fewer_groups_than_processes_samples_together_over_sharded_processes(
    scaffold: Path, tmp_path: Path
) -> None:
    """Dynamic sampling with `sample_groups: together` under fsdp2: a later round that lacks one
    group gives one process that group and the other an empty share, which still joins the
    gathers of the sampling phase; every group the records hold is sampled once and trained."""
    import pyarrow.parquet as pq

    parallel = "  precision: fp32\n  parallel: {strategy: fsdp2, sample_groups: together}\n"
    contract = experiment(scaffold, tmp_path / "exp", "token_mean", parallel)
    contract.write_text(contract.read_text().replace("  padding_side: left\n", DYNAMIC))
    run = tmp_path / "run"
    done = torchrun(2, contract, run, "--max-steps", "4")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = metrics(run)
    odd = [r for r in rows if r["dynamic_sampling_rounds"] > 1 and (r["groups_generated"] - 8) % 2]
    assert odd, [(r["groups_generated"], r["dynamic_sampling_rounds"]) for r in rows]  # a round of 1, 3, ... groups
    records = [r for s in sorted((run / "records").glob("*.parquet")) for r in pq.read_table(s).to_pylist()]
    for r in rows:
        groups = sorted({x["group"] for x in records if x["step"] == r["step"]})
        assert groups == list(range(int(r["groups_generated"])))
        assert r["samples_kept"] == 8 * r["groups_accepted"]


@pytest.mark.slow
def test_the_holdout_is_shared_among_the_processes_and_scores_as_one_process_does(
    scaffold: Path, tmp_path: Path
) -> None:
    """Each holdout evaluation answers every holdout task once over all processes (each process
    its batches, every process gets all the answers), not once a process; and in batches of the
    same rows at any number of processes, so two processes score the holdout as one does."""
    holdout = {json.loads(line)["id"] for line in (scaffold / "data" / "holdout.jsonl").read_text().splitlines()}
    runs = {}
    for n in (1, 2):
        folder = tmp_path / f"exp-{n}"
        shutil.copytree(scaffold, folder)
        (folder / "verifier.py").rename(folder / "verifier_base.py")
        (folder / "verifier.py").write_text(COUNTING)
        contract = folder / CONTRACT
        every = "  holdout_every: 1\n  reference_answers: answer\n"  # and holdout_nll, its forwards shared too
        contract.write_text(contract.read_text().replace("  holdout_every: 10\n", every))
        done = torchrun(n, contract, tmp_path / f"run-{n}", "--max-steps", "2")
        assert done.returncode == 0, done.stderr[-3000:]
        verified = [line for line in (folder / "verified.log").read_text().splitlines() if line in holdout]
        counts = {task: verified.count(task) for task in holdout}
        assert set(counts.values()) == {3}, counts  # the start, and after each of the 2 steps
        runs[n] = tmp_path / f"run-{n}"
    start = [json.loads((runs[n] / "holdout-start.json").read_text()) for n in (1, 2)]
    assert start[0] == start[1] and start[0]["holdout_nll"] > 0
    for x, y in zip(metrics(runs[1]), metrics(runs[2]), strict=True):
        held = {k: v for k, v in x.items() if k.startswith("holdout")}
        nll = held.pop("holdout_nll")  # of weights equal to float tolerance once trained (ddp's sum)
        assert y.pop("holdout_nll") == pytest.approx(nll, rel=1e-6)
        assert held and held == {k: v for k, v in y.items() if k.startswith("holdout")}


AHEAD = [("max_policy_lag: 0", "max_policy_lag: 1\n  sample_ahead: true"), ("  aggregation: ", RATIO)]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_sampling_ahead_over_two_processes_trains_what_one_trains_and_resumes_with_another_number(
    scaffold: Path, tmp_path: Path, strategy: str
) -> None:
    """`sample_ahead` under torchrun: each process samples its share of the next step's groups
    during this step's update (policy lag 1; fsdp2: from a copy of the whole weights gathered at
    each launch, the units staying sharded for the update); two processes draw what one draws
    and end at its weights. A checkpoint holds every process's samples in flight, so a run
    stopped at step 2 by two processes goes on with one exactly as the straight run ends."""
    import pyarrow.parquet as pq

    sharded = [("  precision: fp32\n", FSDP2 % "false")] if strategy == "fsdp2" else []
    folder = copy_experiment(scaffold, tmp_path / "exp", AHEAD + sharded)
    runs = {n: tmp_path / f"run-{n}" for n in (1, 2)}
    for n, run in runs.items():
        done = torchrun(n, folder / CONTRACT, run, "--max-steps", "3")
        assert done.returncode == 0, done.stderr[-3000:]
    one, two = metrics(runs[1]), metrics(runs[2])
    assert [r["policy_lag"] for r in one] == [r["policy_lag"] for r in two] == [0, 1, 1]
    assert [r["reward_mean"] for r in one] == [r["reward_mean"] for r in two]
    assert all("rollout_age_s" in r for r in two[1:])

    def texts(run: Path) -> list[tuple]:
        rows = [r for s in sorted((run / "records").glob("*.parquet")) for r in pq.read_table(s).to_pylist()]
        return sorted((r["step"], r["group"], r["sample"], r["response_text"], r["policy_lag"]) for r in rows)

    assert texts(runs[1]) == texts(runs[2])
    assert_same_final(runs[2], runs[1])
    meta = json.loads((runs[2] / "checkpoints" / "step-2" / "trainer.json").read_text())
    assert [len(a["samples"]) for a in meta["ahead"]] == [8 * 8]  # both processes' shares of step 2
    resumed = stopped_at_step_2(runs[2], tmp_path / "resumed")
    again = torchrun(1, folder / CONTRACT, resumed, "--max-steps", "3", "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert texts(resumed) == texts(runs[2])  # step 2 trained the samples the two processes drew ahead
    assert_same_final(resumed, runs[2])
