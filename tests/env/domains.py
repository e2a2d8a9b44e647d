"""Two environments of domains other than files, each correct and broken in the ways the
audits exist to catch. Written only from docs/environments.md: an inventory service and a
bank. Copied into an experiment folder as `domains.py` and named by its contract."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal

from rlvr_cli.env.server import ResourcesServer, ToolError, tool
from rlvr_cli.env.verdict import Verdict

STOCK = {"apple": 10, "pear": 4, "plum": 7, "fig": 2}


class Inventory(ResourcesServer):
    """Set one item's quantity; every other item must stay as it was; never remove an item."""

    offered = ("list_items", "set_quantity", "adjust_quantity")
    forbidden = ("remove_item",)

    def seed(self, task):
        return {"items": dict(STOCK), "note": str(task.get("marker", ""))}

    @tool
    def list_items(self, state) -> dict[str, int]:
        """Every item and its quantity."""
        return dict(state["items"])

    @tool
    def set_quantity(self, state, item: str, quantity: int) -> str:
        """Set an item's quantity."""
        if item not in state["items"]:
            raise ToolError(f"no item {item!r}")
        if quantity < 0:
            raise ToolError("a quantity is at least 0")
        state["items"][item] = quantity
        return f"{item}: {quantity}"

    @tool
    def adjust_quantity(self, state, item: str, delta: int) -> str:
        """Add `delta` (negative: remove) to an item's quantity."""
        return self.set_quantity(state, item, state["items"].get(item, 0) + delta)

    @tool
    def remove_item(self, state, item: str) -> str:
        """Remove an item from the inventory."""
        state["items"].pop(item, None)
        return f"removed {item}"

    def verify(self, state, task, calls, final_message):
        items = state["items"]
        target = float(items.get(task["item"]) == task["quantity"])
        others = float(
            all(items.get(k) == v for k, v in STOCK.items() if k != task["item"]) and set(items) == set(STOCK)
        )
        return Verdict("ok", target * others, {"success": target * others})

    def snapshot(self, state):
        return {"items": state["items"], "note": state["note"]}


class InventoryTargetOnly(Inventory):
    def verify(self, state, task, calls, final_message):
        ok = float(state["items"].get(task["item"]) == task["quantity"])
        return Verdict("ok", ok, {"success": ok})


class InventoryTrustsMessage(Inventory):
    def verify(self, state, task, calls, final_message):
        ok = float(f"{task['item']} is now {task['quantity']}" in final_message)
        return Verdict("ok", ok, {"success": ok})


SHARED: dict = {}


class InventoryShared(Inventory):
    """Every session works on one module-level inventory."""

    def seed(self, task):
        SHARED.setdefault("items", dict(STOCK))
        SHARED["note"] = str(task.get("marker", ""))
        return SHARED


class InventoryVerifyMutates(Inventory):
    """Verify 'normalises' the state it judges."""

    def verify(self, state, task, calls, final_message):
        state["note"] = state["note"] + " (verified)"
        return super().verify(state, task, calls, final_message)


CACHE: dict = {}


class InventoryNoReset(Inventory):
    """Re-seeding a task hands back the state its last session left."""

    def seed(self, task):
        return CACHE.setdefault(task["id"], super().seed(task))


class InventoryNoFree(Inventory):
    """Keeps a journal folder per session, not registered, never removed."""

    def seed(self, task):
        state = super().seed(task)
        journal = Path(tempfile.mkdtemp(prefix="inventory-journal-"))
        (journal / "journal.txt").write_text(f"seeded for {state['note']}\n")
        state["journal"] = str(journal)
        return state


ACCOUNTS = {"alice": 100.0, "bob": 50.0, "carol": 20.0}


class Bank(ResourcesServer):
    """Move money between two accounts; every other balance stays; never close an account."""

    offered = ("balance", "transfer")
    forbidden = ("close_account",)

    def seed(self, task):
        return {"accounts": dict(ACCOUNTS), "ledger": [], "memo": str(task.get("marker", ""))}

    @tool
    def balance(self, state, account: Literal["alice", "bob", "carol"]) -> float:
        """An account's balance."""
        return state["accounts"][account]

    @tool
    def transfer(self, state, source: str, target: str, amount: float) -> str:
        """Move `amount` from `source` to `target`."""
        accounts = state["accounts"]
        if source not in accounts or target not in accounts:
            raise ToolError("unknown account")
        if not 0 < amount <= accounts[source]:
            raise ToolError(f"cannot move {amount} from {source} ({accounts[source]})")
        accounts[source] -= amount
        accounts[target] += amount
        state["ledger"].append([source, target, amount])
        return f"moved {amount} from {source} to {target}"

    @tool
    def close_account(self, state, account: str) -> str:
        """Close an account."""
        state["accounts"].pop(account, None)
        return f"closed {account}"

    def verify(self, state, task, calls, final_message):
        want = dict(ACCOUNTS)
        want[task["source"]] -= task["amount"]
        want[task["target"]] += task["amount"]
        ok = float(state["accounts"] == want)
        return Verdict("ok", ok, {"success": ok})

    def snapshot(self, state):
        return {"accounts": state["accounts"], "ledger": state["ledger"], "memo": state["memo"]}


