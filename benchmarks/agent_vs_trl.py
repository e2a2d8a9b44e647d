"""Agentic RL: rlvr vs TRL's GRPOTrainer with `environment_factory`, on the lookup task.

The same warm-started tiny model (`rlvr init --template lookup`: BPE merges learned from the
demonstrations, 600 warm-up steps), the same tasks and tool, the same shapes: 8 prompts × 8
episodes per step, at most 3 model calls per episode (TRL: `max_tool_calling_iterations` 2),
at most 32 tokens after the prompt, lr 2e-3, beta 0, token-level loss (TRL `loss_type="dapo"`),
clip [0.8, 1.28], group-std advantages, temperature 1, CPU. The reward is the server's: 1 when
the box was opened and the final message is its digit. TRL's environment is a plain Python
object (its `open_box` method is the tool, called in process); rlvr's is the `lookup`
resources server in its own process, over HTTP, with every episode recorded. Both prompts carry
the same tool schema (TRL's is taken from the server so the rendered prompts are identical).
Each trainer runs in its own process; times count the training loop (model loading excluded):
rlvr's steps with their records, TRL's steps and its logging between them.

    .venv-bench/bin/python benchmarks/agent_vs_trl.py [--steps 60] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _trl import grpo_config, print_split, rlvr_result, run_child, timed, timer, trl_result

PROMPTS, GROUP, MAX_TOKENS, MAX_CALLS, LR, SEED = 8, 8, 32, 3, 2e-3, 0


def build(folder: Path) -> Path:
    """The lookup template with its warm model, once; both trainers copy it."""
    from rlvr_cli.commands.init import run_init

    run_init(folder, "lookup", force=False, build_model=True)
    return folder


def run_rlvr(folder: Path, steps: int) -> dict:
    contract = folder / "experiment.rlvr.yaml"
    text = contract.read_text()
    assert "holdout_every: 20" in text
    text = text.replace("holdout_every: 20", "holdout_every: 100000")  # TRL evaluates nothing either
    assert "every_steps: 20" in text
    text = text.replace("every_steps: 20", "every_steps: 100000")  # no checkpoint inside the loop: TRL saves none
    contract.write_text(text.replace("  seed: 0\n", f"  seed: {SEED}\n"))
    limits = ["--max-steps", str(steps), "--run-dir", str(folder / "run")]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr_cli", "train", str(folder / "experiment.rlvr.yaml"), *limits],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    rows = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "step_seconds" in r]
    import pyarrow.parquet as pq

    trained = sum(
        sum(sum(mask) for mask in pq.read_table(shard, columns=["loss_mask"]).column("loss_mask").to_pylist())
        for shard in sorted((folder / "run" / "records").glob("*.parquet"))
    )
    return {
        "wall_s": time.perf_counter() - start,
        "tokens": trained,  # sampled tokens (loss mask 1): what TRL's completions/mean_length counts with tools
        "rewards": [r["reward_mean"] for r in rows],
        **rlvr_result(rows),
    }


class BoxEnv:
    """TRL's environment for the lookup task: `reset` gets the dataset row."""

    def reset(self, **row: object) -> None:
        self.secret, self.opened = str(row["secret"]), False

    def open_box(self) -> str:
        """Open the box and read the digit inside."""
        self.opened = True
        return self.secret


