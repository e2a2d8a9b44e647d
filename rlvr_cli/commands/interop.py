"""`rlvr import trl|verl|nemo-rl CONFIG --into CONTRACT` and `rlvr export CONTRACT --to trl|verl|nemo-rl`."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError, UsageProblem
from rlvr_cli.interop import nemo_rl_map, trl_map, trl_rloo_map, verl_map
from rlvr_cli.interop.common import CannotMap, Difference, Mapping, overrides
from rlvr_cli.interop.write import contract_text

PEERS = {
    "trl": f"TRL {trl_map.VERSION}",
    "trl-rloo": f"TRL {trl_map.VERSION} RLOOConfig",
    "verl": f"verl {verl_map.VERSION}",
    "nemo-rl": nemo_rl_map.NAME,
}


def read_config(path: Path) -> dict[str, Any]:
    """A peer's config file: YAML or JSON holding one mapping."""
    if not path.is_file():
        raise UsageProblem(f"{path}: no such file")
    from rlvr_cli.contract import yaml12

    try:  # YAML 1.2, as the peers read it: 1e-6 is a number (PyYAML's 1.1 reads a string), JSON a subset
        data = yaml12.parse(path.read_text(encoding="utf-8")).data
    except yaml12.YamlError as error:
        raise RlvrError(f"{path}:{error.pos.line}:{error.pos.column}: not YAML or JSON: {error.message}") from None
    except UnicodeDecodeError:
        raise RlvrError(f"{path}: not text (UTF-8)") from None
    if not isinstance(data, dict):
        raise RlvrError(f"{path}: holds {type(data).__name__}, not a mapping of options")
    return data


def _base(into: Path) -> tuple[Any, str, dict[str, Any], int]:
    from rlvr_cli.contract.load import load
    from rlvr_cli.contract.tasks import read_split

    contract = load(into)
    text = into.read_text(encoding="utf-8")
    rows = len(read_split(into.resolve().parent / contract.data.splits.train.path, "train"))
    from rlvr_cli.contract import yaml12

    return contract, text, yaml12.parse(text).data, rows


def run_import(
    peer: str, config: Path, extra: list[str], into: Path, out: Path | None, processes: int, peft: Path | None = None
) -> int:
    data = read_config(config)
    contract, text, base, rows = _base(into)
    weights = [c.weight for c in contract.objective.reward.components]
    if peer in ("trl", "trl-rloo"):
        if extra:
            raise UsageProblem("overrides (key=value) are verl's; give trl's options in the config file")
        mapping = (trl_rloo_map if peer == "trl-rloo" else trl_map).import_config(
            data,
            train_rows=rows,
            processes=processes,
            components=len(weights),
            policy=_policy(contract),
            model_type=_model_type(contract, into),
            peft=_peft_config(config, peft),
        )
    else:
        try:
            given = overrides(extra)
        except ValueError as error:
            raise UsageProblem(str(error)) from None
        if peer == "nemo-rl":
            from rlvr_cli.interop import nemo_rl_config

            values, unresolved = nemo_rl_config.load(config, read_config, given)
            mapping = nemo_rl_map.import_config(
                values, unresolved, train_rows=rows, weights=weights, given=frozenset(given)
            )
        else:
            values = verl_map.settings(data, given)
            mapping = verl_map.import_config(values, train_rows=rows, components=weights, given=frozenset(given))
    if mapping.refused:
        _report_unread(mapping, peer)  # a misspelt override is seen in a refusal too
        raise CannotMap(
            f"{config} cannot be imported: {len(mapping.refused)} choice(s) the contract cannot state", mapping.refused
        )
    target = out or into.parent / f"{config.name.split('.')[0]}.rlvr.yaml"
    if target.resolve().parent != into.resolve().parent:
        raise UsageProblem(f"--out must be beside {into} (the contract's paths are relative to its folder)")
    if target.exists():
        raise UsageProblem(f"{target} exists: choose another --out (an import never overwrites a file)")
    command = "trl --trainer rloo" if peer == "trl-rloo" else peer
    header = [
        f"Imported by `rlvr import {command}` from {config.name} ({PEERS[peer]}) into {into.name}'s experiment:",
        "every choice of the objective is written out; the comment on each key names the option it came from",
        "and whether the peer's default set it. The other sections are the base contract's.",
        *_difference_lines(mapping.differences),
    ]
    _write_checked(target, contract_text(text, base, mapping, header), into)
    _report(mapping, peer)
    sys.stdout.write(f"wrote {target}\n")
    return 0


def _peft_config(config: Path, given: Path | None) -> tuple[dict[str, Any], str] | None:
    """GRPOTrainer's peft_config as LoraConfig keywords: `--peft-config`, or the peft_config.yaml
    beside CONFIG (what `rlvr export --to trl` writes beside grpo_config.yaml), said on stderr."""
    path = given
    if path is None and (config.parent / "peft_config.yaml").is_file():
        path = config.parent / "peft_config.yaml"
        sys.stderr.write(f"reading the adapter from {path} (GRPOTrainer's peft_config), beside {config.name}\n")
    return None if path is None else (read_config(path), path.name)


