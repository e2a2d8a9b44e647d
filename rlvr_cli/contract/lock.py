"""`rlvr lock`: the sha256 of every file a contract names, so drift is caught (RLV104)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlvr_cli.contract import hub
from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import RlvrError
from rlvr_cli.files import atomic_write_text, sha256_file

LOCK_VERSION = 1


def default_lock_path(contract_path: Path) -> Path:
    """`foo.rlvr.yaml` → `foo.lock.json` beside it."""
    name = contract_path.name
    for suffix in (".rlvr.yaml", ".rlvr.yml", ".yaml", ".yml"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return contract_path.parent / f"{name}.lock.json"


def lock_path(contract: Contract, contract_path: Path) -> Path:
    if contract.artifacts.lock:
        return contract_path.parent / contract.artifacts.lock
    return default_lock_path(contract_path)


def locked_paths(contract: Contract) -> dict[str, str]:
    """Role → path (relative to the contract) of every local artifact and data file."""
    a, d = contract.artifacts, contract.data
    roles: dict[str, str | None] = {
        "policy": a.policy.path,
        "tokenizer": a.tokenizer.path,
        "reference": a.reference.path if a.reference else None,
        "chat_template": None if a.tokenizer.chat_template == "native" else a.tokenizer.chat_template,
        "splits.train": d.splits.train.path,
        "splits.holdout": d.splits.holdout.path,
        "splits.sealed_eval": d.splits.sealed_eval.path,
    }
    if d.split_manifest:
        roles["splits.manifest"] = d.split_manifest
    for source in d.sources:
        roles[f"sources.{source.name}"] = source.path
    return {role: path for role, path in roles.items() if path}


def module_source(module: str, folder: Path) -> Path | None:
    """The source file `module` (dotted) imports from as the run imports a verifier (the contract's
    folder first, then the environment), found without running any of it: a plain module or a
    package's `__init__.py`, on the import path or below a top-level package's own locations."""
    import importlib.util
    import sys

    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        return None

    def within(root: Path, rest: list[str]) -> Path | None:  # rest: at least one name
        base = root.joinpath(*rest)
        return next((c for c in (base.with_name(base.name + ".py"), base / "__init__.py") if c.is_file()), None)

    for entry in [str(folder), *sys.path]:
        found = within(Path(entry or "."), parts)
        if found is not None:
            return found
    try:  # a package installed through an import hook (an editable install): its locations, unimported
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if len(parts) == 1:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for location in spec.submodule_search_locations or ():
        found = within(Path(location), parts[1:])
        if found is not None:
            return found
    return None


def files_under(root: Path) -> list[Path]:
    """`root` itself when it is a file, else every file below it, sorted, hidden ones kept."""
    if root.is_file():
        return [root]
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        found.extend(Path(folder) / f for f in sorted(files))
    return found


def compute(contract: Contract, folder: Path) -> dict:
    """The lock document: every file's sha256, keyed by its path relative to the contract."""
    artifacts: dict[str, list[str]] = {}
    files: dict[str, str] = {}
    for role, rel in locked_paths(contract).items():
        root = folder / rel
        if not root.exists():
            raise FileNotFoundError(f"{role}: {rel} does not exist")
        names = []
        for path in files_under(root):
            name = path.relative_to(folder).as_posix() if path.is_relative_to(folder) else str(path)
            files[name] = sha256_file(path)
            names.append(name)
        artifacts[role] = names
    verifier = contract.environment.verifier
    if verifier:
        _pin_verifier(verifier.partition(":")[0], folder, artifacts, files)
    for role, ref in (
        ("policy", contract.artifacts.policy),
        ("tokenizer", contract.artifacts.tokenizer),
        ("reference", contract.artifacts.reference),
    ):
        if ref is not None and getattr(ref, "id", None):
            found = hub.commit(ref.id, ref.revision)
            if found is None:
                raise FileNotFoundError(hub.missing(ref.id, ref.revision))
            files[f"hub:{ref.id}@{ref.revision or 'main'}"] = found  # the commit it resolved to
            artifacts[role] = [f"hub:{ref.id}@{ref.revision or 'main'}"]
    return {
        "lock_version": LOCK_VERSION,
        "contract": contract.name,
        "artifacts": artifacts,
        "files": dict(sorted(files.items())),
    }


def _pin_verifier(module: str, folder: Path, artifacts: dict[str, list[str]], files: dict[str, str]) -> None:
    """The verifier's module file: by its path when it lives beside the contract, else (an
    installed package, rlvr's built-ins) by its module name, so the lock holds on any machine."""
    source = module_source(module, folder)
    if source is None:
        raise FileNotFoundError(
            f"verifier: module {module} is neither beside the contract nor importable in this environment"
        )
    resolved = source.resolve()
    if not resolved.is_relative_to(folder):
        files[f"module:{module}"] = sha256_file(source)
        artifacts["verifier"] = [f"module:{module}"]
        return
    # a package beside the contract: each of its Python files (the module may import its siblings;
    # never the interpreter's caches)
    top = folder / module.split(".")[0]
    sources = sorted(top.rglob("*.py")) if top.is_dir() and resolved.is_relative_to(top) else [resolved]
    names = [p.relative_to(folder).as_posix() for p in sources]
    files.update({name: sha256_file(p) for name, p in zip(names, sources, strict=True)})
    artifacts["verifier"] = names


def write(contract: Contract, contract_path: Path) -> Path:
    """Write the lock file atomically and return its path."""
    target = lock_path(contract, contract_path)
    document = compute(contract, contract_path.resolve().parent)
    atomic_write_text(target, json.dumps(document, indent=2) + "\n")
    return target


def check_unchanged(contract: Contract, contract_path: Path) -> None:
    """With a lock file, every file it pins must still match: a run never trains on a changed
    verifier, data split or model without saying so (`rlvr lock` pins the new files)."""
    path = lock_path(contract, contract_path)
    if not path.is_file():
        return
    try:
        locked = json.loads(path.read_text(encoding="utf-8"))["files"]
        current = compute(contract, contract_path.resolve().parent)["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RlvrError(f"lock file {path.name} cannot be checked: {exc}") from None
    changed = [name for name in sorted(set(locked) | set(current)) if locked.get(name) != current.get(name)]
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise RlvrError(
            f"{shown} changed since {path.name} was written; train refuses files the lock does not pin "
            f"(restore them, or run `rlvr lock` to pin the new ones)"
        )
