"""docs/environments.md, run as written: its server, tasks, contract section and candidates
make an experiment that passes both audits, with arms built from its own tools."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import copy_experiment, rlvr

DOC = Path(__file__).parents[2] / "docs" / "environments.md"
BLOCK = re.compile(r"<!-- (file|contract): (\S+) -->\n```\w*\n(.*?)```", re.S)


def test_the_documented_environment_passes_both_audits(tool_use: Path, tmp_path: Path) -> None:
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert {(kind, name) for kind, name, _ in blocks} == {
        ("file", "tickets.py"),
        ("contract", "environment"),
        ("file", "data/all.jsonl"),
        ("file", "audit/candidates.yaml"),
    }
    exp = copy_experiment(tool_use, tmp_path / "exp")
    contract = exp / "experiment.rlvr.yaml"
    for kind, name, body in blocks:
        if kind == "file":
            (exp / name).write_text(body)
        else:
            text = contract.read_text()
            start, end = text.index("environment:\n"), text.index("\nobjective:")
            contract.write_text(text[:start] + body.rstrip() + "\n" + text[end:])
    rows = (exp / "data" / "all.jsonl").read_text().splitlines(keepends=True)
    for split, part in {"train": rows[:2], "holdout": rows[2:3], "sealed_eval": rows[3:]}.items():
        (exp / "data" / f"{split}.jsonl").write_text("".join(part))
    assert rlvr("validate", contract).code == 0
    verifier = rlvr("audit", "verifier", contract, "--format", "json", timeout=300)
    assert verifier.code == 0, verifier.stdout + verifier.stderr
    kinds = {o["kind"] for o in json.loads(verifier.stdout)["outcomes"]}
    assert {"correct", "no_op_claim", "collateral_damage", "forbidden_tool"} <= kinds
    isolation = rlvr("audit", "isolation", contract, "--sessions", "6", timeout=300)
    assert isolation.code == 0, isolation.stdout + isolation.stderr
    assert "no leak" in isolation.stdout
