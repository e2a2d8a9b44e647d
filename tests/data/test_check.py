"""`rlvr data check` through the CLI: clean data passes; each kind of leak, duplicate, secret
and broken claim planted in it is caught, with its places."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import copy_experiment, edit, rlvr
from tests.data.planted import clean_rows, read, shuffle_and_renumber, shuffle_and_reword, write

CONTRACT = "experiment.rlvr.yaml"
MINHASH = "dedup: {stage: before_split, method: minhash, semantic_clusters: false, normalize: [whitespace, case]}"


@pytest.fixture
def words(single_turn: Path, tmp_path: Path) -> Path:
    """The single-turn experiment with word-problem splits (train 120, holdout 30, sealed 30)
    and near-duplicate checking declared."""
    folder = copy_experiment(single_turn, tmp_path / "exp")
    edit(folder, "dedup: {stage: before_split, method: exact, semantic_clusters: false}", MINHASH)
    for name, n, seed in (("train", 120, 1), ("holdout", 30, 2), ("sealed_eval", 30, 3)):
        write(folder / "data" / f"{name}.jsonl", clean_rows(n, seed, name))
    return folder


def check(folder: Path, *args: str) -> tuple[int, dict[str, Any]]:
    run = rlvr("data", "check", folder / CONTRACT, "--format", "json", *args)
    assert run.code in (0, 1), run.stderr
    return run.code, run.json()


def found(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == code]


def plant(folder: Path, split: str, row: dict[str, Any]) -> int:
    """Append a row to a split; its line number."""
    path = folder / "data" / f"{split}.jsonl"
    rows = read(path)
    write(path, [*rows, row])
    return len(rows) + 1


def test_clean_word_problems_pass_with_near_duplicates_checked(words: Path) -> None:
    code, report = check(words)
    assert code == 0 and report["errors"] == 0, report["findings"][:3]
    assert report["settings"]["near_duplicates"] == {"threshold": 0.8, "shingle": 5, "permutations": 128}
    assert [report["files"][s]["rows"] for s in ("train", "holdout", "sealed_eval")] == [120, 30, 30]


def test_copies_across_splits_are_caught_after_the_declared_normalisation(words: Path) -> None:
    train = read(words / "data" / "train.jsonl")
    holdout = read(words / "data" / "holdout.jsonl")
    line = plant(
        words, "sealed_eval", {"id": "s-copy", "prompt": "  " + train[4]["prompt"].upper() + " ", "answer": "1"}
    )
    back = plant(words, "train", {**holdout[2], "id": "t-copy"})  # an evaluation task trained on
    code, report = check(words)
    pairs = {
        ((f["at"]["split"], f["at"]["line"]), (f["other"]["split"], f["other"]["line"]))
        for f in found(report, "RLV408")
    }
    assert code == 1 and pairs == {(("sealed_eval", line), ("train", 5)), (("holdout", 3), ("train", back))}
    edit(words, "normalize: [whitespace, case]", "normalize: [whitespace]")  # case now counts: one is no copy
    assert len(found(check(words)[1], "RLV408")) == 1


def test_a_duplicate_within_a_split_is_caught(words: Path) -> None:
    train = read(words / "data" / "train.jsonl")
    line = plant(words, "train", {**train[7], "id": "again"})
    (f,) = found(check(words)[1], "RLV410")
    assert (f["at"]["line"], f["other"]["line"]) == (line, 8)


def test_paraphrase_level_copies_are_near_duplicates_at_the_declared_threshold(words: Path) -> None:
    train = read(words / "data" / "train.jsonl")
    lines = [
        plant(words, "holdout", {"id": f"near-{i}", "prompt": shuffle_and_reword(train[i]["prompt"]), "answer": "0"})
        for i in range(5)
    ]
    for i in range(5, 10):  # the same edit with a number changed: another problem of the template, not a copy
        plant(words, "holdout", {"id": f"sib-{i}", "prompt": shuffle_and_renumber(train[i]["prompt"]), "answer": "0"})
    code, report = check(words)
    near = found(report, "RLV411")
    assert code == 1 and sorted(f["at"]["line"] for f in near) == lines
    assert all(f["other"]["split"] == "train" and 0.8 <= f["similarity"] <= 1 for f in near)
    assert sorted(f["other"]["line"] for f in near) == [1, 2, 3, 4, 5]
    edit(words, "normalize: [whitespace, case]}", "normalize: [whitespace, case], threshold: 0.97}")
    assert found(check(words)[1], "RLV411") == []  # above what the copies share
    edit(words, "method: minhash", "method: exact")
    edit(words, ", threshold: 0.97", "")
    assert found(check(words)[1], "RLV411") == []  # exact dedup declared: near duplicates are not looked for


def test_an_answer_in_another_splits_prompt_or_hint_is_a_leak(words: Path) -> None:
    plant(words, "holdout", {"id": "h-ans", "prompt": "Name the capital city of Australia.", "answer": "Canberra, ACT"})
    line = plant(
        words,
        "train",
        {"id": "t-leak", "prompt": "Canberra, ACT is a city. Which country is it in?", "answer": "Oceania"},
    )
    code, report = check(words)
    (leak,) = found(report, "RLV412")
    assert code == 1 and leak["at"] == {"split": "train", "path": "data/train.jsonl", "line": line}
    assert leak["other"]["split"] == "holdout" and "Canberra, ACT" in leak["message"].replace(
        "canberra, act", "Canberra, ACT"
    )


def test_ids_are_unique_everywhere_and_of_one_type(words: Path) -> None:
    holdout = read(words / "data" / "holdout.jsonl")
    line = plant(
        words, "train", {"id": holdout[0]["id"], "prompt": "A different question entirely, about ducks.", "answer": "2"}
    )
    plant(words, "sealed_eval", {"id": 7, "prompt": "Yet another question, this one about owls.", "answer": "3"})
    code, report = check(words)
    (dup,) = found(report, "RLV405")
    assert code == 1 and {dup["at"]["split"], dup["other"]["split"]} == {"train", "holdout"}
    assert line in (dup["at"]["line"], dup["other"]["line"])
    (mixed,) = found(report, "RLV409")
    assert "int at data/sealed_eval.jsonl:31" in mixed["message"]


def test_secrets_and_personal_data_are_found_and_not_copied_into_the_report(words: Path) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    edit(words, "  hints: {used: false}", "  pii_patterns: {employee_id: 'EMP-[0-9]{6}'}\n  hints: {used: false}")
    lines = [
        plant(
            words, "train", {"id": "sec", "prompt": f"Use token {token} to call the API. What is 2+2?", "answer": "4"}
        ),
        plant(
            words, "train", {"id": "mail", "prompt": "Write to jane.doe@corp-mail.com about 3 apples.", "answer": "3"}
        ),
        plant(words, "holdout", {"id": "emp", "prompt": "Employee EMP-123456 has 4 pens.", "answer": "4"}),
    ]
    run = rlvr("data", "check", words / CONTRACT, "--format", "json")
    report = run.json()
    assert run.code == 1 and token not in run.stdout
    (secret,) = found(report, "RLV413")
    assert secret["at"]["line"] == lines[0] and "GitHub Token" in secret["message"]
    pii = {(f["at"]["line"], f["message"].split(":")[1].split("(")[0].strip()) for f in found(report, "RLV414")}
    assert pii == {(lines[1], "email"), (lines[2], "employee_id")}


def test_the_holdout_design_and_the_hint_free_sealed_split_are_checked(words: Path) -> None:
    edit(words, "  hints: {used: false}", "  holdout_design: {length_buckets: [long]}\n  hints: {used: false}")
    code, report = check(words)
    assert code == 1 and "no holdout task has length_bucket 'long'" in found(report, "RLV407")[0]["message"]
    for split, bucket in (("holdout", "long"), ("train", "short")):
        rows = read(words / "data" / f"{split}.jsonl")
        write(words / "data" / f"{split}.jsonl", [{**r, "length_bucket": bucket} for r in rows])
    assert check(words)[0] == 0
    hints = (
        "hints: {used: true, source: solutions, field: hint, leak_check: true, placement: prompt, "
        "share: 0.5, until_step: 10, advantage: group}"
    )
    edit(words, "hints: {used: false}", hints)
    line = plant(
        words, "sealed_eval", {"id": "s-hint", "prompt": "Count the ducks in the pond.", "answer": "5", "hint": "5"}
    )
    (hint,) = found(check(words)[1], "RLV401")
    assert hint["at"]["line"] == line


def test_bad_rows_are_reported_each_with_its_line_and_the_rest_still_checked(words: Path) -> None:
    with (words / "data" / "train.jsonl").open("ab") as fh:
        fh.write(b'{"id": "x"}\n{not json}\n' + b'{"id": "big", "prompt": "' + b"y" * (1 << 21) + b'"}\n')
    code, report = check(words)
    messages = {f["at"]["line"]: f["message"] for f in found(report, "RLV901")}
    assert code == 1 and sorted(messages) == [121, 122, 123] and messages[121] == "task lacks prompt"
    assert "not JSON" in messages[122] and "a line over 1,048,576 bytes" in messages[123]
    assert report["files"]["train"]["rows"] == 120


def test_formats_the_report_file_and_waivers(words: Path, tmp_path: Path) -> None:
    train = read(words / "data" / "train.jsonl")
    line = plant(words, "holdout", {**train[0], "id": "copy"})
    github = rlvr("data", "check", words / CONTRACT, "--format", "github")
    assert github.code == 1 and f"::error file=data/holdout.jsonl,line={line},title=RLV408::" in github.stdout
    text = rlvr("data", "check", words / CONTRACT, "--out", tmp_path / "dc.json")
    assert f"data/holdout.jsonl:{line}:1: error[RLV408]" in text.stdout and (tmp_path / "dc.json").is_file()
    with (words / CONTRACT).open("a") as fh:
        fh.write("\nwaivers:\n  - {rule: RLV408, reason: the copy is intended, expires: '2999-01-01'}\n")
    waived = check(words)
    assert waived[0] == 0 and waived[1]["waived"] == 1 and found(waived[1], "RLV408")[0]["severity"] == "waived"
    assert rlvr("data", "check", words / CONTRACT, "--format", "xml").code == 2
    assert rlvr("data", "check", tmp_path / "missing.rlvr.yaml").code == 2


def test_a_waiver_scoped_to_tasks_or_a_pattern_accepts_that_finding_and_no_other(words: Path) -> None:
    train = read(words / "data" / "train.jsonl")
    first = plant(words, "holdout", {**train[0], "id": "copy-a"})
    second = plant(words, "holdout", {**train[1], "id": "copy-b"})
    code, report = check(words)
    copies = found(report, "RLV408")
    pairs = [["copy-a", str(train[0]["id"])], ["copy-b", str(train[1]["id"])]]
    assert code == 1 and [f["tasks"] for f in copies] == pairs  # the JSON names each finding's tasks
    with (words / CONTRACT).open("a") as fh:
        fh.write(f"\nwaivers:\n  - {{rule: RLV408, reason: kept on purpose, tasks: [copy-a, {train[0]['id']}]}}\n")
    code, report = check(words)
    assert code == 1 and [f["severity"] for f in found(report, "RLV408")] == ["waived", "error"]
    deep = rlvr("validate", "--deep", words / CONTRACT)
    assert deep.code == 1 and deep.stdout.count("waived[RLV408]") == 1 and deep.stdout.count("error[RLV408]") == 1
    assert f"data/holdout.jsonl:{first}: the prompt of" in deep.stdout.split("waived[RLV408]", 1)[1].splitlines()[0]
    with (words / CONTRACT).open("a") as fh:  # the other, by its place
        fh.write(f"  - {{rule: RLV408, reason: kept too, match: 'holdout\\.jsonl:{second}\\b'}}\n")
    assert check(words)[0] == 0 and rlvr("validate", "--deep", words / CONTRACT).code == 0
    with (words / CONTRACT).open("a") as fh:  # a scope that covers nothing is stale, and named
        fh.write("  - {rule: RLV408, reason: stale, tasks: [nobody]}\n  - {rule: RLV411, reason: x, match: '(['}\n")
    deep = rlvr("validate", "--deep", words / CONTRACT)
    assert deep.code == 1 and "not a regular expression" in deep.stdout and "waivers[3].match" in deep.stdout
    edit(words, "  - {rule: RLV411, reason: x, match: '(['}\n", "")
    deep = rlvr("validate", "--deep", words / CONTRACT)
    assert "warning[RLV005]" in deep.stdout
    assert "waiver for RLV408 (tasks ['nobody']) matches no diagnostic" in deep.stdout
    plain = rlvr("validate", words / CONTRACT)  # without the data check it cannot know: no false alarm
    assert plain.code == 0 and "RLV005" not in plain.stdout, plain.stdout


@pytest.mark.slow  # trains or runs rlvr train: make test runs it, make test-fast does not
def test_validate_deep_and_train_run_the_same_check(words: Path) -> None:
    train = read(words / "data" / "train.jsonl")
    plant(words, "sealed_eval", {**train[3], "id": "sealed-copy"})  # a training row copied into sealed_eval
    deep = rlvr("validate", "--deep", words / CONTRACT)
    assert deep.code == 1 and "error[RLV408] data.splits.sealed_eval.path: data/sealed_eval.jsonl:31:" in deep.stdout
    run = rlvr("train", words / CONTRACT, "--max-steps", "1", timeout=120)
    assert run.code == 1 and "[RLV408]" in run.stderr and not (words / "runs" / "arith" / "plan.json").exists()


HOSTILE_ROWS = [  # (raw line, what the finding says): each refused where it is, never a crash
    (b'{"id": ' + b"9" * 5000 + b', "prompt": "p"}', "an integer of 5,000 digits (at most 1,000)"),
    (b'{"id": "deep", "prompt": "p", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested more than 64 levels deep"),
    (b'{"id": "sur", "prompt": "a \\ud800 b"}', "a lone surrogate (\\ud800) in prompt"),
    (b'{"id": "nan", "prompt": "p", "answer": NaN}', "NaN is not a JSON number"),
    (b'{"id": "inf", "prompt": "p", "answer": 1e999}', "too large for a float"),
    (b'{"id": "twice", "id": "again", "prompt": "p"}', "the key 'id' twice in one object"),
    (b'{"id": "null", "prompt": "p", "answer": null}', "the answer field 'answer' is null"),
    (b'{"id": "list", "prompt": "p", "answer": [{"a": 1}]}', "the answer field 'answer' is a list holding"),
    (b'{"id": "dict", "prompt": "p", "answer": {"a": 1}}', "the answer field 'answer' is an object"),
    (b'{"id": "empty", "prompt": "p", "answer": "  "}', "the answer field 'answer' is empty"),
]


@pytest.mark.slow  # trains or runs rlvr train: make test runs it, make test-fast does not
def test_hostile_rows_are_findings_on_their_lines_and_training_refuses_them_the_same_way(words: Path) -> None:
    with (words / "data" / "train.jsonl").open("ab") as fh:
        fh.write(b"\n".join(raw for raw, _ in HOSTILE_ROWS) + b"\n")
    code, report = check(words)
    messages = {f["at"]["line"]: f["message"] for f in found(report, "RLV901")}
    assert code == 1 and sorted(messages) == list(range(121, 121 + len(HOSTILE_ROWS))), messages
    for line, (_, said) in enumerate(HOSTILE_ROWS, 121):
        assert said in messages[line], (line, messages[line])
    assert report["files"]["train"]["rows"] == 120
    # the paired case: answers of the accepted kinds (a number, a list of texts) are clean
    train = words / "data" / "train.jsonl"
    train.write_bytes(b"".join(train.read_bytes().splitlines(keepends=True)[:120]))
    plant(words, "train", {"id": "n", "prompt": "how many legs has a spider, in digits?", "answer": 8})
    plant(words, "train", {"id": "l", "prompt": "name a primary colour of light", "answer": ["red", "green"]})
    assert check(words)[0] == 0
    # training reads the splits through the same parser: a surrogate is refused, not a crash in the tokenizer
    with (words / "data" / "holdout.jsonl").open("ab") as fh:
        fh.write(HOSTILE_ROWS[2][0] + b"\n")
    run = rlvr("train", words / CONTRACT, "--max-steps", "1", timeout=120)
    assert run.code == 1 and "lone surrogate" in run.stderr and "Traceback" not in run.stderr, run.stderr[-1000:]


@pytest.mark.slow  # trains or runs rlvr train: make test runs it, make test-fast does not
def test_a_split_that_is_a_fifo_a_device_or_a_link_is_named_for_what_it_is(words: Path) -> None:
    import os

    holdout = words / "data" / "holdout.jsonl"
    holdout.unlink()
    os.mkfifo(holdout)  # reading it would wait forever
    code, report = check(words)
    assert code == 1 and any("holdout.jsonl is a FIFO, not a file of tasks" in f["message"] for f in report["findings"])
    holdout.unlink()
    holdout.symlink_to("/dev/zero")  # reading it would never end
    code, report = check(words)
    assert code == 1 and any("a character device" in f["message"] for f in report["findings"])
    holdout.unlink()
    holdout.symlink_to("/etc/passwd")  # read (and found not to be tasks), but never silently
    code, report = check(words)
    linked = [f for f in report["findings"] if f["code"] == "RLV406"]
    assert code == 1 and linked and "is a link to /etc/passwd, outside the contract's folder" in linked[0]["message"]
    holdout.unlink()
    holdout.symlink_to(words / "data" / "nowhere.jsonl")
    code, report = check(words)
    assert any("does not exist (a dangling link)" in f["message"] for f in report["findings"])
    run = rlvr("train", words / CONTRACT, "--max-steps", "1", timeout=120)
    assert run.code == 1 and "Traceback" not in run.stderr


@pytest.mark.slow  # trains a step
def test_a_waived_copy_across_splits_trains_an_unwaived_one_does_not(words: Path) -> None:
    """One check, not two: training honours the waivers `rlvr data check` honours."""
    train = read(words / "data" / "train.jsonl")
    plant(words, "holdout", {**train[0], "id": "copy"})
    refused = rlvr("train", words / CONTRACT, "--max-steps", "1", "--run-dir", words / "r1", timeout=300)
    assert refused.code == 1 and "[RLV408]" in refused.stderr
    with (words / CONTRACT).open("a") as fh:
        fh.write("\nwaivers:\n  - {rule: RLV408, reason: the copy is intended, expires: '2999-01-01'}\n")
    edit(words, "prompt_truncation: error", "prompt_truncation: left")  # word problems outgrow the arith prompts
    run = rlvr("train", words / CONTRACT, "--max-steps", "1", "--run-dir", words / "r2", timeout=300)
    assert run.code == 0, run.stderr[-2000:]


def test_a_copied_prompt_holding_a_secret_or_an_email_is_never_quoted_in_any_format(
    words: Path, tmp_path: Path
) -> None:
    token = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    secret = {"id": "s1", "prompt": f"Call with {token} and add 2 and 2.", "answer": "4"}
    mail = {"id": "m1", "prompt": "Mail bob.smith@example-corp.org the sum of 3 and 4.", "answer": "7"}
    for row in (secret, mail):
        plant(words, "train", row)
        plant(words, "holdout", {**row, "id": row["id"] + "-copy"})  # RLV408
        plant(words, "train", {**row, "id": row["id"] + "-again"})  # RLV410
    plant(words, "train", {"id": "leak", "prompt": f"The code is {token}; what is 1+1?", "answer": "2"})
    plant(words, "holdout", {"id": "src", "prompt": "Name the code.", "answer": token})  # RLV412 on the secret
    outputs = [rlvr("data", "check", words / CONTRACT, "--format", f).stdout for f in ("text", "json", "github")]
    outputs.append(rlvr("validate", "--deep", "--format", "json", words / CONTRACT).stdout)
    rlvr("data", "check", words / CONTRACT, "--out", tmp_path / "dc.json")
    outputs.append((tmp_path / "dc.json").read_text())
    for out in outputs:
        assert token not in out and "bob.smith@example-corp.org" not in out and "Z9y8X7" not in out
    report = json.loads(outputs[1])
    quoting = [f["message"] for f in report["findings"] if f["code"] in ("RLV408", "RLV410", "RLV412")]
    assert sum("not quoted" in m for m in quoting) >= 5  # 2 copies across splits, 2 within, the answer leaks
    # the paired case: a copied prompt with nothing to hide is quoted, so a reader can find it
    train = read(words / "data" / "train.jsonl")
    plant(words, "sealed_eval", {**train[1], "id": "plain-copy"})
    messages = [f["message"] for f in check(words)[1]["findings"] if f["code"] == "RLV408"]
    plain = [m for m in messages if "not quoted" not in m]
    assert plain and train[1]["prompt"][:20].lower() in plain[0]  # quoted as normalised (case folded)


def test_every_finding_is_in_the_json_and_the_text_says_what_it_left_out(words: Path, tmp_path: Path) -> None:
    train = read(words / "data" / "train.jsonl")
    for i in range(5):
        plant(words, "train", {**train[i], "id": f"again-{i}"})  # five RLV410
    text = rlvr("data", "check", words / CONTRACT, "--max-per-code", "2", "--out", tmp_path / "dc.json")
    assert text.code == 1 and text.stdout.count("[RLV410]") == 2
    assert "... and 3 more RLV410 finding(s), not listed (--max-per-code 2)" in text.stdout
    assert len(found(json.loads((tmp_path / "dc.json").read_text()), "RLV410")) == 5
    assert len(found(check(words, "--max-per-code", "2")[1], "RLV410")) == 5  # json: every one, whatever the flag
    assert rlvr("data", "check", words / CONTRACT, "--max-per-code", "0").stdout.count("[RLV410]") == 5
    github = rlvr("data", "check", words / CONTRACT, "--format", "github", "--max-per-code", "1").stdout
    assert github.count("title=RLV410::") == 2 and "4 more RLV410" in github  # one listed, one notice
    assert rlvr("data", "check", words / CONTRACT, "--max-per-code", "-1").code == 2


UNITS = [("kilometres", "metres"), ("hours", "minutes"), ("kilograms", "grams"), ("litres", "millilitres")]
REWORDS = [  # the same problem, reworded: every number kept
    "Convert {n} {a} to {b}; give the answer as a whole number, without units.",
    "Convert {n} {a} to {b}. Give the answer as one whole number, without units.",
    "Convert {n} {a} to {b}. Give your answer as a whole number, without units.",
]


def conversions(rng: Any, count: int, seen: set) -> list[tuple[int, tuple[str, str]]]:
    out = []
    while len(out) < count:
        key = (rng.randint(2, 99_999), rng.choice(UNITS))
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def test_a_templated_family_of_distinct_problems_is_not_a_near_duplicate_a_reworded_copy_is(
    words: Path,
) -> None:
    """Unit conversions from one template: siblings score up to ~0.9 Jaccard over 5-character
    shingles (a fifth of the pairs ≥ 0.8), so the similarity alone would call them copies. They
    state different numbers; reworded copies keep them."""
    import random

    rng, seen = random.Random(7), set()
    template = "Convert {n} {a} to {b}. Give the answer as a whole number, without units."

    def rows(keys: list, prefix: str, text: str = template) -> list[dict[str, Any]]:
        return [{"id": f"{prefix}-{i}", "prompt": text.format(n=n, a=a, b=b)} for i, (n, (a, b)) in enumerate(keys)]

    train_keys = conversions(rng, 300, seen)
    write(words / "data" / "train.jsonl", rows(train_keys, "t"))
    write(words / "data" / "holdout.jsonl", rows(conversions(rng, 60, seen), "h"))
    write(words / "data" / "sealed_eval.jsonl", rows(conversions(rng, 60, seen), "s"))
    code, report = check(words)
    assert code == 0 and found(report, "RLV411") == [], found(report, "RLV411")[:3]  # no false alarm
    copies = [
        plant(words, "holdout", row)
        for j, text in enumerate(REWORDS)
        for row in rows(train_keys[j * 4 : j * 4 + 4], f"copy{j}", text)
    ]
    code, report = check(words)
    near = found(report, "RLV411")
    assert code == 1 and sorted(f["at"]["line"] for f in near) == copies  # every reworded copy, nothing else
    assert all(f["other"]["split"] == "train" and "the same numbers" in f["message"] for f in near)


PII_FOUND = [  # (prompt, the kind a report names)
    ("Pay with 4111 1111 1111 1111 before Friday.", "card_number"),
    ("Call +44 20 7946 0958 about the order.", "phone"),
    ("Ring (415) 555-0132 after six.", "phone"),
    ("Her SSN: 123456789 is on file.", "us_ssn"),
    ("Use github_pat_" + "A1" * 20 + "xyz to push.", "GitHub fine-grained token"),
    ("aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS secret access key"),
]
PII_CLEAN = [  # look-alikes that are none of them
    "Between 2023-11-02 and 2024-01-15, how many days passed?",
    "The readings were 1234, 5678, 9012 and 3456; what is their sum?",
    "Order 123456789 shipped on 2024-03-05; when will it arrive?",
    "Convert 1,234,567 metres to kilometres.",
    "Version 1.2.3 of the tool was built 4567-8901-2345 times.",
]


def test_personal_data_patterns_find_what_they_name_and_pass_look_alikes(words: Path) -> None:
    clean = [plant(words, "train", {"id": f"ok-{i}", "prompt": p, "answer": "1"}) for i, p in enumerate(PII_CLEAN)]
    flagged = [
        plant(words, "train", {"id": f"pii-{i}", "prompt": p, "answer": "1"}) for i, (p, _) in enumerate(PII_FOUND)
    ]
    url = plant(
        words, "train", {"id": "url", "prompt": "Clone https://alice:s3cretpw@git.example.com/r.git", "answer": "1"}
    )
    empty = plant(words, "train", {"id": "empty", "prompt": "   ", "answer": "1"})
    code, report = check(words)
    assert code == 1
    by_line = {}
    for f in report["findings"]:
        if f["code"] in ("RLV413", "RLV414", "RLV901") and f.get("at", {}).get("line"):
            by_line.setdefault(f["at"]["line"], []).append(f["message"])
    assert not [line for line in clean if line in by_line], {line: by_line[line] for line in clean if line in by_line}
    for line, (_, kind) in zip(flagged, PII_FOUND, strict=True):
        assert any(kind in m for m in by_line.get(line, [])), (kind, by_line.get(line))
    assert by_line[url] and all("email" not in m for m in by_line[url])  # a URL credential: a secret, not an address
    assert by_line[empty] == ["the prompt is empty"]
    assert "s3cretpw" not in json.dumps(report) and "wJalrXUtn" not in json.dumps(report)
