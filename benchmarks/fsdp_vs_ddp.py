"""FSDP2 vs DDP: 2 CPU processes (gloo) training the same contract on a ~53 M-parameter model.

Per process: peak resident memory (ru_maxrss, each rank measures itself) and the memory the
plan estimates for it; per run: seconds per step (metrics.jsonl `step_seconds`, steps after
the first). Run: `.venv/bin/python benchmarks/fsdp_vs_ddp.py` (about 10 minutes on 2 cores).
`--only=ddp,fsdp2`: those runs alone. `--live`: with MALLOC_TRIM_THRESHOLD_=0, so glibc
returns freed memory at once and the resident peak is the live memory (as a GPU's allocated
memory is); steps are slower that way. `--phases`: each process's resident peak in each phase of
a step (sampling, the reference, the update, the optimizer step; before the first step: loading
and the first holdout; after the last: writing final/) instead. `--precision=bf16`: the
contract's `precision: bf16` (fp32 master weights and optimizer state, bf16 compute: what a GPU
run uses) instead of fp32.
`--model=HIDDENxLAYERS` (default 768x9, ~53 M parameters; 1024x12 is ~126 M) and
`--answer-tokens=N` (default the template's 2; the length rule follows it): a step whose
answers are as long as a real task's. `--sample-groups=together`: each process samples its share
of the groups in one batch (`parallel.sample_groups`; default alone: one group at a time).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4
RANK = """
import json, os, resource, sys
from rlvr_cli.__main__ import main

if __name__ == "__main__":  # the verifier's worker processes import this file too
    try:
        sys.argv = ["rlvr", *sys.argv[1:]]
        main()
    finally:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        with open(os.environ["PEAK_DIR"] + f"/rank-{os.environ['RANK']}.json", "w") as fh:
            json.dump({"peak": peak}, fh)
"""

#: `--phases`: each rank also records its resident peak in each phase of a step (a thread reads
#: VmRSS every 2 ms; the phase is the trainer function running), and where the steps begin
PHASES = """
import functools, json, os, sys, threading, time
from rlvr_cli.__main__ import main

LABEL, PEAKS = ["loading and the first holdout"], {}


def rss():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def watch():
    while True:
        value, label = rss(), LABEL[0]
        PEAKS[label] = max(PEAKS.get(label, 0), value)
        time.sleep(0.002)


def phase(owner, name, label):
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args, **kwargs):
        before, LABEL[0] = LABEL[0], label
        try:
            return inner(*args, **kwargs)
        finally:
            LABEL[0] = before

    setattr(owner, name, timed)


if __name__ == "__main__":
    import rlvr_cli.train.loop as loop, rlvr_cli.train.stops as stops, rlvr_cli.train.update as update

    phase(update, "reference_logprobs", "reference")
    phase(update, "optimizer_passes", "update")
    phase(update, "_step", "optimizer step")
    phase(loop, "collect", "sampling")  # the name loop.py calls
    phase(stops, "save_final", "writing final/")  # stops.py's own call: one process's model whole
    phase(stops, "save_final_sharded", "writing final/")  # each file of a sharded policy gathered on the main process
    step = loop.train_step

    def first(*args, **kwargs):
        PEAKS.setdefault("at the first step", rss())
        LABEL[0] = "between phases"
        return step(*args, **kwargs)

    loop.train_step = first
    threading.Thread(target=watch, daemon=True).start()
    try:
        sys.argv = ["rlvr", *sys.argv[1:]]
        main()
    finally:
        with open(os.environ["PEAK_DIR"] + f"/phases-{os.environ['RANK']}.json", "w") as fh:
            json.dump(PEAKS, fh)
