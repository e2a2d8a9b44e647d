"""A data set of another domain for the data check — date arithmetic, unit conversions, schedules
and recipes, written from templates as such sets are — with problems planted at known places
and look-alikes that must pass: what a stranger's data is like, and what the check must make of it.

`build(folder)` writes train/holdout/sealed_eval and returns the plants: (split, task id, code)
of every planted problem. Everything else (the templated siblings, the look-alikes) is clean."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from pathlib import Path
from typing import Any

UNITS = [("km", "m", 1000), ("kg", "g", 1000), ("hours", "minutes", 60), ("minutes", "seconds", 60), ("L", "mL", 1000)]
CITIES = ["Lyon", "Porto", "Tartu", "Graz", "Leeds", "Bergen", "Cork", "Gdansk", "Turin", "Utrecht"]
DISHES = ["lentil soup", "rye bread", "plum cake", "rice salad", "onion tart", "bean stew"]


def _date(rng: random.Random) -> dt.date:
    return dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 2000))


def _task(rng: random.Random, kind: int) -> tuple[str, str]:
    """One problem of family `kind` (of five), and its answer."""
    if kind == 0:
        start, days = _date(rng), rng.randint(3, 400)
        return f"What date is {days} days after {start.isoformat()}? Answer as YYYY-MM-DD.", (
            start + dt.timedelta(days=days)
        ).isoformat()
    if kind == 1:
        big, small, factor = rng.choice(UNITS)
        n = rng.randint(2, 9999)
        return f"Convert {n} {big} to {small}. Give a whole number.", str(n * factor)
    if kind == 2:
        a, b = rng.sample(CITIES, 2)
        dep, hours = rng.randint(0, 23), rng.randint(1, 30)
        return (
            f"A bus leaves {a} at {dep:02d}:00 and reaches {b} {hours} hours later. At what hour of the day "
            "does it arrive (00-23)?"
        ), f"{(dep + hours) % 24:02d}"
    if kind == 3:
        dish, people, grams = rng.choice(DISHES), rng.randint(2, 12), rng.randint(100, 2000)
        return f"A {dish} for {people} people needs {grams} g of flour. How many grams for one person?", str(
            round(grams / people, 2)
        )
    first, last = _date(rng), _date(rng)
    first, last = min(first, last), max(first, last)
    return f"How many days are there from {first.isoformat()} to {last.isoformat()}?", str((last - first).days)


def clean_tasks(n: int, rng: random.Random, prefix: str, seen: set[str], *, distinct: bool = True) -> list[dict]:
    """`n` problems; `distinct`: no two of one family with the same numbers (else only no two
    prompts alike: what a larger set drawn from the same templates holds)."""
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        family = rng.randrange(5)
        prompt, answer = _task(rng, family)
        key = f"{family} {re.findall(r'[0-9]+', prompt)}" if distinct else prompt  # one problem per family and numbers
        if key in seen:
            continue
        seen.add(key)
        rows.append({"id": f"{prefix}-{len(rows):04d}", "prompt": prompt, "answer": answer})
    return rows


GITHUB = "ghp_" + "x7Kq2LmN9pR4sT6vW8yZ1aB3cD5eF0gH2jK4"
AWS_ID = "AKIA" + "Z3QF7XKWM2PLR5TD"
LOOK_ALIKES = [  # each must pass: no finding of any code
    "Between 2023-11-02 and 2024-01-15, how many days passed?",  # two dates: not a card number
    "The readings were 4012, 8888, 8888 and 1881 on four days; what is their mean?",  # digits of separate tokens
    "A recipe says 'password: chef'. How many letters does the word chef have?",  # a password word, no secret
    "Write the address user at example dot com the usual way.",  # not an e-mail
    "Version 2.10.3 was built on 2021-06-09; how many days ago from 2021-07-01?",
    "Call the 24-hour clock time 13:45 in the 12-hour form.",  # a time, not a phone
    "Invoice 1234-5678-9012 totals 40 EUR; what is 40 EUR in cents?",  # not Luhn: not a card
    "Convert 5 km to m. Give a whole number. (Practice set B.)",  # a sibling, with another tail
    "What date is 30 days after 2024-02-01? Answer as YYYY-MM-DD. Mind the leap year.",
    "How many seconds are there in 3 minutes?",
    "Flight AF 1234 leaves at 06:15; what time is 90 minutes later?",
    "A serial number reads 000-12-3456 on the box label; how many digits does it have?",  # no SSN label
    "The key of the map is in the drawer; how many drawers are there if each desk has 3 and there are 4 desks?",
    "Route 66 runs 3,940 km; convert it to m.",
    "The temperature fell from 12 to -3 degrees. By how many degrees did it fall?",
    "Token ring networks were common in 1995; how many years before 2025 is that?",
    "An ISBN is 978-3-16-148410-0; how many digits does it hold?",
    "Multiply 4111 by 1111 and then by 1111 again.",
    "The lab's secret ingredient is salt; how many grams of salt in 3 batches of 15 g?",
    "Email the answer to your teacher: what is 12 times 12?",
]


def build(folder: Path, seed: int = 3) -> list[tuple[str, str, str]]:
    """Write the three splits under `folder` (~3,000 rows); return every planted problem as
    (split, task id, code)."""
    rng, seen = random.Random(seed), set()
    splits = {"train": clean_tasks(2400, rng, "tr", seen), "holdout": clean_tasks(300, rng, "ho", seen)}
    splits["sealed_eval"] = clean_tasks(300, rng, "se", seen)
    train, holdout = splits["train"], splits["holdout"]
    plants: list[tuple[str, str, str]] = []  # (split, id, code): lines are known once written

    def plant(split: str, row: dict[str, Any], code: str) -> None:
        splits[split].append(row)
        plants.append((split, row["id"], code))

    for i in range(8):  # exact copies across splits, after normalisation (whitespace, case)
        src = train[10 + i]
        text = src["prompt"].upper() if i % 2 else "  " + src["prompt"].replace(" ", "   ")
        plant(("holdout", "sealed_eval")[i % 2], {"id": f"copy-{i}", "prompt": text, "answer": src["answer"]}, "RLV408")
    for i in range(5):  # a prompt twice within one split
        src = train[40 + i]
        plant("train", {"id": f"twice-{i}", "prompt": src["prompt"], "answer": src["answer"]}, "RLV410")
    rewords = [  # small edits that keep the problem: word order, a word, punctuation
        ("At what hour of the day does it arrive (00-23)?", "At what hour of the day will it arrive? (00-23)"),
        ("How many grams for one person?", "How many grams are needed for one person?"),
        ("Give a whole number.", "Give the answer as a whole number."),
        ("Answer as YYYY-MM-DD.", "Answer in the form YYYY-MM-DD."),
    ]
    for i in range(8):  # reworded copies: the same numbers in the same roles, a few words changed
        old, new = rewords[i % len(rewords)]
        src = next(r for r in train[60 + 20 * i :] if old in r["prompt"])
        plant(
            "holdout", {"id": f"near-{i}", "prompt": src["prompt"].replace(old, new), "answer": src["answer"]}, "RLV411"
        )
    for i in range(5):  # a worked holdout task (its question and answer) inside a training prompt
        src = next(r for r in holdout[5 * i :] if len(r["answer"]) >= 8)
        prompt = f"Worked example: {src['prompt']} Answer: {src['answer']}. Now convert {i + 2} km to m."
        plant("train", {"id": f"leak-{i}", "prompt": prompt, "answer": "x"}, "RLV412")
    secrets_ = [
        f"Use the token {GITHUB} to fetch the calendar, then count the days from 2021-01-01 to 2021-03-01.",
        f"Our key id is {AWS_ID}; how many characters does it have?",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7x\n-----END RSA PRIVATE KEY-----\nHow many lines above?",
        'The config reads password = "Tr0ub4dor&3x!"; how long is the password?',
        "Open https://admin:hunter2secret@intranet.example.org/report and convert 12 km to m.",
        "aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY — how many slashes?",
    ]
    for i, text in enumerate(secrets_):
        plant("train", {"id": f"secret-{i}", "prompt": text, "answer": "1"}, "RLV413")
    personal = [
        "Send the schedule to marta.kowalska@post-office.pl and convert 3 hours to minutes.",
        "Ring +44 20 7946 0958 to book; how many minutes is 2 hours?",
        "Call (415) 555-0132 after 18:00; what hour is that on a 12-hour clock?",
        "Pay with 4111 1111 1111 1111 and convert 2 kg to g.",
        "Card 5500-0000-0000-0004 was charged 30 EUR; what is that in cents?",
        "Her SSN: 123-45-6789 is on file; how many digits?",
        "SSN 078051120 was printed on the form; how many digits does it have?",
        "Reply to j.doe@example.com with the date 10 days after 2023-05-01.",
    ]
    for i, text in enumerate(personal):
        plant(("train", "holdout")[i % 2], {"id": f"pii-{i}", "prompt": text, "answer": "1"}, "RLV414")
    for i in range(4):  # an id used twice (across or within splits)
        row = {"id": train[100 + i]["id"], "prompt": f"Add {i} and 5.", "answer": "x"}
        plant(("train", "sealed_eval")[i % 2], row, "RLV405")
    for i, text in enumerate(LOOK_ALIKES):
        splits["train"].append({"id": f"alike-{i}", "prompt": text, "answer": "1"})
    for name, rows in splits.items():
        rng.shuffle(rows)
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with (folder / "holdout.jsonl").open("a") as fh:  # rows that are not tasks
        fh.write("".join(line + "\n" for line in BROKEN))
    plants += [("holdout", f"bad-{k}", "RLV901") for k in range(len(BROKEN))]
    return plants


BROKEN = [
    '{"id": "bad-0", "prompt": "no closing brace"',
    '{"id": "bad-1", "prompt": ""}',
    '{"id": "bad-2"}',
    '{"id": "bad-3", "prompt": "What is 1+1?", "answer": NaN}',
    '{"id": "bad-4", "id": "bad-4", "prompt": "Keys twice?", "answer": "1"}',
]
