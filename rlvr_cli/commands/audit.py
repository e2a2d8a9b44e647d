"""`rlvr audit verifier|isolation|rollouts|rewards`: glue between the CLI and rlvr_cli.audit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rlvr_cli.commands.common import load_valid_contract, require_extra
from rlvr_cli.commands.formats import as_json, check, emit, reporter, user_code_to_stderr
from rlvr_cli.errors import UsageProblem


def run_audit_verifier(contract_path: Path, candidates: Path | None, fmt: str, sample: int | None) -> int:
    from rlvr_cli.audit.verifier import run_audit

    check("audit verifier", fmt)
    contract = load_valid_contract(contract_path)
    folder = contract_path.resolve().parent
    with user_code_to_stderr():
        report = run_audit(contract, folder, _candidates(candidates, folder), sample)
    emit("audit verifier", fmt, report)
    verdict = "FAILED" if report.failed else "passed"
    skipped = f", {len(report.not_run)} could not run" if report.not_run else ""
    found = f", {len(report.findings)} finding(s)" if report.findings else ""
    print(
        f"verifier audit {verdict}: {len(report.disagreements)} disagreement(s) in {len(report.outcomes)} candidates"
        + skipped
        + found,
        file=sys.stderr,
    )
    return 1 if report.failed else 0


@reporter("audit verifier", "text")
def _verifier_text(report: Any) -> str:
    from rlvr_cli.audit.verifier import report_text

    return report_text(report)


@reporter("audit verifier", "json")
def _verifier_json(report: Any) -> str:
    return as_json(
        {
            "outcomes": [o.as_json() for o in report.outcomes],
            "by_kind": {k: dict(v) for k, v in report.matrix("kind").items()},
            "disagreements": len(report.disagreements),
            "not_run": len(report.not_run),
            "notes": report.notes,
            "findings": report.findings,
        }
    )


def run_audit_isolation(contract_path: Path, sessions: int, candidates: Path | None, fmt: str) -> int:
    require_extra("env", "fastapi", "uvicorn", "httpx")
    from rlvr_cli.audit.isolation import run_isolation

    check("audit isolation", fmt)
    contract = load_valid_contract(contract_path)
    folder = contract_path.resolve().parent
    with user_code_to_stderr():
        report = run_isolation(contract, folder, sessions, _candidates(candidates, folder))
    emit("audit isolation", fmt, report)
    print(f"isolation audit {'passed' if report.ok else 'FAILED'}", file=sys.stderr)
    return 0 if report.ok else 1


def _candidates(given: Path | None, folder: Path) -> Path:
    """A named candidates file must exist (a typo is a usage error, never an empty control group)."""
    if given is not None and not given.is_file():
        raise UsageProblem(f"{given}: no such candidates file")
    return given or folder / "audit" / "candidates.yaml"


@reporter("audit isolation", "text")
def _isolation_text(report: Any) -> str:
    from rlvr_cli.audit.isolation import report_text

    return report_text(report)


@reporter("audit isolation", "json")
def _isolation_json(report: Any) -> str:
    return as_json(
        {
            "sessions": report.sessions,
            "calls": report.calls,
            "refused": report.refused,
            "ok": report.ok,
            "findings": report.findings,
        }
    )


def run_audit_rollouts(run_dir: Path, fmt: str) -> int:
    require_extra("train", "pyarrow")
    from rlvr_cli.audit.rollout_audit import audit
    from rlvr_cli.store.run import RunFolder

    check("audit rollouts", fmt)
    run = RunFolder.existing(run_dir)
    if not run.records.is_dir():
        from rlvr_cli.errors import RlvrError

        raise RlvrError(f"{run_dir} is not an rlvr run folder (no records/)")
    report = audit(run_dir)
    emit("audit rollouts", fmt, report)
    trees = report.get("session_trees") or {}
    return 0 if report["manifest_ok"] and report["data_check"]["ok"] and not trees.get("problems") else 1


@reporter("audit rollouts", "text")
def _rollouts_text(report: dict[str, Any]) -> str:
    from rlvr_cli.audit.rollout_audit import report_text

    return report_text(report)


reporter("audit rollouts", "json")(as_json)


def run_audit_rewards(
    contract_path: Path,
    policies: list[str],
    samples: int,
    split: str,
    fmt: str,
    profile_out: Path | None = None,
    timeout_s: float = 120.0,
    tasks_path: Path | None = None,
) -> int:
    """Two or more policies (local folders or `openai:MODEL@URL`, weakest first) on the same
    tasks: the paired comparison of the first two, and the reward profile of all."""
    require_extra("train", "torch", "transformers")
    from rlvr_cli.audit import endpoint
    from rlvr_cli.audit.evaluate import evaluate
    from rlvr_cli.audit.gates import compare_evaluations
    from rlvr_cli.audit.profile import profile
    from rlvr_cli.contract.tasks import read_split

    check("audit rewards", fmt)
    if len(policies) < 2:
        raise UsageProblem("give two or more --policy options (local folders or openai:MODEL@URL), weakest first")
    if split not in ("train", "holdout"):
        raise UsageProblem(f"--split {split!r}: train or holdout (sealed_eval is read by the final evaluation only)")
    contract = load_valid_contract(contract_path)
    folder = contract_path.resolve().parent
    if tasks_path is not None:  # tasks not split yet (generated, reviewed): profiled before `data split`
        tasks, split = read_split(tasks_path, str(tasks_path)), tasks_path.name
    else:
        tasks = read_split(folder / getattr(contract.data.splits, split).path, split)
    evaluations = []
    with user_code_to_stderr():
        for spec in policies:
            if endpoint.is_endpoint(spec):
                evaluations.append(_endpoint(contract, folder, spec, tasks, samples, timeout_s))
            elif not Path(spec).exists():
                raise UsageProblem(f"--policy {spec}: no such folder (or give openai:MODEL@URL)")
            else:
                evaluations.append(
                    evaluate(contract, folder, Path(spec), split, samples=samples, greedy=False, seed=1, tasks=tasks)
                )
    result = compare_evaluations(contract, (policies[0], evaluations[0]), (policies[1], evaluations[1]), samples, split)
    result["profile"] = profile(policies, evaluations, contract.objective.reward.best, split, samples)
    if profile_out is not None:
        from rlvr_cli.files import atomic_write_text

        rows = result["profile"]["profile"]
        atomic_write_text(profile_out, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    emit("audit rewards", fmt, result)
    return 0


def _endpoint(
    contract: Any, folder: Path, spec: str, tasks: list[dict[str, Any]], samples: int, timeout_s: float
) -> dict[str, Any]:
    """An endpoint's samples judged: answers by the verifier, or (tool use) episodes by the server."""
    from rlvr_cli.audit.endpoint import evaluate_endpoint
    from rlvr_cli.audit.endpoint_tools import evaluate_tool_endpoint

    tool_use = contract.environment.kind == "tool_use"
    judge = evaluate_tool_endpoint if tool_use else evaluate_endpoint
    return judge(contract, folder, spec, tasks, samples, timeout_s, 1)


@reporter("audit rewards", "text")
def _rewards_text(result: dict[str, Any]) -> str:
    from rlvr_cli.audit.profile import text

    d = result["difference_b_minus_a"]
    lines = [
        f"{result['items']} {result['split']} tasks × {result['samples_per_item']} samples: "
        f"A {result['policy_a']['reward_mean']:.3f}, B {result['policy_b']['reward_mean']:.3f}; "
        f"B - A {d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] (p = {d['p_value']:.3f})",
        f"tasks all-correct for both: {result['both_all_correct_share']:.0%}; "
        f"all-wrong for both: {result['both_all_wrong_share']:.0%}",
    ]
    if result["flag"]:
        lines.append(f"FLAG: {result['flag']}")
    lines.append(text(result["profile"]))
    return "\n".join(lines)


reporter("audit rewards", "json")(as_json)
