"""After the run: `rlvr audit rollouts`, `rlvr audit rewards`, `rlvr gate`, `rlvr report`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, rlvr

pytestmark = pytest.mark.slow  # end-to-end runs: `make test` runs them, `make test-fast` does not

CONTRACT = "experiment.rlvr.yaml"


@pytest.fixture(scope="session")  # kept while other modules' tests run in between
def trained(single_turn: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A short run of the single-turn example; (experiment folder, run folder)."""
    folder = copy_experiment(single_turn, tmp_path_factory.mktemp("after") / "arith")
    run_dir = folder / "runs" / "arith"
    run = rlvr("train", folder / CONTRACT, "--max-steps", "20", timeout=600)
    assert run.code == 0, run.stderr[-2000:]
    return folder, run_dir


@pytest.fixture
def run_copy(trained: tuple[Path, Path], tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(trained[1], target)
    return target


def test_audit_rollouts_reports_the_evidence(trained: tuple[Path, Path]) -> None:
    run = rlvr("audit", "rollouts", trained[1], "--format", "json")
    assert run.code == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["manifest_ok"] and report["samples"] == 20 * 64
    assert set(report["reward_by_difficulty"]) == {"easy", "trivial"}
    assert len(report["zero_std_over_time"]) == 20 and report["holdout_evaluations"] == 2
    assert report["verdicts"].get("ok", 0) + report["verdicts"].get("format_error", 0) == 20 * 64
    assert 0.0 <= report["truncation_rate"] <= 1.0
    text = rlvr("audit", "rollouts", trained[1]).stdout
    assert "manifest and every shard checksum verified" in text and "train vs holdout" in text
    assert re.findall(r"\d\.\d{4,}", text) == []  # rounded for reading; --format json keeps every digit


def test_a_run_shorter_than_holdout_every_is_told_so_not_to_set_it(run_copy: Path) -> None:
    """A run that stopped before its first holdout evaluation: the audit names the contract's
    holdout_every and the run's steps (it is set; the run was short), not "set holdout_every"."""
    metrics = run_copy / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()][:5]
    metrics.write_text("".join(json.dumps({k: v for k, v in r.items() if "holdout" not in k}) + "\n" for r in rows))
    text = rlvr("audit", "rollouts", run_copy).stdout
    assert "no holdout evaluation during the run (monitoring.holdout_every is 10; the run has 5 step(s))" in text, text
    assert "set monitoring.holdout_every" not in text


def _listed(run_dir: Path) -> list[str]:
    """The record shards' files, as the manifest lists them (steps gather into shards by time)."""
    return [s["file"] for s in json.loads((run_dir / "records" / "manifest.json").read_text())["shards"]]


def test_one_changed_byte_in_a_shard_is_detected(run_copy: Path) -> None:
    name = _listed(run_copy)[-1]
    shard = run_copy / "records" / name
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    run = rlvr("audit", "rollouts", run_copy)
    assert run.code == 1 and f"{name} does not match its sha256" in run.stdout


def _rewrite_shard(run_dir: Path, name: str) -> None:
    """Change a shard's rows and write its new sha256 into the manifest, as a careful editor would."""
    import pyarrow.parquet as pq

    from rlvr_cli.files import sha256_file

    shard = run_dir / "records" / name
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[0]["reward"] = 1.0 - (rows[0]["reward"] or 0.0)
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), shard)
    manifest = json.loads((run_dir / "records" / "manifest.json").read_text())
    for entry in manifest["shards"]:
        if entry["file"] == name:
            entry["sha256"] = sha256_file(shard)
    (run_dir / "records" / "manifest.json").write_text(json.dumps(manifest))


def test_a_shard_rewritten_with_its_manifest_entry_is_caught_by_the_checkpoints_pin(
    trained: tuple[Path, Path], run_copy: Path
) -> None:
    _rewrite_shard(run_copy, _listed(run_copy)[-1])
    run = rlvr("audit", "rollouts", run_copy)
    assert run.code == 1 and "not what checkpoint step-" in run.stdout and "pinned" in run.stdout
    resumed = rlvr("train", trained[0] / CONTRACT, "--run-dir", run_copy, "--resume", "--max-steps", "21", timeout=300)
    assert resumed.code == 1 and "not what checkpoint step-20 pinned" in resumed.stderr, resumed.stderr[-1000:]
    assert "Traceback" not in resumed.stderr


