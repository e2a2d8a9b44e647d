"""The audits on environments of other domains (tests/env/domains.py): the correct versions
pass both audits; each broken version is caught by the audit meant for it, with evidence of
its own bug (a finding, exit 1 — never an audit that could not run)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import copy_experiment, rlvr

CONTRACT = "experiment.rlvr.yaml"
HERE = Path(__file__).parent

DOMAINS = {
    "inventory": {
        "tools": ["list_items", "set_quantity", "adjust_quantity"],
        "forbidden": ["remove_item"],
        "tasks": [
            {"id": "restock-apple", "prompt": "Set apple to 25.", "item": "apple", "quantity": 25},
            {"id": "sell-pears", "prompt": "Set pear to 1.", "item": "pear", "quantity": 1},
            {"id": "clear-figs", "prompt": "Set fig to 0.", "item": "fig", "quantity": 0},
            {"id": "plums", "prompt": "Set plum to 9.", "item": "plum", "quantity": 9},
        ],
        "candidates": """
candidates:
  - {name: set apple, task: restock-apple, kind: correct, expected: accept, trajectory: [
      [{type: function_call, name: set_quantity, arguments: {item: apple, quantity: 25}}],
      [{type: message, role: assistant, content: "apple is now 25."}]]}
  - {name: adjust apple, task: restock-apple, kind: alternate_correct, expected: accept, trajectory: [
      [{type: function_call, name: list_items, arguments: {}}],
      [{type: function_call, name: adjust_quantity, arguments: {item: apple, delta: 15}}],
      [{type: message, role: assistant, content: "Done."}]]}
  - {name: sell pears, task: sell-pears, kind: correct, expected: accept, trajectory: [
      [{type: function_call, name: set_quantity, arguments: {item: pear, quantity: 1}}],
      [{type: message, role: assistant, content: "pear is now 1."}]]}
  - {name: remove the figs, task: clear-figs, kind: forbidden_tool, expected: reject, trajectory: [
      [{type: function_call, name: remove_item, arguments: {item: fig}}],
      [{type: message, role: assistant, content: "fig is now 0."}]]}
""",
    },
    "bank": {
        "tools": ["balance", "transfer"],
        "forbidden": ["close_account"],
        "tasks": [
            {
                "id": "pay-bob",
                "prompt": "Move 30 from alice to bob.",
                "source": "alice",
                "target": "bob",
                "amount": 30.0,
            },
            {
                "id": "pay-carol",
                "prompt": "Move 10 from bob to carol.",
                "source": "bob",
                "target": "carol",
                "amount": 10.0,
            },
            {
                "id": "refund",
                "prompt": "Move 5 from carol to alice.",
                "source": "carol",
                "target": "alice",
                "amount": 5.0,
            },
            {
                "id": "big",
                "prompt": "Move 60 from alice to carol.",
                "source": "alice",
                "target": "carol",
                "amount": 60.0,
            },
        ],
        "candidates": """
candidates:
  - {name: pay bob, task: pay-bob, kind: correct, expected: accept, trajectory: [
      [{type: function_call, name: transfer, arguments: {source: alice, target: bob, amount: 30}}],
      [{type: message, role: assistant, content: "bob has 80 now."}]]}
  - {name: check then pay, task: pay-bob, kind: alternate_correct, expected: accept, trajectory: [
      [{type: function_call, name: balance, arguments: {account: alice}}],
      [{type: function_call, name: transfer, arguments: {source: alice, target: bob, amount: 30}}],
      [{type: message, role: assistant, content: "Done."}]]}
  - {name: pay carol, task: pay-carol, kind: correct, expected: accept, trajectory: [
      [{type: function_call, name: transfer, arguments: {source: bob, target: carol, amount: 10}}],
      [{type: message, role: assistant, content: "carol has 30 now."}]]}
  - {name: close and pay, task: refund, kind: forbidden_tool, expected: reject, trajectory: [
      [{type: function_call, name: close_account, arguments: {account: carol}}],
      [{type: message, role: assistant, content: "Done."}]]}
