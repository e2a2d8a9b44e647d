"""Modules stay under 400 lines and functions under 60, unless a reason is written beside the
`def` (a `# long: why` comment): a newcomer reads one concern per module, one idea per function."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

MODULE_LINES, FUNCTION_LINES = 400, 60


def test_modules_and_functions_stay_small() -> None:
    too_long = []
    for path in sorted((ROOT / "rlvr_cli").rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        if len(lines) > MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {len(lines)} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if length > FUNCTION_LINES and "# long:" not in lines[node.lineno - 1]:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert too_long == [], "\n".join(too_long)


def test_no_two_modules_share_a_name_outside_commands() -> None:
    """A module name says what the module holds; `commands/` is one module per command, named for it."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "rlvr_cli").rglob("*.py")):
        if path.name != "__init__.py" and path.parent.name != "commands":
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
