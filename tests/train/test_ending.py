"""How a run that did not finish ends (train/ending.py): a signal whose `Interrupted` the code it
was raised in turned into another error still ends the run as that signal's pause."""

from __future__ import annotations

import io
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlvr_cli.commands.train import signals_unwind
from rlvr_cli.errors import Interrupted
from rlvr_cli.train.ending import ended


class Run(SimpleNamespace):
    """What `ended` reads of a run: its step, where it writes, the status it is given."""

    def __init__(self, folder: Path) -> None:
        found = SimpleNamespace(complete_checkpoints=lambda: [(2, folder / "checkpoints" / "step-2")], path=folder)
        hp = SimpleNamespace(max_steps=4)
        super().__init__(
            state=SimpleNamespace(step=3),
            setup=SimpleNamespace(main=True, world=1),
            folder=found,
            contract_path=folder / "experiment.rlvr.yaml",
            steps=4,
            contract=SimpleNamespace(hyperparameters=hp),
            statuses=[],
        )

    def status(self, state: str, **fields: str) -> None:
        self.statuses.append((state, fields["reason"]))


def saved_through_a_signal(during: bool) -> RuntimeError:
    """torch.save into a stream whose third write runs the SIGTERM handler (as the interpreter
    does when the signal arrives during it), or fails on its own: what torch's zip writer raises."""

    class Stream(io.BytesIO):
        writes = 0

        def write(self, data):  # type: ignore[override]
            Stream.writes += 1
            if Stream.writes == 3:
                if during:
                    signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
                raise OSError("the device went away")
            return super().write(data)

    with pytest.raises(RuntimeError) as caught:
        torch.save({"w": torch.zeros(1000)}, Stream())
    return caught.value


@pytest.mark.parametrize("during", [True, False], ids=["a signal during the write", "no signal"])
def test_an_error_a_signal_became_ends_the_run_as_the_signals_pause(tmp_path: Path, during: bool) -> None:
    run = Run(tmp_path)
    with signals_unwind():
        error = saved_through_a_signal(during)
        assert "unexpected pos" in str(error) or "the device went away" in str(error)
        if during:
            with pytest.raises(Interrupted) as stopped:
                ended(run, error)
            assert stopped.value.exit_code == 143 and run.statuses[0][0] == "paused"
            assert "interrupted by SIGTERM at step 3" in run.statuses[0][1]
        else:  # the paired case: the same error with no signal is a failure, reported as it is
            with pytest.raises(RuntimeError):
                ended(run, error)
            assert run.statuses[0][0] == "failed"
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # `ended` absorbs later signals until the command ends
    signal.signal(signal.SIGINT, signal.default_int_handler)
