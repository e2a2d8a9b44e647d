"""The layering of docs/architecture.md holds: no upward import, no import between peers, no
cycle, and `rlvr validate` imports no torch, transformers or fastapi."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.arch.import_graph import check
from tests.conftest import ROOT


def test_the_package_keeps_its_layers() -> None:
    problems = check(ROOT / "rlvr_cli")
    assert problems == [], "\n".join(f"{p.kind}: {p.detail}" for p in problems)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / "rlvr_cli" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    for folder in [root / "rlvr_cli", *(p for p in (root / "rlvr_cli").rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()
    return root / "rlvr_cli"


def test_the_checker_finds_each_violation_the_old_layout_had(tmp_path: Path) -> None:
    """A miniature of the layout before the restructuring: five upward imports and three
    cycles, each of which the checker must name."""
    root = _tree(
        tmp_path,
        {
            "env/model.py": "def respond():\n    from rlvr_cli.train.rollout import generate\n",
            "contract/schema.py": "def s():\n    from rlvr_cli.train.records import json_schema\n"
            "    from rlvr_cli.audit.verifier import CandidateFile\n",
            "train/run.py": "from rlvr_cli.train import session\n"
            "def r():\n    from rlvr_cli.commands.common import x\n",
            "train/session.py": "from rlvr_cli.train import run as out\n",
            "train/rollout.py": "",
            "train/records.py": "",
            "train/score.py": "",
            "audit/verifier.py": "def v():\n    from rlvr_cli.train.score import weighted_reward\n",
            "commands/common.py": "",
            "chat/render.py": "def r():\n    from rlvr_cli.chat import checks, masks\n",
            "chat/masks.py": "from rlvr_cli.chat.render import Rendered\n",
            "chat/checks.py": "from rlvr_cli.chat.masks import common_prefix\nfrom rlvr_cli.chat.render import Check\n",
            "contract/load.py": "def l():\n    from rlvr_cli.contract import rules, deep\n",
            "contract/rules.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from rlvr_cli.contract.load import X\n",
            "contract/deep.py": "from rlvr_cli.contract import load\n",
        },
    )
    found = {(p.kind, p.detail) for p in check(root)}
    upward = {d for k, d in found if k == "upward"}
    assert "rlvr_cli.env.model (env) imports rlvr_cli.train.rollout (train)" in upward
    assert "rlvr_cli.contract.schema (contract) imports rlvr_cli.train.records (train)" in upward
    assert "rlvr_cli.contract.schema (contract) imports rlvr_cli.audit.verifier (audit)" in upward
    assert "rlvr_cli.train.run (train) imports rlvr_cli.commands.common (cli)" in upward
    assert {d for k, d in found if k == "peer"} == {
        "rlvr_cli.audit.verifier (audit) imports rlvr_cli.train.score (train)"
    }
    assert {d for k, d in found if k == "cycle"} == {
        "rlvr_cli.chat.checks ↔ rlvr_cli.chat.masks ↔ rlvr_cli.chat.render",
        "rlvr_cli.contract.deep ↔ rlvr_cli.contract.load",  # rules' import is TYPE_CHECKING only
        "rlvr_cli.train.run ↔ rlvr_cli.train.session",
    }


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"contract/a.py": "import json\n", "train/b.py": "from rlvr_cli.contract import a\n"})
    assert check(root) == []


def test_validate_imports_no_heavy_library() -> None:
    probe = (
        "import sys\n"
        "from rlvr_cli.commands.validate import main\n"
        "main(['--deep', 'contracts/', 'tests/contracts/'])  # every check runs, whatever it finds\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'fastapi', 'pyarrow', 'uvicorn') if m in sys.modules)\n"
        "print('heavy:', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "heavy: []" in done.stdout.splitlines(), done.stdout[-2000:] + done.stderr[-2000:]
