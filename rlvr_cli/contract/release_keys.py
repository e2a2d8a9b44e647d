"""The acceptance keys that look past the contract's own splits: latency measured by the engine
under a stated concurrency, and suites — other contracts' splits a candidate must not lose
(capability retention, operations.py `Suite`). audit/gates.py runs them; audit/latency.py measures."""

from pydantic import Field

from rlvr_cli.contract.sections import PositiveInt, Section

#: gate metrics beyond rewards: what a task costs, and how fast the engine answers
COST_METRICS = ("tokens_per_task", "verifier_seconds")
LATENCY_METRICS = ("ttft_s", "tpot_s", "latency_s")


class Latency(Section):
    """How latency gates are measured: each split's prompts in batches of `concurrency`, timed
    by the engine the contract samples with (greedy), once to the first token and once to the end."""

    concurrency: PositiveInt = Field(
        le=4096, description="Requests served at once while timing (the engine batches them): the load gated."
    )
    repeats: PositiveInt = Field(
        1, le=20, description="Times each batch is timed; the fastest counts (the first run warms caches)."
    )
