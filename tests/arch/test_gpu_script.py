"""`.ci/gpu` is the one command run on the day a GPU is lent: every test that needs one must be in
it, or it is skipped on CPU machines and never run anywhere."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT

SCRIPT = ROOT / ".ci" / "gpu"


def _needs_cuda(source: str, node: ast.AST) -> bool:
    """A skip whose reason says the test needs a GPU (not one that skips where a GPU is)."""
    return re.search(r"reason=\"needs [^\"]*GPU", ast.get_source_segment(source, node) or "") is not None


def gpu_tests() -> list[str]:
    """`path::name` of every test skipped for want of a GPU (its own decorator, a module-level
    marker it names, or the module's `pytestmark`), or `path` where the whole module is."""
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        where = str(path.relative_to(ROOT))
        markers = {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign) and _needs_cuda(source, node.value)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        if "pytestmark" in markers:
            found.append(where)
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                named = {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
                if named & markers or any(_needs_cuda(source, d) for d in node.decorator_list):
                    found.append(f"{where}::{node.name}")
    return found


def uncovered(script: str) -> list[str]:
    """The GPU tests that `script` runs neither by their module nor by name."""
    named = set(re.findall(r"(tests/\S+\.py(?:::\w+)?)", script))
    return [test for test in gpu_tests() if test not in named and test.split("::")[0] not in named]


def test_the_gpu_script_runs_every_test_that_needs_a_gpu() -> None:
    assert gpu_tests(), "no GPU test found: the search is broken"
    assert uncovered(SCRIPT.read_text()) == []


def test_a_gpu_test_left_out_of_the_script_is_named() -> None:
    script = SCRIPT.read_text()
    without = script.replace("tests/engine/test_shared.py::test_on_a_gpu_no_attention_falls_to_the_math_kernel", "")
    assert uncovered(without) == ["tests/engine/test_shared.py::test_on_a_gpu_no_attention_falls_to_the_math_kernel"]
    left = uncovered(script.replace("tests/train/test_gpu.py", ""))  # a whole module left out: each of its tests
    assert len(left) == 5 and all(t.startswith("tests/train/test_gpu.py::") for t in left), left
