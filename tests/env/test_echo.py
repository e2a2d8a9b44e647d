"""The echo examples' verifiers: what each component rewards, and what it never does."""

from __future__ import annotations

from rlvr_cli.env.builtin.echo import verify, verify_ending

TASK = {"id": "echo-7", "prompt": "echo 7", "answer": "7"}


def test_ending_rewards_the_stop_only_on_a_right_answer() -> None:
    ended = verify_ending(TASK, "7")
    assert ended.status == "ok" and dict(ended.components) == {"correct": 1.0, "format": 1.0, "stopped": 1.0}
    cut = verify_ending(TASK, "77")  # right digit, cut at the limit: no stop
    assert dict(cut.components) == {"correct": 1.0, "format": 1.0, "stopped": 0.0}
    wrong_but_ended = verify_ending(TASK, "3")  # stopping after a wrong digit earns nothing for the stop
    assert dict(wrong_but_ended.components) == {"correct": 0.0, "format": 1.0, "stopped": 0.0}
    nothing = verify_ending(TASK, "")
    assert nothing.status == "format_error" and nothing.reward == 0.0


def test_the_one_token_echo_reads_the_first_character() -> None:
    assert verify(TASK, "7").reward == 1.0 and verify(TASK, "3").reward == 0.0
    assert verify(TASK, "x").status == "format_error"
