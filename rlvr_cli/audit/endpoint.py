"""A policy behind an OpenAI-compatible endpoint, for reward profiling: `openai:MODEL@URL` (the
`openai` client; the key from OPENAI_API_KEY, never written anywhere). Each task's chat is sent
once asking for `n` choices at the contract's sampling; the answers are judged by the contract's
verifier as a local policy's are. On a tool-use contract each sample is an episode against the
resources server with the endpoint's own function calling (`audit/endpoint_tools.py`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlvr_cli.contract.models import Contract
from rlvr_cli.errors import CannotRun, UsageProblem

PREFIX = "openai:"


def is_endpoint(spec: str) -> bool:
    return spec.startswith(PREFIX)


def parse(spec: str) -> tuple[str, str]:
    """`openai:MODEL@URL` → (MODEL, URL)."""
    model, at, url = spec[len(PREFIX) :].rpartition("@")
    if not at or not model or not url.startswith(("http://", "https://")):
        raise UsageProblem(
            f"{spec!r}: an endpoint is openai:MODEL@URL, e.g. openai:gpt-4o-mini@http://127.0.0.1:8000/v1"
        )
    return model, url


def answers(contract: Contract, spec: str, tasks: list[dict[str, Any]], k: int, timeout_s: float, seed: int) -> list:
    """[(task, [k texts], completion tokens per answer)] for every task, or CannotRun saying what
    the endpoint did (down, slow, not JSON, the wrong number of choices)."""
    import openai

    from rlvr_cli.contract.tasks import messages_of

    if contract.environment.kind != "single_turn":
        raise UsageProblem(f"{spec}: endpoints are profiled on single-turn contracts only")
    model, url = parse(spec)
    sampling = contract.hyperparameters.sampling
    client = openai.OpenAI(base_url=url, api_key=os.environ.get("OPENAI_API_KEY", "unused"), timeout=timeout_s)
    out = []
    try:
        for task in tasks:
            reply = client.with_options(max_retries=2).chat.completions.create(
                model=model,
                messages=messages_of(task),  # type: ignore[arg-type]
                n=k,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=contract.length.max_response_tokens,
                seed=seed,
            )
            choices = getattr(reply, "choices", None)
            if not isinstance(choices, list):
                shown = str(reply)[:80]
                raise CannotRun(f"{url} answered something that is not an OpenAI chat completion: {shown!r}")
            if len(choices) != k:
                got = len(choices) if isinstance(choices, list) else "no"
                raise CannotRun(f"{url} answered {got} choices for task {task.get('id')}, {k} were asked (n={k})")
            texts = [str(c.message.content or "") for c in choices]
            tokens = getattr(getattr(reply, "usage", None), "completion_tokens", None) or 0
            out.append((task, texts, tokens // k))
    except Exception as error:
        raise said(url, timeout_s, error) from None
    return out


def said(url: str, timeout_s: float, error: Exception) -> Exception:
    """What an endpoint did, as the error the command stops with (CannotRun: exit 3); an error
    that is not the endpoint's is returned as it is."""
    import openai

    if isinstance(error, CannotRun):
        return error
    if isinstance(error, openai.APITimeoutError):
        return CannotRun(f"{url} did not answer within {timeout_s:g} s")
    if isinstance(error, openai.APIConnectionError):
        return CannotRun(f"{url} cannot be reached ({error.__cause__ or error})")
    if isinstance(error, openai.APIStatusError):
        return CannotRun(f"{url} answered HTTP {error.status_code}: {str(error.message)[:200]}")
    if isinstance(error, (openai.APIError, ValueError, AttributeError, IndexError, TypeError)):
        return CannotRun(f"{url} answered something that is not an OpenAI chat completion ({error})")
    return error


def evaluate_endpoint(
    contract: Contract, folder: Path, spec: str, tasks: list[dict[str, Any]], k: int, timeout_s: float, seed: int
) -> dict[str, dict[str, Any]]:
    """The endpoint's answers judged by the contract's verifier, in `evaluate`'s item form."""
    from rlvr_cli.env.scoring import weighted_reward
    from rlvr_cli.env.verifier_pool import VerifierPool

    got = answers(contract, spec, tasks, k, timeout_s, seed)
    out: dict[str, dict[str, Any]] = {}
    with VerifierPool.for_contract(contract, folder) as pool:
        verdicts = pool.verify_many([(task, text) for task, texts, _ in got for text in texts])
    at = 0
    for task, texts, tokens in got:
        item = out.setdefault(str(task["id"]), {"task": task, "rewards": [], "components": [], "statuses": []})
        item.update(lengths=[tokens] * len(texts), generated=[tokens] * len(texts), verify_seconds=[])
        for _ in texts:
            verdict, seconds = verdicts[at]
            at += 1
            valid = verdict.valid and all(c.name in verdict.components for c in contract.objective.reward.components)
            item["rewards"].append(weighted_reward(contract, verdict) if valid else None)
            item["components"].append(dict(verdict.components) if valid else None)
            item["statuses"].append(verdict.status)
            item["verify_seconds"].append(seconds)
    return out