def _model_type(contract: Any, into: Path) -> str | None:
    """The policy's model_type from its config.json (a local folder), for peft's default targets."""
    import json

    if contract.artifacts.policy.path is None:
        return None
    try:
        config = json.loads((into.resolve().parent / contract.artifacts.policy.path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config.get("model_type") if isinstance(config, dict) else None


def _policy(contract: Any) -> str:
    ref = contract.artifacts.policy
    return str(ref.id or ref.path)


def _difference_lines(differences: list[Difference]) -> list[str]:
    if not differences:
        return []
    return ["", "Where the numbers are not the peer's:", *(f"  {d.line()}" for d in differences), ""]


def _write_checked(target: Path, text: str, into: Path) -> None:
    """Written only when it validates: a temporary file beside the target, checked, renamed.
    Refused, it says where a key the peer's config does not hold is stated: in `into`."""
    from rlvr_cli.contract.load import check_file

    fd, name = tempfile.mkstemp(prefix=".import-", suffix=".rlvr.yaml", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        result = check_file(Path(name))
        errors = [d for d in result.diagnostics if d.severity == "error"]
        if errors:
            shown = "\n".join(f"  {d.code} {d.message}" for d in errors)
            raise RlvrError(
                f"the imported contract does not validate:\n{shown}\n"
                f"Keys the peer's config does not hold (log_by fields, the environment, the data) are {into.name}'s, "
                f"kept as written: state them in {into} and import again."
            )
        os.replace(name, target)
    finally:
        if os.path.exists(name):
            os.unlink(name)


def _report(mapping: Mapping, peer: str) -> None:
    for d in mapping.differences:
        sys.stderr.write(f"{d.line()}\n")
    _report_unread(mapping, peer)


def _report_unread(mapping: Mapping, peer: str) -> None:
    if mapping.unread:
        sys.stderr.write(
            f"not read ({len(mapping.unread)}: not part of the objective, or not a {PEERS[peer]} option): "
            f"{', '.join(mapping.unread)}\n"
        )


def run_export(contract_path: Path, to: str, out: Path, processes: int, allow_inexact: bool) -> int:
    from rlvr_cli.contract.load import load
    from rlvr_cli.interop import export_files

    contract = load(contract_path)
    mapping = export_files.mapping(contract, to, processes)
    blocking = mapping.refused + ([] if allow_inexact else mapping.inexact)
    if blocking:
        hint = "" if mapping.refused else " (--allow-inexact writes it with these differences stated)"
        raise CannotMap(f"{contract_path} cannot be exported to {PEERS[to]}{hint}", blocking)
    if out.exists() and any(out.iterdir()):
        raise UsageProblem(f"{out} is not empty: export into a new folder")
    written = export_files.write(contract, contract_path, to, mapping, out)
    for d in mapping.differences:
        sys.stderr.write(f"{d.line()}\n")
    sys.stdout.write("".join(f"wrote {p}\n" for p in written))
    sys.stdout.write(export_files.how_to_run(to, out))
    return 0


__all__ = ["read_config", "run_export", "run_import"]


def run_import_verifiers(taskset: str, out: Path, config_text: str) -> int:
    """Write a verifiers taskset's tasks as rlvr rows and print what the contract states."""
    import json

    from rlvr_cli.commands.common import require_extra
    from rlvr_cli.files import atomic_write_text

    require_extra("verifiers", "verifiers")
    if ":" not in taskset:
        raise UsageProblem(f"{taskset!r}: name the taskset as module:Class")
    try:
        config = json.loads(config_text)
    except ValueError:
        config = None
    if not isinstance(config, dict):
        raise UsageProblem(f"--config {config_text!r}: a JSON object of the taskset's config")
    if out.exists():
        raise RlvrError(f"{out} exists; rlvr import never overwrites a file")
    from rlvr_cli.env.verifiers_env import rows

    sys.path.insert(0, os.getcwd())  # a taskset module beside the user, as `python -m` finds one
    try:
        found, weights = rows(taskset, config)
    except RlvrError:
        raise
    except Exception as error:  # the taskset's own load() or config failed
        raise RlvrError(f"the taskset {taskset} could not load its tasks: {type(error).__name__}: {error}") from None
    if not found:
        raise RlvrError(f"the taskset {taskset} loaded no task")
    atomic_write_text(out, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in found))
    components = ", ".join(f"{{name: {name}, weight: {weight:g}}}" for name, weight in sorted(weights.items()))
    print(f"{len(found)} task(s) written to {out}; in the contract:")
    print("environment: {kind: single_turn, verifier: rlvr_cli.env.verifiers_env:verify}")
    print(f"objective.reward.components: [{components}]")
    return 0
