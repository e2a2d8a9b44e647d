"""YAML 1.2 semantics and hostile input, through the real command."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlvr_cli.contract import yaml12
from tests.conftest import ROOT, rlvr


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-5", 1e-5),
        ("1.0e-5", 1e-5),
        ("-3", -3),
        ("0x1F", 31),
        ("0o17", 15),
        (".inf", float("inf")),
        ("true", True),
        ("False", False),
        ("yes", "yes"),
        ("no", "no"),
        ("on", "on"),
        ("off", "off"),
        ("y", "y"),
        ("2024-01-01", "2024-01-01"),
        ("~", None),
        ("null", None),
        ("'1'", "1"),
        ('"true"', "true"),
        ("1_000", "1_000"),
        ("0777", 777),
        ("!!str 5", "5"),
        ("!!float 3", 3.0),
    ],
)
def test_yaml_1_2_core_schema(text: str, value: object) -> None:
    assert yaml12.parse(f"k: {text}\n").data == {"k": value}


def test_positions_are_one_based_for_keys_and_values() -> None:
    doc = yaml12.parse("a:\n  b: [1, {c: 2}]\n")
    assert doc.key_pos(("a", "b")) == yaml12.Pos(2, 3)
    assert doc.value_pos(("a", "b", 1, "c")) == yaml12.Pos(2, 14)
    assert doc.value_pos(("a", "missing", "deeper")) == yaml12.Pos(2, 3)  # nearest known ancestor


def write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / f"{name}.rlvr.yaml"
    path.write_bytes(content)
    return path


def alias_bomb() -> bytes:
    text = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    previous = "a"
    for name in "bcdefghij":
        text += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
        previous = name
    return text.encode()


HOSTILE = {
    "empty": (b"", "RLV003", "empty"),
    "only-comments": (b"# nothing here\n", "RLV003", "empty"),
    "list": (b"- a\n- b\n", "RLV003", "got a list"),
    "scalar": (b"just text\n", "RLV003", "got a string"),
    "duplicate": (b"name: a\nname: b\n", "RLV001", "duplicate key 'name'"),
    "tab": (b"a:\n\tb: 1\n", "RLV001", "tab"),
    "binary": (b"\x00\x01\x02\xff\xfe", "RLV001", "not UTF-8"),
    "nul": (b"name: a\x00b\n", "RLV001", "NUL"),
    "latin1": ("name: caf\xe9\n".encode("latin-1"), "RLV001", "not UTF-8"),
    "alias-bomb": (alias_bomb(), "RLV001", "alias"),
    "deep-flow": (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "RLV001", "nesting"),
    "deep-block": ("".join("  " * i + f"k{i}:\n" for i in range(300)).encode(), "RLV001", "nesting"),
    "huge": (b"a: '" + b"x" * 3_000_000 + b"'\n", "RLV001", "larger than"),
    "two-documents": (b"a: 1\n---\nb: 2\n", "RLV001", "more than one YAML document"),
    "unclosed": (b"a: [1, 2\n", "RLV001", "YAML syntax error"),
    "complex-key": (b"? [a, b]\n: 1\n", "RLV001", "key"),
    "unknown-tag": (b"a: !!python/object:os.system x\n", "RLV001", "unsupported tag"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_gets_a_clear_diagnostic_quickly(tmp_path: Path, name: str) -> None:
    content, code, words = HOSTILE[name]
    path = write(tmp_path, name, content)
    before = os.times()
    run = rlvr("validate", "--format", "json", path, timeout=120)
    after = os.times()
    # the command's own CPU time, not the wall clock: on a loaded machine the wall time grows while
    # the work does not (a hang or a runaway parse still shows: the timeout, or the CPU seconds)
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    assert run.code == 1, run.stderr
    assert "Traceback" not in run.stderr
    diagnostics = run.json()["files"][0]["diagnostics"]
    assert diagnostics[0]["code"] == code
    assert words.lower() in diagnostics[0]["message"].lower()
    assert diagnostics[0]["line"] >= 1
    assert cpu < 3.0  # process start included; the check itself is well under a second


def test_bad_utf8_points_at_the_byte(tmp_path: Path) -> None:
    path = write(tmp_path, "pos", b"name: ok\ndescription: caf\xe9\n")
    run = rlvr("validate", path)
    assert f"{path}:2:17: error[RLV001]" in run.stdout


def test_a_missing_key_points_at_its_parent_mapping(tmp_path: Path) -> None:
    text = (ROOT / "contracts" / "grpo-cpu.rlvr.yaml").read_text().replace("  seed: 7\n", "")
    path = write(tmp_path, "missing", text.encode())
    run = rlvr("validate", path)
    line = text.splitlines().index("hyperparameters:") + 1
    assert f":{line}:1: error[RLV003] hyperparameters.seed: missing required key 'seed'" in run.stdout
