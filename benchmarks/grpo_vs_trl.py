"""rlvr vs TRL's GRPOTrainer: same tiny model, task, shapes and learning rate, on CPU.

Two shapes (`--shape`):
- `update` (the default): 8 prompts × 8 samples per optimizer step, max 2 response tokens —
  generation is nearly free, the update dominates.
- `generation`: 2 prompts × 8 samples, max 16 response tokens, a Qwen2-architecture model
  (hidden 128, 4 layers, 4 heads, 2 KV heads) — generation dominates, as in real RLVR.
Both: lr 3e-3, beta 0 (no reference), no gradient checkpointing, one micro-batch, temperature
1, truncated answers trained (TRL's default; rlvr `on_truncated: keep`). Each trainer runs in
its own process so peak memory (max RSS) is its own. The per-step split (generate / score /
update / other) comes from rlvr's metrics and, for TRL, from timing its model's `generate`
and the reward function inside its steps. Times count the training loop (model loading
excluded): rlvr's steps with their records, TRL's steps and its logging between them.
Usage (needs a venv with trl, e.g. `.venv-bench`:
python -m venv .venv-bench && .venv-bench/bin/pip install torch==2.13.0 trl -e '.[train]'):

    .venv-bench/bin/python benchmarks/grpo_vs_trl.py [--steps 30] [--shape update|generation] [--lora RANK]
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

from _trl import grpo_config, print_split, rlvr_result, run_child, timed, timer, trl_result

SHAPES = {  # prompts, group, max new tokens, lr
    "update": (8, 8, 2, 3e-3),
    "generation": (2, 8, 16, 3e-3),
    "real": (2, 8, 64, 3e-4),  # Qwen2 512×8 (31 M), prompts of 100–300 tokens
    "real-wide": (8, 8, 64, 3e-4),
}
PROMPTS, GROUP, MAX_TOKENS, LR, SEED = 8, 8, 2, 3e-3, 7
QWEN = {  # the Qwen2-architecture models: (hidden, intermediate, layers, heads, KV heads)
    "generation": (128, 384, 4, 4, 2),
    "real": (512, 2048, 8, 8, 4),
    "real-wide": (512, 2048, 8, 8, 4),
}


def set_shape(name: str) -> None:
    global PROMPTS, GROUP, MAX_TOKENS, LR, SHAPE
    PROMPTS, GROUP, MAX_TOKENS, LR = SHAPES[name]
    SHAPE = name


SHAPE = "update"
PRECISION = {"rlvr": "fp32", "trl": "fp32"}  # rlvr: precision preset; TRL: fp32 or bf16=True
LORA = 0  # a LoRA adapter of this rank on every linear layer (peft, both trainers); 0: full weights
LAG = 0  # rlvr's max_policy_lag: 1 samples the next step during the update (train/overlap.py)


def build(folder: Path) -> tuple[Path, Path]:
    from rlvr_cli.env.builtin import arith
    from rlvr_cli.toy.tiny import ARITHMETIC, build_tiny

    build_tiny(folder / "model", "chatml", alphabet=ARITHMETIC)
    if SHAPE in QWEN:  # the same tokenizer, a Qwen2-architecture model
        import torch
        from transformers import AutoConfig, Qwen2Config, Qwen2ForCausalLM

        base = AutoConfig.from_pretrained(folder / "model")
        torch.manual_seed(0)
        hidden, intermediate, layers, heads, kv = QWEN[SHAPE]
        qwen = Qwen2Config(
            vocab_size=base.vocab_size,
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            max_position_embeddings=512,
            bos_token_id=base.bos_token_id,
            eos_token_id=base.eos_token_id,
            pad_token_id=base.pad_token_id,
        )
        Qwen2ForCausalLM(qwen).save_pretrained(folder / "model")
    if SHAPE.startswith("real"):
        long_prompts(folder / "data")
    else:
        arith.write_splits(folder / "data")
    contract = (Path(__file__).resolve().parent.parent / "contracts" / "dr-grpo-cpu.rlvr.yaml").read_text()
    contract = (
        contract.replace("arith/model", "model")
        .replace("arith/", "data/")
        .replace("name: dr-grpo-cpu", "name: bench")
        .replace("aggregation: constant_norm", "aggregation: token_mean")
        .replace("micro_batch_sequences: 16", f"micro_batch_sequences: {PROMPTS * GROUP}")
        .replace("prompts_per_step: 8", f"prompts_per_step: {PROMPTS}")
        .replace("group_size: 8", f"group_size: {GROUP}")
        .replace("max_response_tokens: 2", f"max_response_tokens: {MAX_TOKENS}")
        .replace("holdout_every: 10", "holdout_every: 100000")
        .replace("every_steps: 20", "every_steps: 100000")  # no checkpoint inside the loop: TRL saves none
        .replace("lr: 3.0e-3", f"lr: {LR}")
        .replace("precision: fp32", f"precision: {PRECISION['rlvr']}")
        .replace("max_prompt_tokens: 64", "max_prompt_tokens: 320")
        .replace('when: "> 2", window: 1', f'when: "> {MAX_TOKENS}", window: 1')
        .replace("max_policy_lag: 0", f"max_policy_lag: {LAG}" + ("\n  sample_ahead: true" if LAG else ""))
        .replace(
            "  aggregation: ",
            "  ratio: {level: token, denominator: engine}\n  aggregation: " if LAG else "  aggregation: ",
        )
    )
    if LORA:
        assert PRECISION["rlvr"] == "fp32"
        adapter = (
            f"  adapter: {{kind: lora, rank: {LORA}, alpha: {2 * LORA}, dropout: 0.0, "
            "target_modules: all-linear, bias: none, init: default}\n"
        )
        contract = contract.replace("  precision: fp32\n", "  precision: fp32\n" + adapter)
    assert "on_truncated: keep" in contract
    path = folder / "bench.rlvr.yaml"
    path.write_text(contract)
    return path, folder / "data" / "train.jsonl"


def long_prompts(folder: Path, count: int = 240, seed: int = 0) -> None:
    """The arithmetic task behind 100–300 characters of notes (one token each: the tokenizer
    is character level), so a prompt is 100–300 tokens as in real RLVR; the verifier reads the
    response's opening number, so a correct answer can stop after it while a wrong one rambles."""
    import random
    import string

    rng = random.Random(seed)
    rows = []
    for i in range(count):
        a, b = rng.randrange(10), rng.randrange(10)
        notes = "".join(rng.choice(string.ascii_lowercase + "      ") for _ in range(rng.randrange(100, 280)))
        prompt = f"notes: {notes.strip()}\nwhat is {a}+{b}? answer: "
        rows.append({"id": f"long-{i}", "prompt": prompt, "answer": str(a + b), "domain": "add", "difficulty": "easy"})
    folder.mkdir(parents=True, exist_ok=True)
    parts = {"train": rows[:200], "holdout": rows[200:220], "sealed_eval": rows[220:], "all": rows}
    for name, part in parts.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")


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
    tokens = sum(r["response_length_mean"] * PROMPTS * GROUP for r in rows)
    rewards = [r["reward_mean"] for r in rows]
    tflop = sum(r.get("step_tflop", 0.0) for r in rows)
    return {"wall_s": wall, "tokens": tokens, "rewards": rewards, **rlvr_result(rows), "tflop": tflop}


