"""A release bundle: everything a shipped policy is, in one folder, with a manifest of sha256s
that is itself hashed. `build` copies the run's policy (or adapter), the tokenizer and its chat
template, the contract with its lock, the verifier's code and identity, the data check, the gate
verdict and the report; `verify` finds any changed, missing or added byte."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_cli import __version__
from rlvr_cli.errors import RlvrError, UsageProblem
from rlvr_cli.files import atomic_write_json, sha256_bytes, sha256_file

FORMAT = "rlvr-bundle/1"
MANIFEST = "manifest.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
)
#: what a run folder contributes (each only where the run has it)
RUN_FILES = ("plan.json", "status.json", "data-check.json", "gate/verdict.json", "gate/evaluation.json", "report.html")


@dataclass
class Sources:
    """Where each part of the bundle comes from."""

    contract_path: Path
    contract: Any
    run_dir: Path

    @property
    def folder(self) -> Path:
        return self.contract_path.resolve().parent


def self_hash(manifest: dict[str, Any]) -> str:
    """The bundle's own hash: sha256 of the manifest's canonical JSON without that field."""
    body = {k: v for k, v in manifest.items() if k != "bundle_sha256"}
    return sha256_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def build(sources: Sources, out: Path, drill: list[dict[str, Any]]) -> dict[str, Any]:
    """Copy every part into `out` (a new folder) and write the manifest; returns it."""
    if out.exists():
        raise UsageProblem(f"{out} exists: a bundle is written once")
    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _copy_tree(_policy(sources.run_dir), staging / "policy")
    _copy_tokenizer(sources, staging / "tokenizer")
    contract_files = _copy_contract(sources, staging / "contract")
    verifier = _copy_verifier(sources, staging / "verifier")
    for name in RUN_FILES:
        if (sources.run_dir / name).is_file():
            (staging / "run" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(sources.run_dir / name, staging / "run" / name)
    verdict = _verdict(sources.run_dir)
    (staging / "drill.json").write_text(json.dumps(drill, indent=1, sort_keys=True), encoding="utf-8")
    manifest = {
        "format": FORMAT,
        "name": sources.contract.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rlvr": __version__,
        "contract": contract_files,
        "experiment": str(sources.folder),
        "run": str(sources.run_dir.resolve()),
        "verifier": verifier,
        "base": _base(sources),
        "release": verdict,
        "files": {str(p.relative_to(staging)): sha256_file(p) for p in sorted(staging.rglob("*")) if p.is_file()},
    }
    manifest["bundle_sha256"] = self_hash(manifest)
    atomic_write_json(staging / MANIFEST, manifest)
    staging.rename(out)
    return manifest


def _base(sources: Sources) -> dict[str, Any] | None:
    """An adapter's base, which the bundle does not hold: the hub id and revision, or the local
    folder with the sha256 of its config and weights (the drill and canary refuse a changed base)."""
    if not (sources.run_dir / "final" / "adapter_config.json").is_file():
        return None
    ref = sources.contract.artifacts.policy
    if ref.id is not None:
        return {"id": ref.id, "revision": ref.revision}
    folder = (sources.folder / str(ref.path)).resolve()
    return {"path": str(folder), "files": base_files(folder)}


def base_files(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.suffix in (".json", ".safetensors")}


def _policy(run_dir: Path) -> Path:
    final = run_dir / "final"
    if not (final / "config.json").is_file() and not (final / "adapter_config.json").is_file():
        raise RlvrError(f"{run_dir}: no final/ policy (a finished run writes it)")
    return final


def _verdict(run_dir: Path) -> str:
    path = run_dir / "gate" / "verdict.json"
    if not path.is_file():
        raise RlvrError(f"{run_dir}: no gate verdict; run `rlvr gate CONTRACT --candidate {run_dir}` first")
    try:
        release = json.loads(path.read_text(encoding="utf-8"))["release"]
    except (ValueError, KeyError, TypeError):
        raise RlvrError(f"{path}: not a verdict rlvr gate wrote") from None
    return str(release)


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, symlinks=False, ignore=shutil.ignore_patterns("*.pt", "*.pkl", "*.bin"))


def _copy_tokenizer(sources: Sources, target: Path) -> None:
    ref = sources.contract.artifacts.tokenizer
    if ref.path is None:
        raise RlvrError("the tokenizer is a hub id: bundle a local tokenizer folder (artifacts.tokenizer.path)")
    where = sources.folder / ref.path
    target.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (where / name).is_file():
            shutil.copy2(where / name, target / name)
    if ref.chat_template != "native":
        shutil.copy2(sources.folder / ref.chat_template, target / "chat_template.jinja")
    if not any(target.iterdir()):
        raise RlvrError(f"{where}: no tokenizer files")


def _copy_contract(sources: Sources, target: Path) -> dict[str, str]:
    from rlvr_cli.contract.lock import lock_path

    target.mkdir(parents=True)
    shutil.copy2(sources.contract_path, target / sources.contract_path.name)
    files = {"file": f"contract/{sources.contract_path.name}"}
    lock = lock_path(sources.contract, sources.contract_path)
    if lock.is_file():
        shutil.copy2(lock, target / lock.name)
        files["lock"] = f"contract/{lock.name}"
    return files


def _copy_verifier(sources: Sources, target: Path) -> dict[str, Any]:
    """The verifier's identity: the contract's version string, its entry point, and the source
    file of that entry point (copied) when it lives beside the contract; rlvr's built-ins by
    rlvr's version."""
    env = sources.contract.environment
    spec = env.server or env.verifier
    identity: dict[str, Any] = {"version": sources.contract.artifacts.verifier.version, "entry": spec}
    if spec is None:  # a built-in check (answer_check, unit_tests, judge)
        identity["builtin"] = f"rlvr {__version__}"
        return identity
    source = _module_file(spec.partition(":")[0], sources.folder)
    if source is not None and sources.folder in source.resolve().parents:
        target.mkdir(parents=True)
        shutil.copy2(source, target / source.name)
        identity["source"] = f"verifier/{source.name}"
        identity["sha256"] = sha256_file(source)
    return identity


def _module_file(module: str, folder: Path) -> Path | None:
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    finally:
        sys.path.remove(str(folder))
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def read_manifest(bundle: Path) -> dict[str, Any]:
    path = bundle / MANIFEST
    if not path.is_file():
        raise UsageProblem(f"{bundle}: not a bundle (no {MANIFEST})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise RlvrError(f"{path}: not JSON ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise RlvrError(f"{path}: not a {FORMAT} manifest")
    return manifest


def problems(bundle: Path) -> list[str]:
    """Every way the bundle differs from its manifest; empty when it is intact."""
    manifest = read_manifest(bundle)
    found = []
    if manifest.get("bundle_sha256") != self_hash(manifest):
        found.append(f"{MANIFEST}: its own hash does not match (the manifest was edited)")
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        return [*found, f"{MANIFEST}: no file list"]
    present = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file() or p.is_symlink()} - {MANIFEST}
    for name in sorted(present - set(listed)):
        found.append(f"{name}: not in the manifest (added)")
    for name, digest in sorted(listed.items()):
        path = bundle / name
        if path.is_symlink():
            found.append(f"{name}: a symlink where a file was bundled")
        elif not path.is_file():
            found.append(f"{name}: missing")
        elif sha256_file(path) != digest:
            found.append(f"{name}: does not match its sha256 (changed)")
    return found
