"""`objective.clip`: the trust region of the ratio ρ = π_θ / π_old — PPO's clip, CISPO's clipped
weight, SAPO's soft gate or VESPO's gamma weight (docs/contract.md, "Objective"); train/objective.py `surrogate`
computes each."""

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field

from rlvr_cli.contract.sections import Section

#: what each kind reads of the section (kind absent: ppo)
READS = {"ppo": ("low", "high"), "cispo": ("low", "high"), "sapo": ("temperature",), "vespo": ("gamma",)}


class Temperature(Section):
    """SAPO's gate temperatures: the larger τ, the faster the gate closes as ρ leaves 1."""

    positive: float = Field(gt=0, description="τ for the tokens of answers whose advantage is > 0.")
    negative: float = Field(gt=0, description="τ for the others (advantage ≤ 0); SAPO takes it above positive.")


class GammaShape(Section):
    shape: float = Field(gt=0, description="k: φ grows as w^k below w = 1.")
    rate: float = Field(gt=0, description="λ: φ falls as e^(−λw) above it.")


class Gamma(Section):
    """VESPO's weight φ(w) = e^λ · w^k · e^(−λw) of an answer's likelihood ratio w (φ(1) = 1)."""

    positive: GammaShape = Field(description="k and λ for answers whose advantage is ≥ 0.")
    negative: GammaShape = Field(description="k and λ for the others (advantage < 0).")


class Clip(Section):
    low: float | None = Field(
        None,
        description="Ratio kept above 1 - low; in (0, 1) (cispo: (0, 1], 1 is no lower bound). Required unless kind "
        "is sapo or vespo.",
    )
    high: float | None = Field(
        None,
        description="Ratio kept below 1 + high; in (0, 1), > low is clip-higher (cispo: any > 0). Required unless "
        "kind is sapo or vespo.",
    )
    dual: float | None = Field(None, gt=1, description="Dual-clip constant c > 1 (ppo only).")
    kind: Literal["ppo", "cispo", "sapo", "vespo"] | None = Field(
        None,
        description="ppo (absent: ppo): max(−A·ρ, −A·clip(ρ)) per token. cispo (MiniMax-M1's CISPO): −sg(clip(ρ))·A·"
        "log π_θ — the clipped ratio weighs the log-likelihood's gradient, no token loses its gradient (per-token "
        "ratio only). sapo (Qwen's SAPO): −A·σ(τ(ρ − 1))·4/τ — a soft gate in place of the clip: the gradient is "
        "A·∇ρ at ρ = 1 and fades smoothly as ρ leaves it (no low, high or dual; temperature required)."
        " vespo (VESPO): −sg(φ(w))·A·log π_θ, w the answer's likelihood ratio (ratio.level sequence_sum), φ "
        "its gamma weight (gamma required; no low, high or dual).",
    )
    temperature: Temperature | None = Field(
        None, description="sapo's gate temperatures τ, by the sign of the advantage. Required by sapo, read by it only."
    )
    gamma: Gamma | None = Field(
        None, description="vespo's weight φ of w, by the sign of the advantage. Required by vespo, read by it only."
    )


_OWNER = {"temperature": "sapo", "gamma": "vespo"}
_LOSS = {"cispo": "−sg(clip(ρ))·A·log π_θ", "sapo": "−A·σ(τ(ρ − 1))·4/τ", "vespo": "−sg(φ(w))·A·log π_θ"}


def findings(clip: Clip, ratio: Any) -> Iterator[tuple[tuple[str, ...], str]]:
    """(path, message) of each RLV003 of `objective.clip`: keys its kind does not read, keys it
    needs, and what it cannot be combined with."""
    kind = clip.kind or "ppo"
    where = ("objective", "clip")
    for key in ("low", "high", "temperature", "gamma"):
        given = getattr(clip, key) is not None
        if given and key not in READS[kind]:
            yield (
                (*where, key),
                f"{kind} does not read {key}: "
                + (f"{kind} has no clip range" if key in ("low", "high") else f"only {_OWNER[key]} reads it"),
            )
        elif not given and key in READS[kind]:
            when = f"when kind is {kind}" if key in _OWNER else "unless kind is sapo or vespo"
            yield where, f"missing required key '{key}' (required {when})"
    if kind != "ppo" and clip.dual is not None:
        yield (*where, "dual"), f"{kind} has no dual clip: its loss is {_LOSS[kind]}"
    if kind == "vespo" and (ratio is None or ratio.level != "sequence_sum"):
        yield (
            ("objective", "ratio") if ratio is None else ("objective", "ratio", "level"),
            "vespo weighs each answer by φ of its likelihood ratio: write ratio.level sequence_sum",
        )
    if kind == "cispo" and ratio is not None and ratio.level != "token":
        yield ("objective", "ratio", "level"), f"{ratio.level}: cispo weighs each token by its own ratio"
