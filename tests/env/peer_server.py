"""Other frameworks' servers in tests. `served`: one run by that framework's own Python (NeMo
Gym's, OpenEnv's), its output to a file (a pipe nobody reads would fill and stall it), up once
`probe` answers 200, stopped (killed if it will not go) when the test is done. `bridged` points
the tool-use template at one; `validate_audit_train` runs what every environment must pass."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from rlvr_cli.env.agent import free_port
from tests.conftest import edit, rlvr


@contextlib.contextmanager
def served(command: list[str], probe: str, wait_s: float = 90.0) -> Iterator[str]:
    """Run `command` with the port appended; yield the server's base URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([*command, str(port)], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}{probe}", timeout=1).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise AssertionError(f"{command[1]} did not start: {log.read()[-2000:].decode(errors='replace')}")
                time.sleep(0.25)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def bridged(folder: Path, server: str, tools: list[str], reward: str | None = "reward") -> None:
    """The tool-use template's contract in `folder` pointed at another framework's server: its
    tools, no forbidden tool (the bridge declares none), and (`reward`) that one component."""
    edit(folder, "server: rlvr_cli.env.builtin.file_edit:FileEditServer", f"server: {server}")
    edit(folder, "tools: [list_files, read_file, write_file, replace_in_file]", f"tools: [{', '.join(tools)}]")
    edit(folder, "forbidden_tools: [delete_file]", "forbidden_tools: []")
    if reward is not None:
        edit(folder, "components: [{name: success, weight: 1.0}]", f"components: [{{name: {reward}, weight: 1.0}}]")


def experiment(
    template: Path, model: Path, folder: Path, server: str, tools: list[str], rows: Any, candidates: list[dict]
) -> Path:
    """The tool-use template copied to `folder` with the tiny model, pointed at `server`, two
    training steps, `rows(start, n)` as its 24 tasks (16 train, 4 holdout, 4 sealed_eval) and
    `candidates` as its control group."""
    shutil.copytree(template, folder)
    shutil.copytree(model, folder / "model")
    bridged(folder, server, tools)
    edit(folder, "max_steps: 50", "max_steps: 2")
    splits = {"all": rows(0, 24), "train": rows(0, 16), "holdout": rows(16, 4), "sealed_eval": rows(20, 4)}
    for name, found in splits.items():
        (folder / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in found))
    (folder / "audit" / "candidates.yaml").write_text(json.dumps({"candidates": candidates}))
    return folder


def validate_audit_train(exp: Path, contract: str = "experiment.rlvr.yaml") -> Path:
    """`validate --deep`, `audit verifier` (no disagreement, the candidates' arms and the
    generated ones), `audit isolation` and `train` on an experiment; the run folder."""
    assert rlvr("validate", "--deep", exp / contract).code == 0
    audit = rlvr("audit", "verifier", exp / contract, "--format", "json", timeout=600)
    assert audit.code == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
    report = json.loads(audit.stdout)
    kinds = {o["kind"] for o in report["outcomes"]}
    assert report["disagreements"] == 0 and {"correct", "wrong", "no_op_claim"} <= kinds
    isolation = rlvr("audit", "isolation", exp / contract, "--sessions", "8", timeout=600)
    assert isolation.code == 0, isolation.stdout[-3000:] + isolation.stderr[-2000:]
    run = exp / "run"
    trained = rlvr("train", exp / contract, "--run-dir", run, timeout=900)
    assert trained.code == 0, trained.stderr[-3000:]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["verifier_error_rate"] for m in steps] == [0.0] * len(steps)  # every episode judged
    return run
