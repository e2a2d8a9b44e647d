"""`rlvr data check` on a million task rows across three splits, as a whole process, against
a plain Python exact-dedup loop over the same files (the exact part only).

    .venv/bin/python benchmarks/data_check.py [--rows 1000000] [--folder /tmp/rlvr-data-bench]
    .venv/bin/python benchmarks/data_check.py --templated 1,10,50

`--templated` times the check on data written from five templates (tests/data/stranger.py's
date, unit, schedule and recipe families: the slow case, where every sibling resembles every
other) at 3,000 rows times each scale, and prints CPU seconds per 1,000 rows: flat is linear.

The rows are generated tasks (~150 characters of words and numbers, a few fields), 90 % train and
5 % each holdout and sealed_eval; the contract declares `dedup.method: minhash`, so every
check runs: ids, normalised exact duplicates, MinHash/LSH near duplicates, answer leakage,
secrets and PII, row schema. Reports wall time, rows/s and peak memory (max RSS) of each.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYLLABLES = [c + v for c in "bklmnrt" for v in "aeiou"]


def vocabulary(rng: random.Random, size: int = 5000) -> list[str]:
    return ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(size)]


def row(rng: random.Random, words: list[str], i: int, split: str) -> str:
    """A task of 18-30 words from a 5,000-word vocabulary with two numbers: distinct texts, as a
    real corpus of problems is (a corpus generated from one template is the slow case: every
    pair is similar, so the LSH index returns many candidates to check)."""
    a, b = rng.randint(2, 9999), rng.randint(2, 999)
    text = rng.choices(words, k=rng.randint(18, 30))
    text.insert(rng.randrange(len(text)), str(a))
    text.insert(rng.randrange(len(text)), str(b))
    prompt = " ".join(text).capitalize() + "?"
    task = {"id": f"{split}-{i}", "prompt": prompt, "answer": str(a - b), "domain": "arith", "difficulty": "easy"}
    return json.dumps(task)


def make(folder: Path, rows: int) -> Path:
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    shares = {"train": 0.9, "holdout": 0.05, "sealed_eval": 0.05}
    rng = random.Random(0)
    words = vocabulary(rng)
    for split, share in shares.items():
        path = data / f"{split}.jsonl"
        count = int(rows * share)
        if not path.exists() or sum(1 for _ in path.open()) != count:
            with path.open("w") as fh:
                for i in range(count):
                    fh.write(row(rng, words, i, split) + "\n")
    (data / "all.jsonl").write_text("")
    contract = (ROOT / "templates" / "single-turn" / "experiment.rlvr.yaml").read_text()
    contract = contract.replace("__NAME__", "bench").replace(
        "dedup: {stage: before_split, method: exact, semantic_clusters: false}",
        "dedup: {stage: before_split, method: minhash, semantic_clusters: false, normalize: [whitespace, case]}",
    )
    path = folder / "experiment.rlvr.yaml"
    path.write_text(contract)
    (folder / "verifier.py").write_text("def verify(task, response):\n    return {'status': 'ok', 'reward': 0.0}\n")
    return path


def timed(command: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS of the child (bytes), and its stderr's last line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode not in (0, 1):
        sys.exit(f"{command} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds, max(peak, before) * 1024, (proc.stderr.strip().splitlines() or [""])[-1]


BASELINE = """
import json, sys, hashlib
seen, dups, rows = {}, 0, 0
for split in ("holdout", "sealed_eval", "train"):
    with open(f"{sys.argv[1]}/data/{split}.jsonl", "rb") as fh:
        for line in fh:
            task = json.loads(line)
            key = hashlib.blake2b(" ".join(task["prompt"].casefold().split()).encode(), digest_size=8).digest()
            dups += key in seen
            seen.setdefault(key, (split, task["id"]))
            rows += 1
print(rows, "rows", dups, "exact duplicates", file=sys.stderr)
"""


def templated(folder: Path, scale: int) -> Path:
    """3,000 × `scale` templated rows (90/5/5), and the contract that checks them with minhash."""
    sys.path.insert(0, str(ROOT))
    from tests.data.stranger import clean_tasks

    rng, seen = random.Random(scale), set()
    contract = make(folder, 0)
    for split, share in {"train": 0.9, "holdout": 0.05, "sealed_eval": 0.05}.items():
        rows = clean_tasks(int(3000 * scale * share), rng, split, seen, distinct=False)
        (folder / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return contract


def cpu_seconds(command: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, capture_output=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/rlvr-data-bench"))
    parser.add_argument("--templated", default=None, help="scales, e.g. 1,10,50 (× 3,000 templated rows)")
    args = parser.parse_args()
    if args.templated:
        print("| rows | CPU s | CPU ms per 1,000 rows |\n|---|---|---|")
        for scale in map(int, args.templated.split(",")):
            folder = args.folder / f"templated-{scale}"
            contract = templated(folder, scale)
            seconds = cpu_seconds([sys.executable, "-m", "rlvr_cli", "data", "check", str(contract), "-f", "json"])
            print(f"| {3000 * scale:,} | {seconds:.1f} | {seconds / (3 * scale) * 1000:.0f} |", flush=True)
        return
    contract = make(args.folder, args.rows)
    print(f"{args.rows:,} rows in {args.folder}/data; 2 cores")
    # the baseline runs first, so each child's peak RSS is its own (ru_maxrss of children is a max)
    base_s, base_rss, base_tail = timed([sys.executable, "-c", BASELINE, str(args.folder)])
    rlvr_s, rlvr_rss, tail = timed([sys.executable, "-m", "rlvr_cli", "data", "check", str(contract), "-f", "json"])
    print("| command | wall | rows/s | peak memory |\n|---|---|---|---|")
    print(
        f"| plain Python exact dedup (json + normalise + blake2b set) | {base_s:.1f} s | "
        f"{args.rows / base_s:,.0f} | {base_rss / 2**20:.0f} MiB |"
    )
    print(
        f"| `rlvr data check` (every check, minhash) | {rlvr_s:.1f} s | {args.rows / rlvr_s:,.0f} | "
        f"{rlvr_rss / 2**20:.0f} MiB |"
    )
    print(f"rlvr: {tail}\nbaseline: {base_tail}")


if __name__ == "__main__":
    main()