def test_the_report_of_tampered_records_says_so_and_exits_1(trained: tuple[Path, Path], run_copy: Path) -> None:
    untouched = rlvr("report", trained[1], "--out", run_copy.parent / "untouched.html")
    assert untouched.code == 0 and "MISMATCH" not in (run_copy.parent / "untouched.html").read_text()
    name = _listed(run_copy)[0]
    shard = run_copy / "records" / name
    shard.write_bytes(shard.read_bytes()[:-10] + b"0123456789")
    run = rlvr("report", run_copy)
    assert run.code == 1 and "not what the run wrote" in run.stderr and "Traceback" not in run.stderr, run.stderr
    page = (run_copy / "report.html").read_text()
    assert "MISMATCH" in page and f"{name} does not match its sha256" in page


def test_the_report_says_the_runs_model_flops_and_mfu_from_its_metrics(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    """The compute fact: Σ step_tflop over Σ step_seconds × the peak plan.json measured."""
    import re

    run_dir = trained[1]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("step_tflop") and r.get("step_seconds")]
    peak = json.loads((run_dir / "plan.json").read_text())["peak_tflops"]
    mfu = sum(r["step_tflop"] for r in rows) / (sum(r["step_seconds"] for r in rows) * peak)
    assert rlvr("report", run_dir, "--out", tmp_path / "r.html").code == 0
    fact = re.search(r"compute</th><td>([^<]*)", (tmp_path / "r.html").read_text()).group(1)
    assert f"MFU {mfu:.1%} of {peak:g} TFLOP/s the best measured on this machine per device × 1" in fact, fact
    plan = json.loads((run_dir / "plan.json").read_text())
    del plan["peak_source"]  # a run from before the peak was cached: its own start-up measurement
    older = tmp_path / "older"
    shutil.copytree(run_dir, older)
    (older / "plan.json").write_text(json.dumps(plan))
    assert rlvr("report", older, "--out", tmp_path / "o.html").code == 0
    assert "TFLOP/s measured per device × 1" in (tmp_path / "o.html").read_text()


def test_missing_and_foreign_shards_are_detected(run_copy: Path) -> None:
    first, *_, last = _listed(run_copy)
    (run_copy / "records" / last).unlink()
    shutil.copyfile(run_copy / "records" / first, run_copy / "records" / "extra.parquet")
    run = rlvr("audit", "rollouts", run_copy)
    assert run.code == 1
    assert f"{last} is listed but missing" in run.stdout and "extra.parquet is not listed" in run.stdout


def test_bad_run_folders_get_clear_messages(tmp_path: Path) -> None:
    assert rlvr("audit", "rollouts", tmp_path / "nope").code == 2
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("x")
    run = rlvr("audit", "rollouts", tmp_path / "foreign")
    assert run.code == 1 and "not an rlvr run folder" in run.stderr and "Traceback" not in run.stderr
    assert rlvr("report", tmp_path / "foreign").code == 1
    assert rlvr("status", tmp_path / "foreign").code == 1


def test_gate_verdict_follows_from_its_own_numbers(trained: tuple[Path, Path]) -> None:
    """Each gate's pass/fail is recomputed here from the per-item values it wrote and the
    thresholds of the contract; the release and the exit code must follow from them."""
    folder, run_dir = trained
    run = rlvr("gate", folder / CONTRACT, "--candidate", run_dir, "--baseline", folder / "model", timeout=300)
    verdict = json.loads((run_dir / "gate" / "verdict.json").read_text())
    evaluation = json.loads((run_dir / "gate" / "evaluation.json").read_text())
    gates = {g["name"]: g for g in verdict["gates"]}
    assert list(gates) == ["holdout-correct", "holdout-no-regression", "sealed-correct", "verifier-errors"]
    for name, split in (("holdout-correct", "holdout"), ("sealed-correct", "sealed_eval")):
        items = evaluation[split]
        rows = (folder / "data" / f"{split}.jsonl").read_text().splitlines()
        assert gates[name]["overall"]["items"] == len(items) == len(rows)
        correct = [sum(c["correct"] for c in v["components"]) / len(v["components"]) for v in items.values()]
        assert abs(gates[name]["overall"]["candidate"][0] - sum(correct) / len(correct)) < 1e-9
    low = gates["holdout-correct"]["overall"]["candidate"][1]
    assert gates["holdout-correct"]["overall"]["passed"] == (low >= 0.3)
    assert gates["holdout-no-regression"]["overall"]["passed"] == (
        gates["holdout-no-regression"]["overall"]["delta"][1] >= 0
    )
    assert gates["sealed-correct"]["overall"]["passed"] == (gates["sealed-correct"]["overall"]["delta"][1] >= -0.02)
    release = all(g["overall"]["passed"] for g in gates.values())
    assert verdict["release"] == ("pass" if release else "fail") and run.code == (0 if release else 1)
    assert f"release: {verdict['release'].upper()}" in run.stdout and "holdout-correct *" in run.stdout


