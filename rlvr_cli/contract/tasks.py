"""The task rows of the contract's data splits: one validator, one reader.

A task is a JSON object with an `id` and a `prompt` (a string, or a list of chat messages);
every other field (answer, domain, difficulty, hints, ...) is the verifier's and the
holdout design's to read. `rlvr validate --deep` and every reader of a split use the same
check, so a split that validates is a split that trains.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError

MAX_ROW_BYTES = 1 << 20  # a task row over 1 MiB is refused before anything tokenizes it
MAX_DIGITS = 1_000  # an integer longer than this is no id or answer (Python refuses 4,300 by default)
MAX_DEPTH = 64  # objects and lists nested deeper are no task (and could exhaust the recursion limit)


class _Refused(ValueError):
    """A value JSON parses but a task may not hold; its message is the finding."""


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _Refused(f"an integer of {digits:,} digits (at most {MAX_DIGITS:,})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"the number {text[:20]} is too large for a float (it would read as infinity)")
    return value


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number (NaN and infinity are not task values)")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, value in pairs:
        if key in row:
            raise _Refused(f"the key {key[:40]!r} twice in one object (JSON readers disagree on which wins)")
        row[key] = value
    return row


def parse_task(raw: bytes | str) -> tuple[Any, str | None]:
    """(the task on one line, None), or (None, why it is not one): JSON that every reader reads
    the same way (no NaN or infinity, no repeated key, integers of at most 1,000 digits),
    nested at most 64 deep, text that is valid Unicode (no lone surrogate), and a task."""
    try:
        row = json.loads(raw, parse_int=_int, parse_float=_float, parse_constant=_constant, object_pairs_hook=_object)
    except _Refused as exc:
        return None, str(exc)
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})"
    except RecursionError:
        return None, f"nested more than {MAX_DEPTH} levels deep"
    problem = _shape_problem(row) or task_problem(row)
    return (None, problem) if problem else (row, None)


def _shape_problem(row: Any) -> str | None:
    """Nesting depth and lone surrogates (`"\ud800"` parses, but no tokenizer reads it)."""
    stack: list[tuple[Any, int, str]] = [(row, 0, "")]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                code = ord(value[exc.start])
                return (
                    f"a lone surrogate (\\u{code:04x}) in {where or 'the row'}: not Unicode text, no tokenizer reads it"
                )
        elif isinstance(value, dict):
            stack += [(v, depth + 1, f"{where}.{k}" if where else str(k)) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(v, depth + 1, f"{where}[{i}]") for i, v in enumerate(value)]
    return None


def task_lines(path: Path) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) for each non-blank line; None for a line over MAX_ROW_BYTES, which
    is skipped without being held in memory."""
    with path.open("rb") as fh:
        number = 0
        while raw := fh.readline(MAX_ROW_BYTES + 1):
            number += 1
            if len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):
                    raw = fh.readline(1 << 20)
                yield number, None
            elif raw.strip():
                yield number, raw


def split_file_problem(path: Path) -> str | None:
    """Why a split's path cannot be read as a file (nothing there, a folder, a FIFO, a device),
    or None. Never opens it: reading a FIFO would wait forever, /dev/zero never ends."""
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"{path.name} does not exist" + (" (a dangling link)" if path.is_symlink() else "")
    except OSError as exc:
        return f"{path.name} cannot be read ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a character device"}
    kind = next((name for test, name in kinds.items() if test(mode)), "not a plain file")
    return f"{path.name} is {kind}, not a file of tasks"


def task_problem(row: Any) -> str | None:
    """Why `row` is not a task, or None when it is one."""
    if not isinstance(row, dict):
        return "a task is a JSON object"
    missing = [k for k in ("id", "prompt") if k not in row]
    if missing:
        return f"task lacks {' and '.join(missing)}"
    if not isinstance(row["id"], (str, int)) or isinstance(row["id"], bool):
        return "id must be a string or an integer"
    prompt = row["prompt"]
    if not isinstance(prompt, (str, list)):
        return "prompt must be a string or a list of chat messages"
    if not prompt or (isinstance(prompt, str) and not prompt.strip()):
        return "the prompt is empty"
    if isinstance(prompt, list):
        for i, message in enumerate(prompt):
            if not (isinstance(message, dict) and isinstance(message.get("role"), str)):
                return f"prompt[{i}] must be a chat message {{role, content}}"
            if not isinstance(message.get("content"), str) and not message.get("tool_calls"):
                return f"prompt[{i}].content must be a string"
    return None


def read_split(path: Path, name: str) -> list[dict[str, Any]]:
    """Every task of a split; a bad line is an error naming the file and line."""
    problem = split_file_problem(path)
    if problem:
        raise RlvrError(f"data split {name} ({path}): {problem}")
    tasks = []
    for number, raw in task_lines(path):
        row, problem = parse_task(raw) if raw is not None else (None, f"a line over {MAX_ROW_BYTES:,} bytes")
        if problem:
            raise RlvrError(f"{path}:{number}: {problem}")
        tasks.append(row)
    if not tasks:
        raise RlvrError(f"data split {name} ({path}) holds no task")
    return tasks


def duplicate_ids(splits: dict[str, list[tuple[int, dict[str, Any]]]]) -> list[str]:
    """Every task id used twice, within a split or across splits, with both places. Ids are
    compared as text: `1` and `"1"` are the same task to every reader of the records."""
    first: dict[str, str] = {}
    found = []
    for name, rows in splits.items():
        for line, row in rows:
            key, where = str(row.get("id")), f"{name} line {line}"
            if key in first:
                found.append(f"task id {key!r} at {where} is already used at {first[key]}")
            else:
                first[key] = where
    return found


def read_splits(folder: Path, splits: Any) -> dict[str, list[dict[str, Any]]]:
    """Every split the contract names, refused when a task id is used twice (records are keyed
    by it). Prompts copied across splits are the data check's finding, which honours waivers."""
    rows = {}
    for name in ("train", "holdout", "sealed_eval"):
        path = folder / getattr(splits, name).path
        rows[name] = list(enumerate(read_split(path, name), 1))
    dups = duplicate_ids(rows)
    if dups:
        more = f" (and {len(dups) - 1} more)" if len(dups) > 1 else ""
        raise RlvrError(f"{dups[0]}{more}: each task needs its own id (`rlvr validate --deep` lists them)")
    # a prompt in two splits is the data check's (RLV408, with the contract's waivers): it runs
    # before training, so a waived copy trains and an unwaived one never reaches this point
    return {name: [row for _, row in found] for name, found in rows.items()}


def fit_prompt(length: Any, task: dict[str, Any], ids: list[int], what: str = "the prompt") -> list[int]:
    """Prompt ids within `length.max_prompt_tokens`, as `length.prompt_truncation` says: an
    error naming the task, or the last tokens."""
    if len(ids) <= length.max_prompt_tokens:
        return ids
    if length.prompt_truncation == "error":
        raise RlvrError(
            f"task {task.get('id')}: {what} is {len(ids)} tokens, over max_prompt_tokens="
            f"{length.max_prompt_tokens} (length.prompt_truncation: error)"
        )
    return ids[-length.max_prompt_tokens :]


def messages_of(task: dict[str, Any]) -> list[dict[str, Any]]:
    """A string prompt is one user turn; a list is already chat messages."""
    prompt = task["prompt"]
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
