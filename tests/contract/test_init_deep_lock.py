"""`rlvr init`, `rlvr validate --deep` and `rlvr lock` on a real experiment folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import edit, rlvr


@pytest.fixture(scope="module")
def scaffold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("init") / "my-exp"
    run = rlvr("init", folder, "--template", "single-turn")
    assert run.code == 0, run.stderr
    return folder


@pytest.fixture
def experiment(scaffold: Path, tmp_path: Path) -> Path:
    target = tmp_path / "exp"
    shutil.copytree(scaffold, target)
    return target


def contract(folder: Path) -> Path:
    return folder / "experiment.rlvr.yaml"


def deep(folder: Path) -> tuple[int, list[dict]]:
    run = rlvr("validate", "--deep", "--format", "json", contract(folder))
    return run.code, run.json()["files"][0]["diagnostics"]


def test_init_creates_a_folder_that_validates_deeply(scaffold: Path) -> None:
    names = {p.relative_to(scaffold).as_posix() for p in scaffold.rglob("*") if p.is_file()}
    for expected in (
        "experiment.rlvr.yaml",
        "verifier.py",
        "README.md",
        ".pre-commit-config.yaml",
        "contract.schema.json",
        "data/train.jsonl",
        "data/holdout.jsonl",
        "data/sealed_eval.jsonl",
        "model/config.json",
        "model/tokenizer.json",
    ):
        assert expected in names
    text = contract(scaffold).read_text()
    assert text.startswith("# yaml-language-server: $schema=contract.schema.json\n")
    assert "name: my-exp\n" in text
    assert rlvr("validate", "--deep", "--strict", contract(scaffold)).code == 0


def test_init_model_loads_with_from_pretrained(scaffold: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(scaffold / "model")
    model = AutoModelForCausalLM.from_pretrained(scaffold / "model")
    assert tokenizer.eos_token == "<|im_end|>"
    assert model.config.vocab_size == len(tokenizer)


def test_init_tool_use_template_validates(tmp_path: Path) -> None:
    folder = tmp_path / "agent"
    assert rlvr("init", folder, "-t", "tool-use", "--no-model").code == 0
    assert rlvr("validate", "--strict", contract(folder)).code == 0


def test_init_refuses_non_empty_folder_and_never_overwrites(experiment: Path, tmp_path: Path) -> None:
    before = contract(experiment).read_text()
    refused = rlvr("init", experiment, "--no-model")
    assert refused.code == 2 and "not empty" in refused.stderr
    forced = rlvr("init", experiment, "--force", "--no-model")
    assert forced.code == 2 and "would be overwritten" in forced.stderr
    assert contract(experiment).read_text() == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert rlvr("init", other, "--force", "--no-model").code == 0
    assert (other / "notes.txt").read_text() == "mine"


def test_init_lists_templates_and_rejects_unknown_ones(tmp_path: Path) -> None:
    listing = rlvr("init", "--list").stdout
    assert "single-turn" in listing and "tool-use" in listing
    bad = rlvr("init", tmp_path / "x", "--template", "nope")
    assert bad.code == 2 and "single-turn" in bad.stderr


def test_deep_finds_a_missing_stop_token(experiment: Path) -> None:
    edit(experiment, 'stop_tokens: ["<|im_end|>"]', 'stop_tokens: ["<|im_end|>", "<|eot|>"]')
    code, diags = deep(experiment)
    assert code == 1
    assert [(d["code"], d["path"]) for d in diags] == [("RLV901", "length.stop_tokens[1]")]
    assert "'<|eot|>'" in diags[0]["message"]


def test_deep_finds_a_missing_chat_template(experiment: Path) -> None:
    (experiment / "model" / "chat_template.jinja").unlink()
    config = experiment / "model" / "tokenizer_config.json"
    data = json.loads(config.read_text())
    data.pop("chat_template", None)
    config.write_text(json.dumps(data))
    code, diags = deep(experiment)
    assert code == 1 and diags[0]["path"] == "artifacts.tokenizer.chat_template"


def test_deep_compiles_a_template_file(experiment: Path) -> None:
    (experiment / "broken.jinja").write_text("{% for m in messages %}{{ m.content }")
    edit(experiment, "chat_template: native", "chat_template: broken.jinja")
    code, diags = deep(experiment)
    assert code == 1 and "does not compile" in diags[0]["message"]


def test_deep_finds_missing_paths_and_bad_rows(experiment: Path) -> None:
    (experiment / "data" / "holdout.jsonl").unlink()
    with (experiment / "data" / "train.jsonl").open("a") as fh:
        fh.write('{"id": "x"}\n')
    edit(experiment, "verifier: verifier:verify", "verifier: verifier:check")
    code, diags = deep(experiment)
    messages = {d["path"]: d["message"] for d in diags}
    assert code == 1
    assert "does not exist" in messages["data.splits.holdout.path"]
    assert "train.jsonl:36: task lacks prompt" in messages["data.splits.train.path"]
    assert "defines no 'check'" in messages["environment.verifier"]


def test_deep_checks_declared_sha256(experiment: Path) -> None:
    edit(
        experiment,
        "    train: {path: data/train.jsonl}",
        "    train: {path: data/train.jsonl, sha256: " + "ab" * 32 + "}",
    )
    code, diags = deep(experiment)
    assert code == 1 and [d["code"] for d in diags] == ["RLV104"]


def test_lock_then_drift_is_rlv104(experiment: Path) -> None:
    run = rlvr("lock", contract(experiment))
    assert run.code == 0, run.stderr
    lock = json.loads((experiment / "experiment.lock.json").read_text())
    assert "model/model.safetensors" in lock["files"] and "data/train.jsonl" in lock["files"]
    assert "verifier.py" in lock["files"]
    assert deep(experiment)[0] == 0
    assert rlvr("validate", contract(experiment)).code == 0  # without --deep no file is read
    with (experiment / "data" / "holdout.jsonl").open("a") as fh:
        fh.write('{"id": "new", "prompt": "1+1=", "answer": "2"}\n')
    (experiment / "model" / "extra.bin").write_bytes(b"x")
    code, diags = deep(experiment)
    assert code == 1
    assert sorted(d["message"].split(" since")[0] for d in diags if d["code"] == "RLV104") == [
        "data/holdout.jsonl changed",
        "model/extra.bin is new",
    ]


def test_lock_refuses_an_invalid_contract(experiment: Path) -> None:
    edit(experiment, "group_size: 8", "group_size: 1")
    run = rlvr("lock", contract(experiment))
    assert run.code == 1 and "RLV301" in run.stderr
    assert not (experiment / "experiment.lock.json").exists()
    assert rlvr("lock", experiment / "missing.rlvr.yaml").code == 2


def test_lock_pins_a_verifier_installed_elsewhere_by_its_module_and_a_package_by_its_files(
    experiment: Path, tmp_path: Path
) -> None:
    """A verifier from an installed package (rlvr's built-ins, a team's own checks) is pinned by
    module name, so the lock holds wherever the package lies; a package beside the contract by
    each of its Python files. Either edited afterwards is RLV104; a module found nowhere is named."""
    import os

    site = tmp_path / "site" / "teamchecks"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    shutil.copyfile(experiment / "verifier.py", site / "arith.py")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    edit(experiment, "verifier: verifier:verify", "verifier: teamchecks.arith:verify")
    run = rlvr("lock", contract(experiment), env=env)
    assert run.code == 0, run.stderr
    lock = json.loads((experiment / "experiment.lock.json").read_text())
    assert lock["artifacts"]["verifier"] == ["module:teamchecks.arith"]
    assert rlvr("validate", "--deep", contract(experiment), env=env).code == 0
    with (site / "arith.py").open("a") as fh:
        fh.write("\n# a change to what scores the rollouts\n")
    drift = rlvr("validate", "--deep", contract(experiment), env=env)
    assert drift.code == 1 and "RLV104" in drift.stdout and "module:teamchecks.arith changed" in drift.stdout

    shutil.move(str(site), str(experiment / "teamchecks"))  # the package beside the contract
    (experiment / "teamchecks" / "helpers.py").write_text("SCALE = 1\n")
    assert rlvr("lock", contract(experiment)).code == 0
    lock = json.loads((experiment / "experiment.lock.json").read_text())
    assert lock["artifacts"]["verifier"] == ["teamchecks/__init__.py", "teamchecks/arith.py", "teamchecks/helpers.py"]
    (experiment / "teamchecks" / "helpers.py").write_text("SCALE = 2\n")
    assert "teamchecks/helpers.py changed" in rlvr("validate", "--deep", contract(experiment)).stdout

    edit(experiment, "teamchecks.arith:verify", "nowhere.arith:verify")
    missing = rlvr("lock", contract(experiment))
    assert missing.code == 1 and "module nowhere.arith is neither beside the contract nor importable" in missing.stderr


def test_a_shipped_contract_with_a_builtin_verifier_locks(tmp_path: Path) -> None:
    from tests.conftest import ROOT

    folder = tmp_path / "contracts"
    shutil.copytree(ROOT / "contracts", folder, ignore=shutil.ignore_patterns("runs"))
    from rlvr_cli.toy.tiny import ARITHMETIC, build_tiny

    build_tiny(folder / "arith" / "model", "chatml", alphabet=ARITHMETIC)
    assert rlvr("lock", folder / "dr-grpo-cpu.rlvr.yaml").code == 0
    lock = json.loads((folder / "dr-grpo-cpu.lock.json").read_text())
    assert lock["artifacts"]["verifier"] == ["module:rlvr_cli.env.builtin.arith"]
    assert rlvr("validate", "--deep", folder / "dr-grpo-cpu.rlvr.yaml").code == 0
