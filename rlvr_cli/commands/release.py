"""`rlvr release build|verify|list|promote|rollback|drill`: the bodies (release_cli.py parses)."""

from __future__ import annotations

from pathlib import Path

from rlvr_cli.commands.common import load_valid_contract, require_extra
from rlvr_cli.commands.formats import user_code_to_stderr
from rlvr_cli.errors import ExitCode, RlvrError, UsageProblem


def run_build(contract_path: Path, run_dir: Path, registry: Path, drill_tasks: int) -> int:
    require_extra("train", "torch", "transformers")
    from rlvr_cli.release.bundle import Sources, build
    from rlvr_cli.release.drill import record
    from rlvr_cli.release.registry import Registry

    contract = load_valid_contract(contract_path)
    if not (run_dir / "status.json").is_file():
        raise UsageProblem(f"{run_dir}: not a run folder (no status.json)")
    reg = Registry(registry)
    folder = contract_path.resolve().parent
    with user_code_to_stderr():
        recording = record(contract, folder, run_dir / "final", drill_tasks) if drill_tasks else []
    staging = reg.new_path(contract.name)
    try:
        manifest = build(Sources(contract_path, contract, run_dir), staging, recording)
        bundle_id = reg.add(staging)
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
    reg.save()
    where = registry / "bundles" / bundle_id
    print(f"{bundle_id}  release {manifest['release']}  {len(manifest['files'])} files  {where}")
    return 0


def run_verify(bundle: Path) -> int:
    from rlvr_cli.release.bundle import problems, read_manifest

    found = problems(bundle)
    if found:
        print(f"{bundle}: NOT intact")
        for line in found:
            print(f"  {line}")
        return ExitCode.FAILED
    manifest = read_manifest(bundle)
    print(f"{bundle}: intact ({len(manifest['files'])} files, bundle sha256 {manifest['bundle_sha256']})")
    return 0


def run_list(registry: Path) -> int:
    from rlvr_cli.release.registry import Registry

    print(Registry(_existing(registry)).table())
    return 0


def run_promote(registry: Path, bundle_id: str) -> int:
    from rlvr_cli.release.registry import Registry

    reg = Registry(_existing(registry))
    reg.promote(bundle_id)
    reg.save()
    print(f"current: {bundle_id}; last known-good: {reg.last_known_good or 'none'}")
    return 0


def run_rollback(registry: Path) -> int:
    from rlvr_cli.release.registry import Registry

    reg = Registry(_existing(registry))
    bad = reg.current
    good = reg.rollback()
    reg.save()
    print(f"rolled back: current {good} (was {bad}); last known-good now {reg.last_known_good or 'none'}")
    return 0


def run_drill(registry: Path, bundle_id: str | None) -> int:
    """Restore the last known-good (or the named bundle) without touching the registry, replay
    its recorded conversations, and say whether the outcome equals the recording."""
    require_extra("train", "torch", "transformers")
    from rlvr_cli.release.drill import drill
    from rlvr_cli.release.registry import Registry

    reg = Registry(_existing(registry))
    target = bundle_id or reg.last_known_good
    if target is None:
        raise RlvrError("no last known-good bundle: the drill has nothing to restore (name one with --bundle)")
    try:
        reg.check(target)
    except RlvrError as error:
        print(f"drill FAILED: {error}")
        return ExitCode.FAILED
    with user_code_to_stderr():
        differences = drill(reg.bundle(target))
    if differences:
        print(f"drill FAILED: {target} restored, but the replay differs from the recording:")
        for line in differences:
            print(f"  {line}")
        return ExitCode.FAILED
    print(f"drill passed: {target} restored intact; its recorded conversations replay to the same outcome")
    return 0


def run_canary(registry: Path, candidate: str, traffic: object) -> int:
    """The candidate and the current bundle on the same share of requests; promote or refuse."""
    require_extra("train", "torch", "transformers")
    import json
    import time

    from rlvr_cli.files import atomic_write_json
    from rlvr_cli.release import canary
    from rlvr_cli.release.registry import Registry

    reg = Registry(_existing(registry))
    with user_code_to_stderr():
        report = canary.run(reg, candidate, traffic)  # type: ignore[arg-type]
    where = registry / "canary" / f"{candidate}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"
    where.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(where, report)
    d = report["difference"]
    print(
        f"canary: {report['requests']} requests ({report['share']:.0%}), candidate − current reward "
        f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}], invalid {json.dumps(report['invalid'])}"
    )
    if report["decision"] == "refuse":
        print(f"refused: {'; '.join(report['why'])} (report: {where})")
        return ExitCode.FAILED
    reg.promote(candidate)
    reg.save()
    print(f"promoted: current {candidate}; last known-good {reg.last_known_good} (report: {where})")
    return 0


def _existing(registry: Path) -> Path:
    if not (registry / "registry.json").is_file():
        raise UsageProblem(f"{registry}: no registry.json (rlvr release build --registry {registry} makes one)")
    return registry


__all__ = ["run_build", "run_canary", "run_drill", "run_list", "run_promote", "run_rollback", "run_verify"]
