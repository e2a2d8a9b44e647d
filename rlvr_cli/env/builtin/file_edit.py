"""`file_edit`: set `version` to 2 in the named file and touch nothing else.

Each session gets its own sandbox folder seeded with a few files. The verifier checks the
final state (the target holds `version = 2`) *and* the path: every other file must be
byte-identical to its seed, and no forbidden tool (`delete_file`) may have been used. File
tools refuse any path outside the sandbox: `..`, absolute paths, and symlinks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_cli.env.server import ResourcesServer, ToolError, tool
from rlvr_cli.env.verdict import Verdict

VERSION = re.compile(r"^version\s*=\s*(\S+)\s*$", re.M)


def seed_files(task: dict[str, Any]) -> dict[str, str]:
    """The files a session starts with: the target plus bystanders that must stay intact."""
    target = task["target"]
    files = {
        target: 'name = "app"\nversion = 1\nowner = "platform"\n',
        "README.md": "# service\nDo not edit generated files.\n",
        "config/defaults.toml": "version = 1\nretries = 3\n",
        "notes/changelog.txt": "v1: first release\n",
    }
    if "marker" in task:  # isolation audits plant a unique value per session
        files["notes/marker.txt"] = str(task["marker"]) + "\n"
    return files


MAX_PATH = 255


def inside(path: Any) -> tuple[str, ...]:
    """The parts of a relative path that stays inside a sandbox, or ToolError saying why."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ToolError("a path is a non-empty string")
    if len(path) > MAX_PATH:
        raise ToolError(f"a path is at most {MAX_PATH} characters, this one is {len(path)}")
    if os.path.isabs(path) or path.startswith("~"):
        raise ToolError(f"{path}: absolute paths are outside the sandbox")
    parts = Path(path).parts
    if ".." in parts:
        raise ToolError(f"{path}: '..' leaves the sandbox")
    return parts


@dataclass
class Sandbox:
    root: Path
    seeded: dict[str, bytes]


class FileEditServer(ResourcesServer):
    offered = ("list_files", "read_file", "write_file", "replace_in_file")
    forbidden = ("delete_file",)

    def seed(self, task: dict[str, Any]) -> Sandbox:
        if not isinstance(task.get("target"), str):
            raise ToolError("a file_edit task names its 'target' file")
        files = seed_files(task)
        for rel in files:  # a path from the task is as untrusted as one from a tool call
            inside(rel)
        root = self.folder("rlvr-file-edit-")  # removed when the session closes (or seeding fails)
        seeded = {}
        for rel, text in files.items():
            path = self.resolve(Sandbox(root, {}), rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            seeded[rel] = text.encode()
        return Sandbox(root, seeded)

    def snapshot(self, state: Sandbox) -> dict[str, str]:
        """Every file of the sandbox and its content."""
        files = sorted(p for p in state.root.rglob("*") if p.is_file())
        return {p.relative_to(state.root).as_posix(): p.read_text(encoding="utf-8", errors="replace") for p in files}

    # ── path safety ───────────────────────────────────────────────────────────────────

    @staticmethod
    def resolve(state: Sandbox, path: str) -> Path:
        """`path` inside the sandbox, or ToolError: no absolute paths, `..`, or symlinks."""
        parts = inside(path)
        candidate = state.root.joinpath(*parts)
        walk = state.root
        for part in parts:
            walk = walk / part
            if walk.is_symlink():
                raise ToolError(f"{path}: symlinks are not followed")
        if not candidate.resolve().is_relative_to(state.root.resolve()):
            raise ToolError(f"{path}: outside the sandbox")
        return candidate

    # ── tools ─────────────────────────────────────────────────────────────────────────

    @tool
    def list_files(self, state: Sandbox) -> list[str]:
        """List every file in the workspace."""
        return sorted(p.relative_to(state.root).as_posix() for p in state.root.rglob("*") if p.is_file())

    @tool
    def read_file(self, state: Sandbox, path: str) -> str:
        """Read a file."""
        target = self.resolve(state, path)
        if not target.is_file():
            raise ToolError(f"{path}: no such file")
        return target.read_text(encoding="utf-8")

    @tool
    def write_file(self, state: Sandbox, path: str, content: str) -> str:
        """Write a file (creating or replacing it)."""
        target = self.resolve(state, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(str(content), encoding="utf-8")
        return f"wrote {path}"

    @tool
    def replace_in_file(self, state: Sandbox, path: str, old: str, new: str) -> str:
        """Replace the first occurrence of `old` with `new` in a file."""
        target = self.resolve(state, path)
        if not target.is_file():
            raise ToolError(f"{path}: no such file")
        text = target.read_text(encoding="utf-8")
        if old not in text:
            raise ToolError(f"{path}: text to replace not found")
        target.write_text(text.replace(old, new, 1), encoding="utf-8")
        return f"replaced in {path}"

    @tool
    def delete_file(self, state: Sandbox, path: str) -> str:
        """Delete a file."""
        target = self.resolve(state, path)
        if not target.is_file():
            raise ToolError(f"{path}: no such file")
        target.unlink()
        return f"deleted {path}"

    # ── verifier ──────────────────────────────────────────────────────────────────────

    def verify(self, state: Sandbox, task: dict[str, Any], calls: list[dict[str, Any]], final_message: str) -> Verdict:
        target = task["target"]
        path = state.root / target
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        match = VERSION.search(text)
        target_set = float(match is not None and match.group(1) == str(task.get("value", "2")))
        current = {p.relative_to(state.root).as_posix(): p.read_bytes() for p in state.root.rglob("*") if p.is_file()}
        others = {k: v for k, v in state.seeded.items() if k != target}
        intact = all(current.get(k) == v for k, v in others.items()) and set(current) - {target} == set(others)
        target_rest = VERSION.sub("", text) == VERSION.sub("", state.seeded[target].decode())
        others_intact = float(intact and target_rest)
        success = target_set * others_intact
        return Verdict("ok", success, {"success": success, "target_set": target_set, "others_intact": others_intact})
