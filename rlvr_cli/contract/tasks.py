"""The task rows of the contract's data splits: one validator, one reader.

A task is a JSON object with an `id` and a `prompt` (a string, or a list of chat messages);
every other field (answer, domain, difficulty, hints, ...) is the verifier's and the
holdout design's to read. `rlvr validate --deep` and every reader of a split use the same
check, so a split that validates is a split that trains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr_cli.errors import RlvrError
from rlvr_cli.files import read_jsonl

MAX_ROW_BYTES = 1 << 20  # a task row over 1 MiB is refused before anything tokenizes it


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
    if isinstance(prompt, list):
        for i, message in enumerate(prompt):
            if not (isinstance(message, dict) and isinstance(message.get("role"), str)):
                return f"prompt[{i}] must be a chat message {{role, content}}"
            if not isinstance(message.get("content"), str) and not message.get("tool_calls"):
                return f"prompt[{i}].content must be a string"
    return None


def read_split(path: Path, name: str) -> list[dict[str, Any]]:
    """Every task of a split; a bad line is an error naming the file and line."""
    if not path.is_file():
        raise RlvrError(f"data split {name} ({path}) does not exist")
    tasks = []
    for number, row in read_jsonl(path, max_line=MAX_ROW_BYTES):
        problem = task_problem(row)
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
    """Every split the contract names, refused when a task id is used twice."""
    rows = {}
    for name in ("train", "holdout", "sealed_eval"):
        path = folder / getattr(splits, name).path
        rows[name] = list(enumerate(read_split(path, name), 1))
    dups = duplicate_ids(rows)
    if dups:
        more = f" (and {len(dups) - 1} more)" if len(dups) > 1 else ""
        raise RlvrError(f"{dups[0]}{more}: each task needs its own id (`rlvr validate --deep` lists them)")
    leaks = duplicate_prompts(rows)
    if leaks:
        more = f" (and {len(leaks) - 1} more)" if len(leaks) > 1 else ""
        raise RlvrError(f"{leaks[0]}{more}: a prompt belongs to one split (`rlvr validate --deep` lists them)")
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


def _normal(prompt: Any) -> str:
    """A prompt as compared for duplicates: whitespace runs collapsed, case kept."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, ensure_ascii=False)
    return " ".join(text.split())


def duplicate_prompts(splits: dict[str, list[tuple[int, dict[str, Any]]]]) -> list[str]:
    """Every prompt of holdout or sealed_eval that is also a prompt of an earlier split (after
    collapsing whitespace), with both places: an evaluation task the policy trains on, or an
    evaluation split that measures nothing the holdout does not."""
    first: dict[str, str] = {}
    found = []
    for name, rows in splits.items():
        seen_here: set[str] = set()
        for line, row in rows:
            key = _normal(row.get("prompt"))
            if key in first and key not in seen_here:
                found.append(f"the prompt at {name} line {line} is the prompt at {first[key]}: {key[:60]!r}")
            seen_here.add(key)
        for line, row in rows:
            first.setdefault(_normal(row.get("prompt")), f"{name} line {line}")
    return found
