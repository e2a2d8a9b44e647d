"""`rlvr report RUN_DIR...`: one run's HTML report, or one page comparing several runs."""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr_cli.commands.common import require_extra
from rlvr_cli.errors import ExitCode, UsageProblem
from rlvr_cli.report.budget import AXES


def run_report(run_dirs: list[Path], out: Path | None, by: str | None = None) -> int:
    """One run: its report (default RUN_DIR/report.html). Several: one page comparing them
    (default ./rlvr-compare.html), at equal budget `by` (default: steps)."""
    require_extra("train", "pyarrow")
    from rlvr_cli.errors import RlvrError
    from rlvr_cli.files import atomic_write_text
    from rlvr_cli.report.page import write_report
    from rlvr_cli.store.run import RunFolder
    from rlvr_cli.trackers.fanout import publish

    for run_dir in run_dirs:
        if not RunFolder.existing(run_dir).metrics.is_file():
            raise RlvrError(f"{run_dir} is not an rlvr run folder (no metrics.jsonl)")
    if by is not None and by not in AXES:
        raise UsageProblem(f"--by {by}: choose {', '.join(AXES)}")
    if len(run_dirs) == 1:
        if by is not None:
            raise UsageProblem("--by compares runs at the same budget: give two or more run folders")
        page, problems = write_report(run_dirs[0], out)
        print(page)
        for line in publish(run_dirs[0], [page]):
            print(line, file=sys.stderr)
        if problems:
            raise RlvrError(
                f"the records of {run_dirs[0]} are not what the run wrote ({problems[0]}); the report says so "
                "and shows none of them (`rlvr audit rollouts` lists every problem)"
            )
        return ExitCode.OK
    from rlvr_cli.report.compare import build_compare

    target = out or Path("rlvr-compare.html")
    atomic_write_text(target, build_compare(run_dirs, by or "step"))
    print(target)
    return ExitCode.OK
