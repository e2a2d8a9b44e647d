"""The README's tour, run as written: its `my-exp` commands in their order, the "break
something" output it prints, the data split that follows the lock, and the rendered
conversation. The README cannot drift from what the commands do."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, rlvr

README = (ROOT / "README.md").read_text()
CONTRACT = "my-exp/experiment.rlvr.yaml"


def _commands(block_start: str) -> list[list[str]]:
    """The `rlvr ...` lines of the bash block that holds `block_start`, comments dropped."""
    block = README[README.index(block_start) :].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("rlvr ")]


def _text_block_after(marker: str) -> list[str]:
    tail = README[README.index(marker) :]
    return tail.split("```text\n", 1)[1].split("```", 1)[0].strip().splitlines()


@pytest.mark.slow  # builds the tour's tiny model: make test runs it, make test-fast does not
def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    tour = _commands("rlvr init my-exp")
    assert [c[0] for c in tour] == ["init", "validate", "validate", "lock"]
    for args in tour:
        done = rlvr(*args, cwd=tmp_path, timeout=600)
        assert done.code == 0, (args, done.stdout, done.stderr)

    # "Now break something": the output the README shows, line for line
    path = tmp_path / CONTRACT
    good = path.read_text()
    broken = re.sub(r"group_size: \d+", "group_size: 1", good, count=1).replace("entropy_coef:", "entropy_coeff:")
    path.write_text(broken)
    shown = rlvr("validate", CONTRACT, cwd=tmp_path)
    assert shown.code == 1 and shown.stdout.strip().splitlines() == _text_block_after("Now break something")
    path.write_text(broken.replace("entropy_coeff:", "entropy_coef:"))
    shown = rlvr("validate", CONTRACT, cwd=tmp_path)
    assert shown.stdout.strip().splitlines() == _text_block_after("fix the key name and the semantic rules run")
    path.write_text(good)

    # the data split after the lock: it says what to do next, and doing it makes the lock whole again
    (split,) = [c for c in _commands("rlvr data split my-exp") if c[:2] == ["data", "split"]]
    done = rlvr(*split, cwd=tmp_path)
    assert done.code == 0, done.stderr
    assert "add `split_manifest: data/split-manifest.json`" in done.stderr and "rlvr lock" in done.stderr
    stale = rlvr("validate", "--deep", CONTRACT, cwd=tmp_path)
    assert stale.code == 1 and "RLV104" in stale.stdout  # the lock pins the splits it replaced
    assert "`split_manifest: data/split-manifest.json` to the contract's `data:` section" in README.replace("\n", " ")
    path.write_text(good.replace("  splits:\n", "  split_manifest: data/split-manifest.json\n  splits:\n", 1))
    assert rlvr("lock", CONTRACT, cwd=tmp_path).code == 0
    whole = rlvr("validate", "--deep", "--strict", CONTRACT, cwd=tmp_path)
    assert whole.code == 0, whole.stdout

    # a conversation of one's own, rendered: "Only `7<|im_end|>` is trained"
    block = README[README.index('echo \'{"messages"') :].split("```", 1)[0].strip().splitlines()
    assert len(block) == 2 and block[1].startswith("rlvr render")
    subprocess.run(["bash", "-c", block[0]], cwd=tmp_path, check=True, timeout=30)
    shown = rlvr(*shlex.split(block[1])[1:], cwd=tmp_path)
    assert shown.code == 0, shown.stderr
    trained = shown.stdout.split("assistant content, tokens 23-25, trained]\n", 1)[1].splitlines()[0]
    assert "Only `7<|im_end|>` is trained" in README and trained == "7<|im_end|>"
    assert "26 tokens, 2 trained" in shown.stdout and "0 error(s), 0 warning(s)" in shown.stderr
