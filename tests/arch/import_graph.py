"""The import graph of a package tree, and the layering rules rlvr keeps (docs/architecture.md).

Every `import` and `from ... import` counts, at module level or inside a function (a local
import still runs); imports under `if TYPE_CHECKING:` do not. A module belongs to the layer
its path names; `train` and `audit` are peers (neither imports the other: the audits read
what training wrote through the run folder). Reported: imports that point upward, imports
between peers, and cycles between modules.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

#: layer → rank; a module may import its own layer and any layer of lower rank
LAYERS = {
    "base": 0,  # errors, files, metrics, codes, store/
    "contract": 1,
    "data": 2,
    "trackers": 2.5,  # monitoring.trackers: copies of the run's rows and files, written for train and the commands
    "chat": 3,
    "toy": 3.5,  # toy models and their warm-up (examples, tests): above chat, below engine
    "engine": 4,
    "env": 5,
    "rollout": 6,  # the one rollout interface: single-turn and tool-use, for training and audits alike
    "train": 7,
    "audit": 7,
    "interop": 7,  # `rlvr import`, `rlvr export`: the peers' configs and the contract; the verifier as verl's reward
    "report": 7.5,  # `rlvr report`: reads the run folder and the audits' findings
    "release": 7.6,  # `rlvr release`: bundles, the registry, rollback and its drill (evaluates like audit)
    "cli": 8,  # cli.py, __main__.py, commands/
}
_BASE = {"errors", "files", "metrics", "codes", "store", "__init__"}
_CLI = {"cli", "__main__", "commands"}


@dataclass(frozen=True)
class Violation:
    kind: str  # upward | peer | cycle
    detail: str


def layer_of(module: str, package: str) -> str:
    parts = module.split(".")
    if parts[0] != package:
        raise ValueError(module)
    top = parts[1] if len(parts) > 1 else "__init__"
    if top in _BASE:
        return "base"
    if top in _CLI:
        return "cli"
    if top in LAYERS:
        return top
    raise ValueError(f"{module}: no layer for '{top}' (add it to tests/arch/import_graph.py)")


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name → file, for the package at `root` (a folder with __init__.py)."""
    package = root.name
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = [package, *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """(module, names) of every runtime import in the tree."""
    out: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [alias.name for alias in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def graph(root: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports."""
    known = modules(root)
    package = root.name
    edges: dict[str, set[str]] = {m: set() for m in known}
    for name, path in known.items():
        for module, names in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if module.split(".")[0] != package:
                continue
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in known]
            if len(targets) < len(names) or not names:
                targets.append(module)
            edges[name].update(t for t in targets if t in known and t != name)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def check(root: Path) -> list[Violation]:
    package = root.name
    edges = graph(root)
    out = []
    for source, targets in sorted(edges.items()):
        a = layer_of(source, package)
        for target in sorted(targets):
            b = layer_of(target, package)
            if LAYERS[b] > LAYERS[a]:
                out.append(Violation("upward", f"{source} ({a}) imports {target} ({b})"))
            elif LAYERS[b] == LAYERS[a] and a != b:
                out.append(Violation("peer", f"{source} ({a}) imports {target} ({b})"))
    out += [Violation("cycle", " ↔ ".join(c)) for c in cycles(edges)]
    return out