def run_trl(folder: Path, steps: int) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from rlvr_cli.env.builtin.arith import verify
    from rlvr_cli.train import flops

    _, train = build(folder)
    tasks = [json.loads(line) for line in train.read_text().splitlines()]
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t["prompt"]}], "answer": t["answer"]} for t in tasks]
    )
    rewards_log: list[float] = []
    tokens = [0]
    model = AutoModelForCausalLM.from_pretrained(folder / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")

    prompt_len: dict[str, int] = {}
    flop = [0.0]
    shape = flops.Shape.of(model)

    def count(prompts: list, completion_ids: list) -> None:  # the model FLOPs rlvr counts, on TRL's tokens
        for at in range(0, len(prompts), GROUP):
            text = prompts[at][0]["content"]
            if text not in prompt_len:
                prompt_len[text] = len(tokenizer.apply_chat_template(prompts[at], add_generation_prompt=True))
            responses = [len(ids) for ids in completion_ids[at : at + GROUP]]
            flop[0] += shape.group(prompt_len[text], responses) + shape.training(prompt_len[text], responses)

    def reward(completions, answer, prompts, completion_ids, **_: object) -> list[float]:
        count(prompts, completion_ids)
        out = []
        for completion, ans in zip(completions, answer, strict=True):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            v = verify({"answer": ans}, text)
            out.append(v.components["correct"] * 1.0 + v.components["format"] * 0.2)
        rewards_log.append(sum(out) / len(out))
        return out

    spent = {"generate": 0.0, "score": 0.0}
    model.generate = timed(model.generate, spent, "generate")
    reward = timed(reward, spent, "score")
    config = grpo_config(
        folder,
        max_steps=steps,
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=MAX_TOKENS,
        learning_rate=LR,
        seed=SEED,
        bf16=PRECISION["trl"] == "bf16",
    )
    clock = timer()
    peft_config = None
    if LORA:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=LORA,
            lora_alpha=2 * LORA,
            lora_dropout=0.0,
            target_modules="all-linear",
            bias="none",
            task_type="CAUSAL_LM",
        )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[clock],
        peft_config=peft_config,
    )
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    for entry in trainer.state.log_history:
        if "completions/mean_length" in entry:
            tokens[0] += entry["completions/mean_length"] * PROMPTS * GROUP
    result = {"wall_s": wall, "tokens": tokens[0], "rewards": rewards_log, **trl_result(clock, spent)}
    return {**result, "tflop": flop[0] / 1e12}


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
    parser.add_argument("--shape", choices=sorted(SHAPES), default="update")
    parser.add_argument(
        "--lag", type=int, choices=[0, 1], default=0, help="rlvr's max_policy_lag (1: with sample_ahead)"
    )
    parser.add_argument("--lora", type=int, default=0, help="train a LoRA adapter of this rank (peft) in both")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="rlvr's precision preset")
    parser.add_argument("--repeat", type=int, default=1, help="alternating runs of each; the best is shown")
    parser.add_argument("--trl-precision", choices=["fp32", "bf16"], default="fp32", help="bf16: TRL's bf16=True")
    args = parser.parse_args()
    set_shape(args.shape)
    global LAG, LORA
    LAG, LORA = args.lag, args.lora
    PRECISION.update(rlvr=args.precision, trl=args.trl_precision)
    if args.child:
        child(args.child, args.steps)
        return
    shape = ["--steps", str(args.steps), "--shape", args.shape, "--lag", str(args.lag), "--lora", str(args.lora)]
    shape += ["--precision", args.precision, "--trl-precision", args.trl_precision]
    before = {k: machine_peak(v) for k, v in PRECISION.items()}
    runs: dict[str, list[dict]] = {"rlvr": [], "trl": []}
    for _ in range(args.repeat):  # alternating, so a slow spell of the machine hits both
        for which in ("rlvr", "trl"):
            runs[which].append(run_child(__file__, ["--child", which, *shape]))
    results = {which: min(done, key=lambda res: res["train_s"]) for which, done in runs.items()}
    r, t = results["rlvr"], results["trl"]
    peak = {"rlvr": max(r["peak_rss_mb"], r["peak_rss_children_mb"]), "trl": t["peak_rss_mb"]}
    trained = f"LoRA r={LORA} all-linear" if LORA else "full weights"
    print(f"{args.steps} steps, {PROMPTS}×{GROUP} samples/step, ≤{MAX_TOKENS} tokens, lr {LR}, beta 0, {trained}, CPU")
    print(f"precision: rlvr {PRECISION['rlvr']}, TRL {PRECISION['trl']}; best of {args.repeat} alternating runs each")
    flop_s = {k: max(before[k], machine_peak(v)) for k, v in PRECISION.items()}  # the higher: MFU not flattered
    print(f"{'':8}{'steps/s':>10}{'tokens/s':>10}{'peak MB':>10}{'reward first5':>15}{'reward last5':>14}{'MFU':>8}")
    for name, res in (("rlvr", r), ("trl", t)):
        rw, mfu = res["rewards"], res["tflop"] * 1e12 / res["train_s"] / flop_s[name]
        print(
            f"{name:8}{args.steps / res['train_s']:10.2f}{res['tokens'] / res['train_s']:10.0f}{peak[name]:10.0f}"
            f"{sum(rw[:5]) / 5:15.3f}{sum(rw[-5:]) / 5:14.3f}{mfu:8.1%}"
        )
        print(f"{'':8}every run, steps/s: " + " / ".join(f"{args.steps / x['train_s']:.2f}" for x in runs[name]))
    print(f"throughput ratio rlvr/trl (steps/s): {t['train_s'] / r['train_s']:.2f}")
    print(  # the steps alone: rlvr's without its metrics row, status.json and checkpoints, TRL's without its logging
        f"the steps alone, steps/s: rlvr {args.steps / r['steps_s']:.2f}, TRL {args.steps / t['steps_s']:.2f}, "
        f"ratio {t['steps_s'] / r['steps_s']:.2f}"
    )
    print(
        "machine peak (the best this machine has shown, cached as rlvr caches it; 2 threads): "
        + ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in flop_s.items())
    )
    print_split(results, args.steps)


def machine_peak(precision: str) -> float:
    """FLOP/s of the dtype the trainer computes in, as rlvr's own `mfu` divides by it: the best
    this machine has shown, cached (rlvr_cli/train/calibration.py); the denominator of MFU for
    both trainers."""
    import torch

    from rlvr_cli.train.calibration import device_peak

    return device_peak(torch.device("cpu"), torch.bfloat16 if precision == "bf16" else torch.float32)[0]


if __name__ == "__main__":
    main()