def test_a_format_bonus_alone_fails_the_shipped_gates(trained: tuple[Path, Path], tmp_path: Path) -> None:
    """A policy that formats every answer and gets none right (0.2 reward a sample, 0 % correct)
    fails the shipped release gates; gated on reward_mean, as they were, it passed."""
    folder, _ = trained
    formatted = {}
    for split in ("holdout", "sealed_eval"):
        rows = [json.loads(x) for x in (folder / "data" / f"{split}.jsonl").read_text().splitlines()]
        one = {"rewards": [0.2], "components": [{"correct": 0.0, "format": 1.0}], "statuses": ["ok"], "lengths": [2]}
        formatted[split] = {str(r["id"]): {"task": r, **one} for r in rows}
    candidate = tmp_path / "formatted.json"
    candidate.write_text(json.dumps(formatted))
    shipped = rlvr("gate", folder / CONTRACT, "--candidate", candidate, "--baseline", folder / "model", timeout=300)
    assert shipped.code == 1 and "release: FAIL" in shipped.stdout, shipped.stdout + shipped.stderr
    assert json.loads((tmp_path / "formatted-gate" / "verdict.json").read_text())["release"] == "fail"
    old = tmp_path / "old"
    shutil.copytree(folder, old, ignore=shutil.ignore_patterns("runs"))
    text = (old / CONTRACT).read_text()
    start, end = text.index("  gates:\n"), text.index("- {name: verifier-errors")
    gates = (
        "  gates:\n"
        "    - {name: holdout-accuracy, metric: reward_mean, split: holdout, min_delta: 0.0, critical: true}\n"
        "    - {name: sealed-accuracy, metric: reward_mean, split: sealed_eval, max_drop: 0.02}\n    "
    )
    (old / CONTRACT).write_text(text[:start] + gates + text[end:])
    fooled = rlvr("gate", old / CONTRACT, "--candidate", candidate, "--baseline", folder / "model", timeout=300)
    assert fooled.code == 0 and "release: PASS" in fooled.stdout, fooled.stdout + fooled.stderr


def test_a_critical_gate_failing_in_one_segment_fails_the_release(trained: tuple[Path, Path], tmp_path: Path) -> None:
    folder, run_dir = trained
    exp = tmp_path / "exp"
    shutil.copytree(folder, exp, ignore=shutil.ignore_patterns("runs"))
    contract = exp / CONTRACT
    text = contract.read_text().replace(
        "metric: correct, split: holdout, min: 0.3, confidence: 0.9, critical: true}",
        "metric: success_rate, split: holdout, min: 0.99, segments: [difficulty], critical: true}",
    )
    contract.write_text(text)
    run = rlvr(
        "gate",
        contract,
        "--candidate",
        run_dir,
        "--baseline",
        folder / "model",  # the starting policy, whatever other tests ran before
        timeout=300,
    )
    assert run.code == 1 and "release: FAIL" in run.stdout
    assert "difficulty=" in run.stdout
    # the failed check reads true as written: the bound is below the minimum, which it needed to reach
    assert "< min 0.99 (needs ≥)" in run.stdout and "≥ min 0.99" not in run.stdout.replace("needs ≥", "")


def test_audit_rewards_compares_two_policies(trained: tuple[Path, Path]) -> None:
    folder, run_dir = trained
    same = rlvr(
        "audit",
        "rewards",
        folder / CONTRACT,
        "--policy",
        folder / "model",
        "--policy",
        folder / "model",
        "--format",
        "json",
        timeout=300,
    )
    data = json.loads(same.stdout)
    assert same.code == 0 and data["no_difference"] and data["flag"]
    assert data["difference_b_minus_a"]["mean"] == 0.0
    two = rlvr("audit", "rewards", folder / CONTRACT, "--policy", folder / "model", "--policy", run_dir, timeout=300)
    assert two.code == 0 and "B - A" in two.stdout
    assert rlvr("audit", "rewards", folder / CONTRACT, "--policy", folder / "model").code == 2


FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
MEASURE = (
    "<script>window.addEventListener('load',()=>{const d=document.documentElement;"
    "const out=document.createElement('pre');out.id='measured';"
    "out.textContent=JSON.stringify({scroll:d.scrollWidth,client:d.clientWidth,"
    "ticks:[...document.querySelectorAll('svg.chart')].map(s=>[s.querySelectorAll('.tick.x').length,"
    "s.querySelectorAll('.tick.y').length]),labels:[...document.querySelectorAll('.threshold-label')]"
    ".map(t=>t.getBBox().width)});document.body.appendChild(out);});</script>"
)


def _chromium() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed for this test (make test installs it)"
    return chromium


def _measure(page: Path, width: int, tmp_path: Path) -> dict:
    """Layout facts read from the page as Chromium lays it out at `width` pixels (a measuring
    script is added to a copy: the report itself has none)."""
    probe = tmp_path / f"measure-{width}.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = subprocess.run(
        [
            _chromium(),
            *FLAGS,
            f"--user-data-dir={tmp_path / 'ud'}",
            f"--window-size={width},1200",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = dom.stdout.split('<pre id="measured">', 1)[1].split("</pre>", 1)[0]
    return json.loads(found.replace("&quot;", '"'))


def test_report_reads_in_a_real_browser(trained: tuple[Path, Path], tmp_path: Path) -> None:
    folder, run_dir = trained
    assert rlvr("gate", folder / CONTRACT, "--candidate", run_dir, timeout=600).code in (0, 1)
    out = tmp_path / "report.html"
    run = rlvr("report", run_dir, "--out", out)
    assert run.code == 0 and out.is_file()
    html = out.read_text()
    assert "<script" not in html and "http" not in html.split("<body>", 1)[1].split("sha256", 1)[0]
    assert html.count('<svg class="chart"') == 11 and "holdout/correct" in html and "train/correct" in html
    assert "<b>Release: <span" in html and "<h2>Gates</h2>" in html and "holdout-correct" in html
    # the verdict comes first, before what was run; each gate names the baseline it was judged against
    assert html.index("class='glance'") < html.index("<h2>The run</h2>") < html.index("What was run")
    assert "for the baseline <code>" in html
    # the task itself, apart from the format bonus; steps counted from 1 as the progress counts them
    # the curve starts before the first update (holdout-start.json); a run folder without it
    # (written before it existed) starts at its first evaluation, and says so
    assert "Held-out correct while training (hint-free, greedy)" in html and " before training → " in html
    older = tmp_path / "older"
    shutil.copytree(run_dir, older)
    (older / "holdout-start.json").unlink()
    assert rlvr("report", older, "--out", tmp_path / "older.html").code == 0
    assert "after step 10 (the first evaluation) → " in (tmp_path / "older.html").read_text()
    assert "(its words, not a measurement)" in html
    assert "sha256" in html and "What was run" in html and "Samples" in html
    for width in (1400, 800):
        facts = _measure(out, width, tmp_path)
        assert facts["scroll"] <= facts["client"], f"the page overflows at {width}px: {facts}"
        assert facts["ticks"] and all(x >= 3 and y >= 3 for x, y in facts["ticks"]), facts["ticks"]
        assert facts["labels"] and all(w > 20 for w in facts["labels"])  # thresholds carry visible labels
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            _chromium(),
            *FLAGS,
            f"--user-data-dir={tmp_path / 'ud'}",
            f"--screenshot={shot}",
            "--window-size=1400,1800",
            out.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    assert shot.is_file() and shot.stat().st_size > 20_000  # a page with plots, not a blank one


def test_report_compares_runs_key_by_key(trained: tuple[Path, Path], tmp_path: Path) -> None:
    folder, run_dir = trained
    other_contract = folder / "variant.rlvr.yaml"
    other_contract.write_text((folder / CONTRACT).read_text().replace("name: arith", "name: arith-variant"))
    text = other_contract.read_text()
    assert "high: 0.28" in text or "high: 0.2" in text
    other_contract.write_text(text.replace("high: 0.28", "high: 0.35").replace("high: 0.2}", "high: 0.35}"))
    other = tmp_path / "variant"
    shutil.copytree(run_dir, other)
    plan = json.loads((other / "plan.json").read_text())
    (other / "plan.json").write_text(json.dumps({**plan, "contract": str(other_contract), "name": "arith-variant"}))
    out = tmp_path / "compare.html"
    run = rlvr("report", run_dir, other, "--out", out)
    assert run.code == 0, run.stderr
    page = out.read_text()
    assert "Comparing 2 runs" in page and "objective.clip.high" in page and "<code>name</code>" in page
    assert page.count('<svg class="chart"') >= 6 and "arith-variant" in page
    assert rlvr("report", run_dir, tmp_path / "missing").code == 2


def test_wrong_answers_and_successes_are_counted_on_correctness_not_the_bonus(trained: tuple[Path, Path]) -> None:
    _, run_dir = trained
    report = json.loads(rlvr("audit", "rollouts", run_dir, "--format", "json").stdout)
    import pyarrow.parquet as pq

    manifest = json.loads((run_dir / "records" / "manifest.json").read_text())["shards"]
    rows = [r for s in manifest for r in pq.read_table(run_dir / "records" / s["file"]).to_pylist()]
    valid = [r for r in rows if r["status"] in ("ok", "format_error")]
    wrong = [r for r in valid if json.loads(r["components"])["correct"] == 0]
    assert report["wrong_answers"] == len(wrong) > report["format_errors"]  # a format bonus is not a success
    assert all(s["reward"] >= 1.2 - 1e-9 for s in report["suspicious_successes"])


def test_gate_intervals_read_estimate_then_bounds(trained: tuple[Path, Path], tmp_path: Path) -> None:
    _, run_dir = trained
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "gate").mkdir(exist_ok=True)
    gate = {"name": "g", "metric": "correct", "split": "holdout", "critical": True, "failed_segments": []}
    overall = {"candidate": [0.9, 0.8, 1.0], "delta": [0.5, 0.25, 0.75], "passed": True, "checks": ["ok"]}
    (copy / "gate" / "verdict.json").write_text(
        json.dumps({"release": "pass", "baseline": "b", "gates": [{**gate, "overall": overall}]})
    )
    out = tmp_path / "r.html"
    assert rlvr("report", copy, "--out", out).code == 0
    page = out.read_text()
    assert "0.900 [0.800, 1.000]" in page and "0.500 [0.250, 0.750]" in page


