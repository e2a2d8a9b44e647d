"""Every rule code rlvr reports — contract rules (RLV) and chat-template checks (RLT) — with
what fires it, why it matters, how to fix it and an example. The table is `codes.yaml`
beside this module; `rlvr rule CODE` prints one entry, docs/rules.md is generated from it
(a test keeps the two equal, and every code the code can report documented)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlvr_cli.errors import UsageProblem


@dataclass(frozen=True)
class Code:
    code: str
    severity: str  # error | warning
    fires: str
    why: str
    fix: str
    example: str = ""


def _load() -> tuple[Code, ...]:
    import yaml

    rows = yaml.safe_load((Path(__file__).parent / "codes.yaml").read_text(encoding="utf-8"))
    return tuple(Code(**row) for row in rows)


CODES: tuple[Code, ...] = _load()
BY_CODE = {c.code: c for c in CODES}


def explain(code: str) -> str:
    """The text `rlvr rule CODE` prints."""
    found = BY_CODE.get(code.strip().upper())
    if found is None:
        raise UsageProblem(f"no rule {code!r}{_did_you_mean(code)}; {_families()} (see docs/rules.md)")
    lines = [f"{found.code} ({found.severity}): {found.fires}", "", f"why: {found.why}", f"fix: {found.fix}"]
    if found.example:
        lines += [f"example that fires {found.code}:", *(f"    {line}" for line in found.example.splitlines())]
    return "\n".join(lines)


def _families() -> str:
    """`the codes are RLV001–RLV901 (rlvr validate) and RLT001–RLT015 (rlvr render)`."""
    ranges = []
    for prefix, source in (("RLV", "rlvr validate"), ("RLT", "rlvr render")):
        codes = sorted(c.code for c in CODES if c.code.startswith(prefix))
        ranges.append(f"{codes[0]}–{codes[-1]} ({source})")
    return "the codes are " + " and ".join(ranges)


def _did_you_mean(code: str) -> str:
    import difflib

    close = difflib.get_close_matches(code.strip().upper(), list(BY_CODE), n=3, cutoff=0.8)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def markdown() -> str:
    """docs/rules.md."""
    out = [
        "# Rule codes",
        "",
        "Generated from `rlvr_cli/codes.yaml` (`rlvr rule CODE` prints one). RLV codes come from",
        "`rlvr validate` (RLV104 and RLV901 only with `--deep`); RLT codes from `rlvr render`.",
        "A warning fails `rlvr validate --strict`; a waiver (`waivers:` in the contract) turns a",
        "finding into a visible `waived[...]` line, except for RLV001–RLV003.",
        "",
    ]
    for c in CODES:
        out += [f"## {c.code} ({c.severity})", "", c.fires[0].upper() + c.fires[1:] + ".", "", f"**Why:** {c.why}.", ""]
        out += [f"**Fix:** {c.fix}.", ""]
        if c.example:
            out += [f"A contract that fires {c.code}:", "", "```yaml", c.example, "```", ""]
    return "\n".join(out)
