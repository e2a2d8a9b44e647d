"""`rlvr tasks review CONTRACT TASKS`: the body (tasks_cli.py parses)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr_cli.commands.common import load_valid_contract, require_extra
from rlvr_cli.commands.formats import user_code_to_stderr
from rlvr_cli.errors import ExitCode, RlvrError, UsageProblem


def run_review(contract_path: Path, tasks: Path, fmt: str) -> int:
    require_extra("train", "torch", "transformers")
    from rlvr_cli.audit.review import review
    from rlvr_cli.contract.tasks import MAX_ROW_BYTES, parse_task, split_file_problem, task_lines

    if fmt not in ("text", "json"):
        raise UsageProblem(f"--format {fmt!r}: text or json")
    problem = split_file_problem(tasks)
    if problem:
        raise UsageProblem(f"{tasks}: {problem}")
    contract = load_valid_contract(contract_path)
    rows = []
    for number, raw in task_lines(tasks):
        row, bad = parse_task(raw) if raw is not None else (None, f"a line over {MAX_ROW_BYTES:,} bytes")
        if bad:
            raise RlvrError(f"{tasks}:{number}: {bad}")
        rows.append((number, row))
    if not rows:
        raise RlvrError(f"{tasks} holds no task")
    with user_code_to_stderr():
        findings = review(contract, contract_path.resolve().parent, rows)
    errors = sum(f.severity == "error" for f in findings)
    if fmt == "json":
        sys.stdout.write(
            json.dumps({"tasks": len(rows), "errors": errors, "findings": [f.as_json() for f in findings]})
        )
        sys.stdout.write("\n")
    else:
        for f in findings:
            print(f"{tasks}:{f.line}: {f.severity} [{f.code}] task {f.task}: {f.message}")
        print(f"{len(rows)} task(s) reviewed: {errors} error(s), {len(findings) - errors} warning(s)")
    return ExitCode.FAILED if errors else 0


def run_generate(contract_path: Path, spec_path: Path, out: Path, cache: Path | None) -> int:
    require_extra("train", "torch", "transformers")
    from rlvr_cli.audit.task_generation import Spec, generate

    spec = Spec.read(spec_path)
    contract = load_valid_contract(contract_path)
    with user_code_to_stderr():
        done = generate(spec, contract, contract_path.resolve().parent, out, cache or spec_path.parent / ".rlvr-cache")
    print(
        f"{done['rows']} task(s) written to {out} ({done['requests']} request(s) to {spec.url}, "
        f"the rest from the cache{'; resumed at request ' + str(done['resumed_at']) if done['resumed_at'] else ''}); "
        f"{len(done['skipped'])} repl(ies) skipped"
    )
    for skipped in done["skipped"][:10]:
        print(f"  request {skipped['request']}: {skipped['why']}", file=sys.stderr)
    print(f"next: rlvr tasks review {contract_path} {out}", file=sys.stderr)
    return 0