class BankTargetOnly(Bank):
    def verify(self, state, task, calls, final_message):
        expected = ACCOUNTS[task["target"]] + task["amount"]
        ok = float(state["accounts"].get(task["target"]) == expected)
        return Verdict("ok", ok, {"success": ok})


BANK: dict = {}


class BankShared(Bank):
    def seed(self, task):
        BANK.setdefault("accounts", dict(ACCOUNTS))
        BANK.setdefault("ledger", [])
        BANK["memo"] = str(task.get("marker", ""))
        return BANK


SHARED_BESIDE: dict = {}


class BankSharedBeside(Bank):
    """Each session's marker sits in a state of its own, beside accounts every session shares
    (reset at each seed): no marker leaks and re-seeding resets, but a transfer that is right
    alone is wrong among concurrent sessions."""

    def seed(self, task):
        accounts = SHARED_BESIDE.setdefault("accounts", {})
        accounts.clear()
        accounts.update(ACCOUNTS)  # reset in place: every session holds the same accounts
        return {"accounts": accounts, "ledger": [], "memo": str(task.get("marker", ""))}


class BankVerifyMutates(Bank):
    """Verify books interest before judging."""

    def verify(self, state, task, calls, final_message):
        state["ledger"].append(["interest", "verify", 0.0])
        return super().verify(state, task, calls, final_message)


BANK_CACHE: dict = {}


class BankNoReset(Bank):
    def seed(self, task):
        return BANK_CACHE.setdefault(task["id"], super().seed(task))


class BankNoFree(Bank):
    """Opens a statement file per session in its own folder and never closes or removes it."""

    def seed(self, task):
        state = super().seed(task)
        folder = Path(tempfile.mkdtemp(prefix="bank-statements-"))
        handle = open(folder / "statement.txt", "w")  # noqa: SIM115 - the bug under test
        handle.write(f"statement for {state['memo']}\n")
        handle.flush()
        state["statement"] = str(folder)
        return state


class BankLeavesBlank(Bank):
    """Writes each session's receipts to a folder of its own, with nothing of the session's
    marker in them, and never removes it: a check that looks only for markers misses it."""

    def seed(self, task):
        state = super().seed(task)
        folder = Path(tempfile.mkdtemp(prefix="bank-receipts-"))
        (folder / "receipt.txt").write_text("receipt: 0.00\n")
        return state


class InventoryForgetsForbidden(Inventory):
    """Offers remove_item as an ordinary tool: nothing would fail an episode that uses it."""

    offered = ("list_items", "set_quantity", "adjust_quantity", "remove_item")
    forbidden = ()


class InventoryChatty(Inventory):
    """Prints from its tools and its verifier: the audits' JSON output must stay parseable."""

    def seed(self, task):
        print("seeding", task.get("id"))
        return super().seed(task)

    def verify(self, state, task, calls, final_message):
        print("verifying", state["items"])
        return super().verify(state, task, calls, final_message)


class InventoryBreaksMidAudit(Inventory):
    """Holds a folder per session; its snapshot crashes once the audit's sessions run."""

    def seed(self, task):
        state = super().seed(task)
        state["folder"] = str(self.folder("rlvr-abort-"))
        return state

    def snapshot(self, state):
        if state["note"].startswith("rlvr-marker-"):
            raise RuntimeError("snapshot broke")
        return super().snapshot(state)


SHARED_LEDGER: list = []


class BankSharedLedger(Bank):
    """Books every transfer in one ledger all sessions append to (cleared at each seed), beside
    per-session accounts: no marker leaks, the verdict reads the accounts only and is the same
    alone, but the state a session ends in depends on what the others did."""

    def seed(self, task):
        SHARED_LEDGER.clear()
        return {"accounts": dict(ACCOUNTS), "ledger": SHARED_LEDGER, "memo": str(task.get("marker", ""))}


class BankPerSession(Bank):
    """Correct, with what is the session's own in its snapshot: a statement folder of its own
    (registered, freed on close), a session number and the time it was opened."""

    opened = 0

    def seed(self, task):
        import time

        BankPerSession.opened += 1
        state = super().seed(task)
        state["statements"] = str(self.folder("bank-statements-"))
        state["session"] = BankPerSession.opened
        state["opened_at"] = time.time()
        return state

    def snapshot(self, state):
        view = super().snapshot(state)
        return {**view, "statements": state["statements"], "session": state["session"], "at": state["opened_at"]}