def test_report_shows_the_data_check_and_whether_the_records_name_it(run_copy: Path, tmp_path: Path) -> None:
    page = rlvr("report", run_copy, "--out", tmp_path / "a.html")
    assert page.code == 0
    text = (tmp_path / "a.html").read_text()
    assert "<h2>Data</h2>" in text and "every record names this report" in text
    changed = (run_copy / "data-check.json").read_text().replace('"errors": 0', '"errors": 0 ')
    (run_copy / "data-check.json").write_text(changed)  # the report was edited after the run
    rlvr("report", run_copy, "--out", tmp_path / "b.html")
    assert "records name another report" in (tmp_path / "b.html").read_text()
    audited = rlvr("audit", "rollouts", run_copy)
    assert audited.code == 1 and "data check: FAILED" in audited.stdout


@pytest.mark.parametrize(("first", "flagged"), [(5, []), (40, ["length 40 vs mean 5.3"])])
def test_a_length_outlier_needs_more_than_a_token_to_be_suspicious(run_copy: Path, first: int, flagged: list) -> None:
    """All successes 4 tokens long but the first: one of 5 tokens (5σ off, but one token) is
    not shown for review as a length outlier; one of 40 is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlvr_cli.files import sha256_file

    manifest_path = run_copy / "records" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    seen = 0
    for shard in manifest["shards"]:
        path = run_copy / "records" / shard["file"]
        rows = pq.read_table(path).to_pylist()
        for row in rows:
            if row["reward"] is not None and row["reward"] >= 1.2 - 1e-9 and row["kept"]:
                row["response_ids"] = [5] * (first if seen == 0 else 4)
                seen += 1
        pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path, compression="zstd")
        shard["sha256"] = sha256_file(path)
    manifest_path.write_text(json.dumps(manifest))
    shutil.rmtree(run_copy / "checkpoints")  # they pin the records as written; this test rewrites them
    assert seen > 20
    run = rlvr("audit", "rollouts", run_copy, "--format", "json")
    assert run.code == 0, run.stdout
    why = [w for s in json.loads(run.stdout)["suspicious_successes"] for w in s["why"] if "length" in w]
    assert why == flagged
