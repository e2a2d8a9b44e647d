"""A registry folder keeps bundles by id (`bundles/<name>-<hash>/`) and, in `registry.json`
(written atomically), which one is current, which is the last known-good, and every event. A
bundle becomes current only intact and with a passing gate verdict; the one it replaces becomes
the last known-good; a rollback makes the last known-good current again, only if it is intact."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError, UsageProblem
from rlvr_cli.files import atomic_write_json
from rlvr_cli.release.bundle import problems, read_manifest

FORMAT = "rlvr-registry/1"
FILE = "registry.json"


class Registry:
    def __init__(self, root: Path) -> None:
        self.root = root
        path = root / FILE
        if path.is_file():
            try:
                self.data = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as error:
                raise RlvrError(f"{path}: not JSON ({error})") from None
            if not isinstance(self.data, dict) or self.data.get("format") != FORMAT:
                raise RlvrError(f"{path}: not an {FORMAT} registry")
        else:
            self.data = {"format": FORMAT, "bundles": {}, "current": None, "last_known_good": None, "events": []}

    @property
    def current(self) -> str | None:
        return self.data["current"]  # type: ignore[no-any-return]

    @property
    def last_known_good(self) -> str | None:
        return self.data["last_known_good"]  # type: ignore[no-any-return]

    def bundle(self, bundle_id: str) -> Path:
        if bundle_id not in self.data["bundles"]:
            known = ", ".join(sorted(self.data["bundles"])) or "none"
            raise UsageProblem(f"no bundle {bundle_id!r} in {self.root} (bundles: {known})")
        return self.root / "bundles" / bundle_id

    def new_path(self, name: str) -> Path:
        """Where a bundle is built before it has an id (renamed by `add`)."""
        (self.root / "bundles").mkdir(parents=True, exist_ok=True)
        return self.root / "bundles" / f".new-{name}-{time.time_ns()}"

    def add(self, built: Path) -> str:
        manifest = read_manifest(built)
        bundle_id = f"{manifest['name']}-{manifest['bundle_sha256'][:12]}"
        target = self.root / "bundles" / bundle_id
        if target.exists():
            raise RlvrError(f"{bundle_id} is already in the registry (the same bundle, byte for byte)")
        built.rename(target)
        self.data["bundles"][bundle_id] = {
            "created": manifest["created"],
            "release": manifest["release"],
            "state": "built",
        }
        self._event("build", bundle_id)
        return bundle_id

    def check(self, bundle_id: str) -> None:
        found = problems(self.bundle(bundle_id))
        if found:
            raise RlvrError(f"bundle {bundle_id} is not intact:\n" + "\n".join(f"  {p}" for p in found))

    def promote(self, bundle_id: str) -> None:
        self.check(bundle_id)
        entry = self.data["bundles"][bundle_id]
        if entry["release"] != "pass":
            raise RlvrError(f"bundle {bundle_id}: its gate verdict is {entry['release']!r}, not pass")
        if entry["state"] == "rolled_back":
            raise RlvrError(f"bundle {bundle_id} was rolled back; build a new candidate")
        previous = self.current
        if previous == bundle_id:
            raise UsageProblem(f"{bundle_id} is already current")
        if previous is not None:
            self.data["bundles"][previous]["state"] = "good"
            self.data["last_known_good"] = previous
        entry["state"] = "current"
        self.data["current"] = bundle_id
        self._event("promote", bundle_id, replaced=previous)

    def rollback(self) -> str:
        good = self.last_known_good
        if good is None:
            raise RlvrError("no last known-good bundle to roll back to (a bundle becomes one when another replaces it)")
        self.check(good)
        bad = self.current
        if bad is not None:
            self.data["bundles"][bad]["state"] = "rolled_back"
        self.data["bundles"][good]["state"] = "current"
        self.data["current"] = good
        older = [e["replaced"] for e in self.data["events"] if e["event"] == "promote" and e.get("replaced")]
        earlier = [b for b in reversed(older) if b != good and self.data["bundles"][b]["state"] == "good"]
        self.data["last_known_good"] = earlier[0] if earlier else None
        self._event("rollback", good, replaced=bad)
        return good

    def _event(self, event: str, bundle_id: str, **more: Any) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.data["events"].append({"event": event, "bundle": bundle_id, "at": stamp, **more})

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.root / FILE, self.data)

    def table(self) -> str:
        rows = [f"{'bundle':<40} {'release':<8} state"]
        for bundle_id, entry in sorted(self.data["bundles"].items(), key=lambda kv: kv[1]["created"]):
            marks = [
                m for m, on in (("current", self.current), ("last known-good", self.last_known_good)) if on == bundle_id
            ]
            rows.append(
                f"{bundle_id:<40} {entry['release']:<8} {entry['state']}{'  ← ' + ', '.join(marks) if marks else ''}"
            )
        return "\n".join(rows)