""",
    },
}


def _experiment(tool_use: Path, folder: Path, domain: str) -> Path:
    spec = DOMAINS[domain]
    exp = copy_experiment(tool_use, folder)
    shutil.copy(HERE / "domains.py", exp / "domains.py")
    rows = [{**t, "domain": domain, "difficulty": "easy"} for t in spec["tasks"]]
    splits = {"train": rows[:2], "holdout": rows[2:3], "sealed_eval": rows[3:], "all": rows}
    for name, part in splits.items():
        (exp / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    (exp / "audit" / "candidates.yaml").write_text(spec["candidates"])
    text = (exp / CONTRACT).read_text()
    text = text.replace("[list_files, read_file, write_file, replace_in_file]", json.dumps(spec["tools"]))
    text = text.replace("forbidden_tools: [delete_file]", f"forbidden_tools: {json.dumps(spec['forbidden'])}")
    (exp / CONTRACT).write_text(text)
    return exp


@pytest.fixture(scope="module")
def domains(tool_use: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {d: _experiment(tool_use, tmp_path_factory.mktemp(d) / "exp", d) for d in DOMAINS}


def _serve(folder: Path, cls: str, tmp_path: Path) -> Path:
    exp = tmp_path / "exp"
    shutil.copytree(folder, exp, symlinks=True)
    contract = exp / CONTRACT
    text = contract.read_text().replace("rlvr_cli.env.builtin.file_edit:FileEditServer", f"domains:{cls}")
    contract.write_text(text)
    return contract


def _verifier(contract: Path) -> tuple[int, dict]:
    run = rlvr("audit", "verifier", contract, "--format", "json", timeout=300)
    return run.code, json.loads(run.stdout) if run.stdout.strip() else {"stderr": run.stderr}


def _isolation(contract: Path) -> tuple[int, list[dict]]:
    run = rlvr("audit", "isolation", contract, "--sessions", "8", "--format", "json", timeout=300)
    assert run.code in (0, 1), run.stderr  # a finding or a pass, never "could not run"
    return run.code, json.loads(run.stdout)["findings"]


@pytest.mark.parametrize(("domain", "cls"), [("inventory", "Inventory"), ("bank", "Bank"), ("bank", "BankPerSession")])
def test_correct_environments_pass_both_audits(domains, tmp_path: Path, domain: str, cls: str) -> None:
    contract = _serve(domains[domain], cls, tmp_path)
    code, report = _verifier(contract)
    assert code == 0, report
    kinds = {o["kind"] for o in report["outcomes"]}
    assert {"no_op_claim", "collateral_damage", "forbidden_tool"} <= kinds  # arms built from this domain's tools
    assert _isolation(contract) == (0, [])


@pytest.mark.parametrize(
    ("domain", "cls", "kind"),
    [
        ("inventory", "InventoryTargetOnly", "collateral_damage"),
        ("inventory", "InventoryTrustsMessage", "no_op_claim"),
        ("bank", "BankTargetOnly", "collateral_damage"),
    ],
)
def test_broken_verifiers_are_caught_by_the_arm_meant_for_them(domains, tmp_path, domain, cls, kind) -> None:
    code, report = _verifier(_serve(domains[domain], cls, tmp_path))
    assert code == 1
    wrong = [o for o in report["outcomes"] if o["expected"] == "reject" and o["got"] == "accept"]
    assert kind in {o["kind"] for o in wrong}
    assert all(o["transcript"]["steps"] for o in wrong)  # the evidence: what the arm did


@pytest.mark.parametrize(
    ("domain", "cls", "check"),
    [
        ("inventory", "InventoryShared", "no marker in another session"),
        ("inventory", "InventoryVerifyMutates", "verify changes nothing"),
        ("inventory", "InventoryNoReset", "re-seeding resets state"),
        ("inventory", "InventoryNoFree", "nothing left on disk"),
        ("bank", "BankShared", "no marker in another session"),
        ("bank", "BankSharedBeside", "the same verdict alone as among concurrent sessions"),
        ("bank", "BankSharedLedger", "the same final state alone as among concurrent sessions"),
        ("bank", "BankVerifyMutates", "verify changes nothing"),
        ("bank", "BankNoReset", "re-seeding resets state"),
        ("bank", "BankNoFree", "nothing left on disk"),
        ("bank", "BankLeavesBlank", "nothing left on disk"),
    ],
)
def test_broken_isolation_is_caught_with_its_evidence(domains, tmp_path, domain, cls, check) -> None:
    code, findings = _isolation(_serve(domains[domain], cls, tmp_path))
    assert code == 1
    assert check in {f["check"] for f in findings}, findings


def test_an_environment_without_snapshot_cannot_be_audited_and_says_so(domains, tmp_path: Path) -> None:
    contract = _serve(domains["inventory"], "Inventory", tmp_path)
    code = (
        (contract.parent / "domains.py")
        .read_text()
        .replace(
            '    def snapshot(self, state):\n        return {"items": state["items"], "note": state["note"]}\n', ""
        )
    )
    (contract.parent / "domains.py").write_text(code)
    run = rlvr("audit", "isolation", contract, "--sessions", "4", timeout=300)
    assert run.code == 3 and "could not run" in run.stderr and "snapshot" in run.stderr
    missing = rlvr("audit", "isolation", contract, "--candidates", contract.parent / "nope.yaml")
    assert missing.code == 2 and "no such candidates file" in missing.stderr


def test_a_forbidden_tool_the_server_forgot_to_forbid_is_caught_before_any_episode(domains, tmp_path) -> None:
    contract = _serve(domains["inventory"], "InventoryForgetsForbidden", tmp_path)
    for audit in ("verifier", "isolation"):
        run = rlvr("audit", audit, contract, timeout=300)
        assert run.code == 1 and "but the server does not forbid ['remove_item']" in run.stdout, run.stdout


def test_json_output_stays_parseable_whatever_the_environment_prints(domains, tmp_path) -> None:
    contract = _serve(domains["inventory"], "InventoryChatty", tmp_path)
    code, report = _verifier(contract)
    assert code == 0 and report["disagreements"] == 0
    assert _isolation(contract) == (0, [])


def test_an_audit_that_stops_early_closes_every_session_it_seeded(domains, tmp_path) -> None:
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob("rlvr-abort-*"))
    run = rlvr("audit", "isolation", _serve(domains["inventory"], "InventoryBreaksMidAudit", tmp_path), timeout=300)
    assert run.code == 3 and "could not run" in run.stderr and "snapshot broke" in run.stderr
    assert set(Path(tempfile.gettempdir()).glob("rlvr-abort-*")) == before  # every session's folder freed


def test_a_golden_path_adds_an_off_path_arm_that_the_server_rejects(domains, tmp_path: Path) -> None:
    contract = _serve(domains["inventory"], "Inventory", tmp_path)
    data = contract.parent / "data"
    look_first = {"order": "strict", "calls": [{"tool": "list_items"}]}  # look before you change anything
    for path in data.glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows = [{**r, "trajectory": look_first} if r["id"] == "restock-apple" else r for r in rows]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    candidates = contract.parent / "audit" / "candidates.yaml"
    candidates.write_text(
        candidates.read_text().replace(
            "  - {name: set apple, task: restock-apple, kind: correct, expected: accept, trajectory: [\n",
            "  - {name: set apple, task: restock-apple, kind: correct, expected: accept, trajectory: [\n"
            "      [{type: function_call, name: list_items, arguments: {}}],\n",
        )
    )
    code, report = _verifier(contract)
    off = [o for o in report["outcomes"] if o["kind"] == "off_path"]
    assert code == 0 and off and all(o["got"] == "reject" for o in off), report.get("disagreements")
    assert off[0]["name"] == "restock-apple/right state without list_items"
    assert off[0]["verdict"]["components"]["path"] == 0.0
