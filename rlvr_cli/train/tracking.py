"""The run's trackers (`monitoring.trackers`): opened with the plan, fed every metric row, closed
with the run's outcome. Only the main process writes to them."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr_cli import __version__
from rlvr_cli.errors import Interrupted
from rlvr_cli.trackers.fanout import Trackers, flatten

if TYPE_CHECKING:
    from rlvr_cli.train.loop import Progress, Run


def config_of(contract: Any, run_dir: Path) -> dict[str, Any]:
    """The contract as a tracker's config: dotted keys, plus where the run lives."""
    data = flatten(contract.model_dump(mode="json", exclude_none=True))
    return {**data, "rlvr.run_dir": str(run_dir.resolve()), "rlvr.version": __version__}


def open_trackers(run: Run, lock_file: Path | None) -> None:
    """Start the contract's trackers and send them the contract, its lock file and the plan."""
    specs = run.contract.monitoring.tracker_specs()
    if not specs or not run.setup.main:
        return
    resumed = run.state.step > 0
    config = config_of(run.contract, run.folder.path)
    run.trackers = Trackers.start(specs, run.folder.path, run.contract.name, config, run.state.step + 1, resumed)
    for path in (run.contract_path, lock_file, run.folder.plan):
        if path is not None and path.is_file():
            run.trackers.file(path)


def send(run: Run, step: int, row: dict[str, Any], progress: Progress | None = None) -> None:
    """One row at tracker step `step` (steps done); a tracker that failed is said once."""
    if run.trackers is None:
        return
    run.trackers.log(step, row)
    for line in run.trackers.news():
        if progress is not None:
            progress.say(line)
        else:
            print(line, file=sys.stderr)


@contextlib.contextmanager
def closing(run: Run) -> Iterator[None]:
    """However the run ends, its trackers finish with its outcome (a signal: paused; an error:
    failed; else what status.json says), and status.json says how they did."""
    outcome = None
    try:
        yield
    except (KeyboardInterrupt, Interrupted):
        outcome = "paused"
        raise
    except BaseException:
        outcome = "failed"
        raise
    finally:
        trackers = run.trackers
        if trackers is not None:
            with contextlib.suppress(Exception):
                for line in trackers.close(outcome or run.folder.read_status().state):
                    print(line, file=sys.stderr)
                run.folder.write_status(run.folder.read_status().with_trackers(trackers.states()))
