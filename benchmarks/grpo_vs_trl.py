"""rlvr vs TRL's GRPOTrainer: same tiny model, task, shapes and learning rate, on CPU.

Shapes: 8 prompts × 8 samples per optimizer step, max 2 response tokens, lr 3e-3, beta 0
(no reference), no gradient checkpointing, one micro-batch of 64, temperature 1. Each
trainer runs in its own process so peak memory (max RSS) is its own. Usage (needs a venv
with trl, e.g. `.venv-bench`: python -m venv .venv-bench && .venv-bench/bin/pip install
torch==2.13.0 trl -e '.[train]'):

    .venv-bench/bin/python benchmarks/grpo_vs_trl.py [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPTS, GROUP, MAX_TOKENS, LR, SEED = 8, 8, 2, 3e-3, 7


def build(folder: Path) -> tuple[Path, Path]:
    from rlvr_cli.chat.tiny import ARITHMETIC, build_tiny
    from rlvr_cli.env.builtin import arith

    build_tiny(folder / "model", "chatml", alphabet=ARITHMETIC)
    arith.write_splits(folder / "data")
    contract = (Path(__file__).resolve().parent.parent / "contracts" / "dr-grpo-cpu.rlvr.yaml").read_text()
    contract = (
        contract.replace("arith/model", "model")
        .replace("arith/", "data/")
        .replace("name: dr-grpo-cpu", "name: bench")
        .replace("aggregation: constant_norm", "aggregation: token_mean")
        .replace("micro_batch_sequences: 16", "micro_batch_sequences: 64")
        .replace("holdout_every: 10", "holdout_every: 100000")
    )
    path = folder / "bench.rlvr.yaml"
    path.write_text(contract)
    return path, folder / "data" / "train.jsonl"


def run_rlvr(folder: Path, steps: int) -> dict:
    contract, _ = build(folder)
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlvr_cli",
            "train",
            str(contract),
            "--max-steps",
            str(steps),
            "--run-dir",
            str(folder / "run"),
        ],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    rows = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    train_time = sum(r["step_seconds"] for r in rows)
    tokens = sum(r["response_length_mean"] * PROMPTS * GROUP for r in rows)
    return {"wall_s": wall, "train_s": train_time, "tokens": tokens, "rewards": [r["reward_mean"] for r in rows]}


def run_trl(folder: Path, steps: int) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr_cli.env.builtin.arith import verify

    _, train = build(folder)
    tasks = [json.loads(line) for line in train.read_text().splitlines()]
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t["prompt"]}], "answer": t["answer"]} for t in tasks]
    )
    rewards_log: list[float] = []
    tokens = [0]

    def reward(completions, answer, **_: object) -> list[float]:
        out = []
        for completion, ans in zip(completions, answer, strict=True):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            v = verify({"answer": ans}, text)
            out.append(v.components["correct"] * 1.0 + v.components["format"] * 0.2)
        rewards_log.append(sum(out) / len(out))
        return out

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.start = None
            self.steps: list[float] = []

        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.steps.append(time.perf_counter() - self.start)

    model = AutoModelForCausalLM.from_pretrained(folder / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    config = GRPOConfig(
        output_dir=str(folder / "trl"),
        max_steps=steps,
        per_device_train_batch_size=PROMPTS * GROUP,
        gradient_accumulation_steps=1,
        num_generations=GROUP,
        max_completion_length=MAX_TOKENS,
        learning_rate=LR,
        beta=0.0,
        gradient_checkpointing=False,
        use_cpu=True,
        logging_steps=1,
        report_to=[],
        temperature=1.0,
        top_p=1.0,
        seed=SEED,
        save_strategy="no",
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        adam_beta1=0.9,
        adam_beta2=0.99,
        loss_type="dapo",
        scale_rewards="group",
        dataloader_num_workers=0,
    )
    timer = Timer()
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=data, processing_class=tokenizer, callbacks=[timer]
    )
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    for entry in trainer.state.log_history:
        if "completions/mean_length" in entry:
            tokens[0] += entry["completions/mean_length"] * PROMPTS * GROUP
    return {"wall_s": wall, "train_s": sum(timer.steps), "tokens": tokens[0], "rewards": rewards_log}


def child(which: str, steps: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix=f"bench-{which}-"))
    result = (run_rlvr if which == "rlvr" else run_trl)(folder, steps)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["peak_rss_children_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--child", choices=["rlvr", "trl"])
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    results = {}
    for which in ("rlvr", "trl"):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", which, "--steps", str(args.steps)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise SystemExit(f"{which} failed:\n{proc.stderr[-3000:]}")
        results[which] = json.loads(proc.stdout.strip().splitlines()[-1])
    r, t = results["rlvr"], results["trl"]
    peak = {"rlvr": max(r["peak_rss_mb"], r["peak_rss_children_mb"]), "trl": t["peak_rss_mb"]}
    print(f"{args.steps} steps, {PROMPTS}×{GROUP} samples/step, ≤{MAX_TOKENS} tokens, lr {LR}, beta 0, CPU")
    print(f"{'':8}{'steps/s':>10}{'tokens/s':>10}{'peak MB':>10}{'reward first5':>15}{'reward last5':>14}")
    for name, res in (("rlvr", r), ("trl", t)):
        rw = res["rewards"]
        print(
            f"{name:8}{args.steps / res['train_s']:10.2f}{res['tokens'] / res['train_s']:10.0f}{peak[name]:10.0f}"
            f"{sum(rw[:5]) / 5:15.3f}{sum(rw[-5:]) / 5:14.3f}"
        )
    print(f"throughput ratio rlvr/trl (steps/s): {t['train_s'] / r['train_s']:.2f}")


if __name__ == "__main__":
    main()
