"""One step's kept samples as the update's forward passes: one rectangle (or packed rows), the
micro-batches it is cut into, and the log-probs and entropies of each under the policy — the same
way for every process of a sharded policy (empty rounds keep them in step)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr_cli.engine.forward import Batch, make_batch, token_logprobs
from rlvr_cli.engine.packed import PackedBatch, packed_logprobs
from rlvr_cli.engine.precision import autocast
from rlvr_cli.engine.prefix import pays, prefix_logprobs, why_not_prefix
from rlvr_cli.engine.shared import shared_prompt_logprobs, shares_prompts
from rlvr_cli.env.sample import Sample
from rlvr_cli.train import distributed as dist
from rlvr_cli.train.setup import Setup
from rlvr_cli.train.sharding import Lockstep, is_sharded, whole_for_pass


@dataclass
class Forward:
    """One rectangle for all kept samples, and the row indices of each micro-batch. With
    `length.packing` each micro-batch's sequences run packed (engine/packed.py) instead."""

    batch: Batch
    parts: list[torch.Tensor]
    samples: list[Sample] | None = None  # kept for packing or right padding; None: the left-padded rectangle
    pad_id: int = 0
    packing: bool = False  # several sequences per row; otherwise one per row, padded on the right
    compute: torch.dtype | None = None  # mixed precision: the autocast dtype of every forward
    lockstep: Lockstep | None = None  # a sharded policy: empty rounds up to `rounds` (train/sharding.py)
    rounds: int = 0  # micro-batches of the process that has the most
    parallel: Any = None  # sharded: the contract's `parallel` (what stays gathered or whole during a pass)

    @classmethod
    def of(cls, setup: Setup, samples: list[Sample]) -> Forward:
        fwd = cls._of(setup, samples)
        if is_sharded(setup.policy):  # every process runs as many forwards as the busiest one
            fwd.lockstep = Lockstep(setup.renderer.pad_id, setup.device)
            fwd.rounds = int(dist.maximum(float(len(fwd.parts))))
            fwd.parallel = setup.contract.hyperparameters.strategy
        return fwd

    @classmethod
    def _of(cls, setup: Setup, samples: list[Sample]) -> Forward:
        if not samples:  # a rank with nothing to train this step still joins every collective
            empty = Batch(
                torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, 1, dtype=torch.long), 1, torch.zeros(0, 0)
            )
            return cls(empty, [])
        batch = make_batch(
            [s.prompt_ids for s in samples],
            [s.response_ids for s in samples],
            [s.mask for s in samples],
            setup.renderer.pad_id,
        ).to(setup.device)
        size = setup.contract.hyperparameters.micro_batch_sequences or len(samples)
        length = setup.contract.length
        packing = bool(length.packing and length.packing.enabled)
        by_row = samples if packing or length.padding_side == "right" else None
        parts = list(torch.arange(len(samples)).split(size))
        return cls(batch, parts, by_row, setup.renderer.pad_id, packing, setup.compute)

    def rows(self, index: torch.Tensor) -> Batch:
        b = self.batch
        return Batch(b.input_ids[index], b.attention_mask[index], b.prompt_width, b.response_mask[index])

    def forward(
        self, model: object, part: torch.Tensor, temperature: float, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Log-probs `(b, T)` (and entropy) of one micro-batch's responses, and their loss mask."""
        with autocast(self.compute, self.batch.input_ids.device.type):
            return self._forward(model, part, temperature, with_entropy)

    def _forward(
        self, model: object, part: torch.Tensor, temperature: float, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        mb = self.rows(part)
        if self.samples is None:
            forward = token_logprobs
            if shares_prompts(model, mb):
                forward = shared_prompt_logprobs
            elif why_not_prefix(model) is None and pays(mb):  # sharded, checkpointing, GPT-2: one row per group
                forward = prefix_logprobs
            logp, entropy = forward(model, mb, temperature, with_entropy=with_entropy)
            return logp, entropy, mb.response_mask
        chosen = [self.samples[i] for i in part.tolist()]
        width = self.batch.response_mask.shape[1]
        packed = PackedBatch.of(
            [s.prompt_ids for s in chosen],
            [s.response_ids for s in chosen],
            [s.mask for s in chosen],
            self.pad_id,
            width,
            not self.packing,
        )
        logp, entropy = packed_logprobs(model, packed, temperature, with_entropy=with_entropy)
        return logp, entropy, mb.response_mask

    def logprobs(self, model: object, temperature: float) -> torch.Tensor:
        """Every micro-batch's log-probs `(B, T)` under `model`, no gradient."""
        rows = [logp for logp, _ in self._every_part(model, temperature, with_entropy=False)]
        return torch.cat(rows) if rows else torch.zeros(0, self.batch.response_mask.shape[1])  # (B, T)

    def entropies(self, model: object, temperature: float) -> list[torch.Tensor]:
        """Each micro-batch's per-token entropies `(b, T)` under `model`, no gradient."""
        return [entropy for _, entropy in self._every_part(model, temperature, with_entropy=True)]  # type: ignore[misc]

    @torch.no_grad()
    def _every_part(self, model: object, temperature: float, with_entropy: bool) -> list[tuple]:
        """(log-probs, entropy or None) of each micro-batch, and the empty rounds of a sharded policy."""
        after = self.parallel is None or self.parallel.reshard_after_forward
        with whole_for_pass(model, after):  # sharded: one gather a unit for every micro-batch
            rows = [self.forward(model, part, temperature, with_entropy)[:2] for part in self.parts]
            for _ in range(self.empty_rounds):
                with autocast(self.compute, self.batch.input_ids.device.type):
                    self.lockstep.forward(model)  # type: ignore[union-attr]
        return rows

    @property
    def empty_rounds(self) -> int:
        return max(self.rounds - len(self.parts), 0) if self.lockstep is not None else 0


def forward_description(setup: Setup) -> str:
    """What computes the update's log-probs (the plan says it)."""
    from rlvr_cli.engine.shared import describe

    length = setup.contract.length
    return describe(setup.policy, length.padding_side, bool(length.packing and length.packing.enabled))