"""


def experiment(root: Path, hidden: int = 768, layers: int = 9, answer_tokens: int = 2) -> Path:
    from rlvr_cli.toy.tiny import build_tiny

    folder = root / "exp"
    subprocess.run(
        [sys.executable, "-m", "rlvr_cli", "init", str(folder), "--no-model"], check=True, capture_output=True
    )
    shutil.rmtree(folder / "model", ignore_errors=True)
    build_tiny(folder / "model", hidden=hidden, layers=layers)  # 768 × 9: 9 × 5.9 M + embeddings ≈ 53 M
    if answer_tokens != 2:
        contract = folder / "experiment.rlvr.yaml"
        text = contract.read_text()
        for old, new in (
            ("max_response_tokens: 2\n", f"max_response_tokens: {answer_tokens}\n"),
            ('metric: response_length_mean, when: "> 2"', f'metric: response_length_mean, when: "> {answer_tokens}"'),
        ):
            assert old in text, old
            text = text.replace(old, new)
        contract.write_text(text)
    return folder


def run(
    folder: Path, name: str, out: Path, live: bool, precision: str = "fp32", phases: bool = False, groups: str = "alone"
) -> dict:
    """`name`: ddp, fsdp2, ddp-own: ddp with the model's own update forward (responses padded
    on the right, so the shared-prompt forward steps aside), fsdp2-kept: fsdp2 with
    `reshard_after_forward: false` (each unit gathered once a pass), or fsdp2-whole: that and
    `accumulate_whole_gradients: true` (each unit reduce-scattered once a pass); a `-ckpt` suffix
    adds `activation_checkpointing: true`, an `-ahead` suffix `sample_ahead: true` (max_policy_lag 1,
    the ratio over the engine's log-probs). Not the default set: `--only=...,NAME-ckpt,NAME-ahead`."""
    strategy, ahead = name.split("-")[0], name.endswith("-ahead")
    name_kept = name.removesuffix("-ahead")
    kept = {
        "fsdp2-kept": ", reshard_after_forward: false",
        "fsdp2-whole": ", reshard_after_forward: false, accumulate_whole_gradients: true",
    }.get(name_kept.removesuffix("-ckpt"), "")
    if name_kept.endswith("-ckpt"):  # activation checkpointing: each layer keeps its input, its forward runs again
        kept += ", activation_checkpointing: true"
    if groups != "alone":  # a process samples its share of the groups in one batch
        kept += f", sample_groups: {groups}"
    contract = folder / f"{name}.rlvr.yaml"
    text = (folder / "experiment.rlvr.yaml").read_text()
    text = text.replace(
        "  precision: fp32\n", f"  precision: {precision}\n  parallel: {{strategy: {strategy}{kept}}}\n"
    )
    if ahead:  # the next step sampled during this one's update, by a copy of the whole weights
        for old, new in (
            ("max_policy_lag: 0", "max_policy_lag: 1\n  sample_ahead: true"),
            ("  aggregation:", "  ratio: {level: token, denominator: engine}\n  aggregation:"),
        ):
            assert old in text, old
            text = text.replace(old, new, 1)
    if "-own" in name:
        assert "padding_side: left" in text
        text = text.replace("padding_side: left", "padding_side: right")
    contract.write_text(text)
    peaks = out / name
    peaks.mkdir(parents=True)
    (out / "rank.py").write_text(PHASES if phases else RANK)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PEAK_DIR": str(peaks), "PYTHONPATH": str(ROOT)}
    if live:
        env["MALLOC_TRIM_THRESHOLD_"] = "0"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += [str(out / "rank.py"), "train", str(contract), "--run-dir", str(out / f"run-{name}")]
    done = subprocess.run([*command, "--max-steps", str(STEPS)], capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / f"run-{name}" / "metrics.jsonl").read_text().splitlines()]
    seconds = [r["step_seconds"] for r in rows[1:]]
    # where a step's time goes (steps after the first): sampling, and the update with its collectives
    phase_seconds = {  # (collectives: the time spent in them, within the other two)
        k: round(sum(r.get(f"time_{k}_s", 0.0) for r in rows[1:]) / len(rows[1:]), 2)
        for k in ("generate", "update", "collectives")
    }
    plan = subprocess.run(
        [sys.executable, "-m", "rlvr_cli", "plan", str(contract), "--gpus", "2"], capture_output=True, text=True
    ).stdout
    total = next(line for line in plan.splitlines() if line.startswith("peak"))
    if phases:
        return {
            "seconds_per_step": sum(seconds) / len(seconds),
            "phase_seconds": phase_seconds,
            "peak_mib_by_phase": [
                {k: round(v / 2**20) for k, v in json.loads(p.read_text()).items()}
                for p in sorted(peaks.glob("phases-*.json"))
            ],
        }
    return {
        "peak_per_process_mib": [json.loads(p.read_text())["peak"] / 2**20 for p in sorted(peaks.glob("rank-*.json"))],
        "seconds_per_step": sum(seconds) / len(seconds),
        "phase_seconds": phase_seconds,
        "plan_total": total.split(None, 1)[1].strip(),
        # the most any process held by the end of each step (VmHWM): where the peak is reached
        "memory_peak_gib_by_step": [r.get("memory_peak_gib") for r in rows],
    }


def main() -> None:
    live, phases = "--live" in sys.argv, "--phases" in sys.argv
    names = ("ddp", "ddp-own", "fsdp2", "fsdp2-kept", "fsdp2-whole")
    names += tuple(f"{n}-ckpt" for n in ("ddp", "fsdp2", "fsdp2-kept", "fsdp2-whole"))
    names += ("ddp-ahead", "fsdp2-ahead")
    precision = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--precision=")), "fp32")
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), names[:5])
    hidden, layers = map(
        int, next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--model=")), "768x9").split("x")
    )
    answers = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--answer-tokens=")), "2"))
    groups = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--sample-groups=")), "alone")
    with tempfile.TemporaryDirectory() as tmp:
        folder = experiment(Path(tmp), hidden, layers, answers)
        # in the order `--only` names them (an alternating second run shows a drift of the machine's speed)
        results = {s: run(folder, s, Path(tmp) / "out", live, precision, phases, groups) for s in only if s in names}
    print(json.dumps(results, indent=1))
    if phases:
        return
    for sharded in (s for s in results if s.startswith("fsdp2")):
        f = results[sharded]
        for base in (s for s in results if s.startswith("ddp")):
            d = results[base]
            memory = max(f["peak_per_process_mib"]) / max(d["peak_per_process_mib"])
            speed = d["seconds_per_step"] / f["seconds_per_step"]
            print(f"{sharded}/{base}: memory per process {memory:.2f}, steps/s {speed:.2f}")


if __name__ == "__main__":
    main()
