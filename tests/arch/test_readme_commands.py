"""Every command the README shows is run: by `make demo` (the same command, up to where its run
folders go and how many steps it trains), by the README tour test (which parses its blocks out of
the README), by the test named for it below, or here. A command added to the README without one
of those fails this test, so the README cannot drift from what the commands do."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

from tests.conftest import ROOT, rlvr

README = (ROOT / "README.md").read_text()

#: the tour test runs the README from each of these to the end of its block, as written
#: (tests/arch/test_readme_tour.py parses them out of the README)
TOUR = ("make install && . .venv/bin/activate", "rlvr data split my-exp", 'echo \'{"messages"')
#: cheap and read-only: this file runs them, on a copy of the shipped contracts
HERE = (
    "rlvr validate contracts/",
    "rlvr data check contracts/echo-cpu.rlvr.yaml",
    "rlvr plan contracts/grpo-7b-plan.rlvr.yaml --gpus 8 --gpu-memory 80",
)
#: the README command → the test that runs it, and text that test must hold to be running it
ELSEWHERE = {
    "rlvr init lookup --template lookup": ("tests/train/test_lookup_learns.py", '"--template", "lookup"'),
    "rlvr train lookup/experiment.rlvr.yaml --run-dir runs/lookup": (
        "tests/train/test_lookup_learns.py",
        'rlvr("train", contract, "--run-dir", run_dir',
    ),
    "rlvr audit rollouts runs/lookup": ("tests/train/test_lookup_learns.py", 'rlvr("audit", "rollouts", run_dir)'),
    "rlvr gate lookup/experiment.rlvr.yaml --candidate runs/lookup": (
        "tests/train/test_lookup_learns.py",
        'rlvr("gate", contract, "--candidate", run_dir',
    ),
    "rlvr report contracts/runs/grpo-cpu contracts/runs/dapo-cpu --by rollouts": (
        "tests/audit/test_budget_compare.py",
        'rlvr("report", *three_runs.values(), "--by", by',
    ),
    "rlvr release verify releases/bundles/ID": ("tests/release/test_release.py", 'rlvr("release", "verify", bundle)'),
    "rlvr release promote releases ID": ("tests/release/test_release.py", 'rlvr("release", "promote", root, a)'),
    "rlvr release drill releases --bundle ID": (
        "tests/release/test_release.py",
        'rlvr("release", "drill", root, "--bundle", b',
    ),
    "rlvr train contracts/grpo-cpu.rlvr.yaml --nproc 2 --run-dir runs/two": (
        "tests/train/test_distributed.py",
        '"--nproc", "2", "--run-dir"',
    ),
    "torchrun --standalone --nproc_per_node 2 -m rlvr_cli train contracts/grpo-cpu.rlvr.yaml --run-dir runs/two": (
        "tests/train/test_distributed.py",
        '"--standalone"',
    ),
}
#: set-up lines, not commands of rlvr's
SETUP = ("make demo", "make test", "make install && . .venv/bin/activate")


def _lines(block: str) -> list[str]:
    lines = [" ".join(line.split("#", 1)[0].split()) for line in block.splitlines()]
    return [line for line in lines if line]


def readme_commands() -> list[str]:
    """Every command line of the README's bash blocks, comments dropped."""
    return [line for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S) for line in _lines(block)]


def tour_commands() -> set[str]:
    return {line for marker in TOUR for line in _lines(README[README.index(marker) :].split("```", 1)[0])}


def demo_commands() -> set[str]:
    """`make demo`'s commands, with the Makefile's variables taken out."""
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    recipe = recipe.replace("\\\n", " ").replace("$(BIN)/", "").replace("$(DEMO)/", "")
    commands = set()
    for line in recipe.splitlines():
        for part in re.split(r"\|\||;|&&", line.split("#", 1)[0]):
            words = part.split()
            if words and words[0] in ("rlvr", "python"):
                commands.add(_normal(" ".join(words)))
    return commands


def _normal(command: str) -> str:
    """A run folder by its name alone, and neither where a run writes nor how far it goes."""
    words = shlex.split(command)
    out, skip = [], False
    for i, word in enumerate(words):
        if skip:
            skip = False
        elif word in ("--run-dir", "--max-steps"):
            skip = True
        else:
            out.append(re.sub(r"^(contracts/)?runs/", "", word) if i and words[i - 1] != "--out" else word)
    return " ".join(out)


def test_every_readme_command_is_run_by_the_demo_a_test_or_here() -> None:
    demo = demo_commands()
    assert "rlvr train contracts/echo-stop-cpu.rlvr.yaml" in demo  # the parsing found the demo's commands
    unrun, tour = [], tour_commands()
    for command in readme_commands():
        if command in SETUP or command in tour or command in HERE:
            continue
        if command in ELSEWHERE:
            test, text = ELSEWHERE[command]
            assert text in (ROOT / test).read_text(), f"{test} no longer runs `{command}`"
        elif command.startswith("python -m rlvr_cli") or command.startswith("rlvr "):
            if _normal(command) not in demo:
                unrun.append(command)
        else:
            unrun.append(command)
    assert not unrun, "README commands nothing runs (add them to make demo, a test, or this file):\n" + "\n".join(unrun)
    assert not set(ELSEWHERE) - set(readme_commands()), "ELSEWHERE names a command the README dropped"


def test_a_command_nothing_runs_is_caught() -> None:
    demo = demo_commands()
    assert _normal("rlvr train contracts/grpo-cpu.rlvr.yaml --max-steps 60") in demo
    assert _normal("rlvr train contracts/dapo-cpu.rlvr.yaml") not in demo
    assert _normal("rlvr gate contracts/echo-stop-cpu.rlvr.yaml --candidate contracts/runs/echo-stop-cpu") in demo
    assert _normal("rlvr gate contracts/echo-stop-cpu.rlvr.yaml --candidate contracts/runs/other") not in demo


def test_the_readme_commands_run_here_succeed(tmp_path: Path) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "contracts"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()
    for name in tracked:  # the shipped contracts only: a user's own files in contracts/ change nothing
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, tmp_path / name)
    listed = set(readme_commands())
    for command in HERE:
        assert command in listed, f"the README no longer shows `{command}`"
        done = rlvr(*shlex.split(command)[1:], cwd=tmp_path)
        assert done.code == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