def run_trl(folder: Path, steps: int) -> dict:
    import transformers.utils.chat_template_utils as ctu
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    from rlvr_cli.env.builtin.lookup import LookupServer

    schema = {s["function"]["name"]: s for s in LookupServer().schemas()}
    plain_schema = ctu.get_json_schema
    ctu.get_json_schema = lambda fn: schema.get(fn.__name__) or plain_schema(fn)  # the server's schema, verbatim

    tasks = [json.loads(line) for line in (folder / "data" / "train.jsonl").read_text().splitlines()]
    rows = [{"prompt": [{"role": "user", "content": t["prompt"]}], "secret": t["secret"]} for t in tasks]
    data = Dataset.from_list(rows)
    rewards_log: list[float] = []
    spent = {"generate": 0.0, "score": 0.0}

    def reward(completions, secret, environments, **_: object) -> list[float]:
        begin = time.perf_counter()
        out = []
        for completion, digit, env in zip(completions, secret, environments, strict=True):
            said = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
            out.append(float(env.opened and bool(said) and said[-1].strip() == digit))
        rewards_log.append(sum(out) / len(out))
        spent["score"] += time.perf_counter() - begin
        return out

    model = AutoModelForCausalLM.from_pretrained(folder / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    tokenizer.response_template = qwen3_template  # the tiny chatml writes Qwen's <tool_call>{json}</tool_call>
    model.generate = timed(model.generate, spent, "generate")
    config = grpo_config(
        folder,
        max_steps=steps,
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=MAX_TOKENS,
        max_tool_calling_iterations=MAX_CALLS - 1,
        learning_rate=LR,
        epsilon=0.2,
        epsilon_high=0.28,
        seed=SEED,
    )
    clock = timer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        environment_factory=BoxEnv,
        callbacks=[clock],
    )
    start = time.perf_counter()
    trainer.train()
    history = trainer.state.log_history
    tokens = sum(e["completions/mean_length"] * PROMPTS * GROUP for e in history if "completions/mean_length" in e)
    calls = [e["tools/call_frequency"] for e in history if "tools/call_frequency" in e]
    return {
        "wall_s": time.perf_counter() - start,
        "tokens": tokens,
        "rewards": rewards_log,
        "calls": calls,
        **trl_result(clock, spent),
    }


def child(which: str, source: Path, steps: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix=f"agent-{which}-")) / "lookup"
    shutil.copytree(source, folder)
    result = (run_rlvr if which == "rlvr" else run_trl)(folder, steps)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["peak_rss_children_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--child", choices=["rlvr", "trl"])
    parser.add_argument("--source", type=Path)
    parser.add_argument("--seed", type=int, default=0, help="both trainers' seed")
    args = parser.parse_args()
    global SEED
    SEED = args.seed
    if args.child:
        child(args.child, args.source, args.steps)
        return
    source = build(Path(tempfile.mkdtemp(prefix="agent-bench-")) / "lookup")
    shared = ["--source", str(source), "--steps", str(args.steps), "--seed", str(args.seed)]
    results = {which: run_child(__file__, ["--child", which, *shared]) for which in ("rlvr", "trl")}
    r, t = results["rlvr"], results["trl"]
    peak = {"rlvr": max(r["peak_rss_mb"], r["peak_rss_children_mb"]), "trl": t["peak_rss_mb"]}
    episodes = PROMPTS * GROUP * args.steps
    print(f"{args.steps} steps, {PROMPTS}×{GROUP} episodes/step, ≤{MAX_CALLS} model calls, ≤{MAX_TOKENS} tokens, CPU")
    print(f"{'':8}{'episodes/s':>12}{'trained tokens/s':>18}{'peak MB':>10}{'reward first5':>15}{'reward last5':>14}")
    for name, res in (("rlvr", r), ("trl", t)):
        rw = res["rewards"]
        print(
            f"{name:8}{episodes / res['train_s']:12.1f}{res['tokens'] / res['train_s']:18.0f}{peak[name]:10.0f}"
            f"{sum(rw[:5]) / 5:15.3f}{sum(rw[-5:]) / 5:14.3f}"
        )
    print(f"throughput ratio rlvr/trl (episodes/s): {t['train_s'] / r['train_s']:.2f}")
    print_split(results, args.steps)
    if t.get("calls"):
        print(f"TRL tool calls per episode, first → last step: {t['calls'][0]:.2f} → {t['calls'][-1]:.2f}")


if __name__ == "__main__":
    main()
