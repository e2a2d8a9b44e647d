"""vLLM as the rollout engine (`hyperparameters.sampling.engine: vllm`), colocated with the
trainer on one GPU: the `vllm` extra (`pip install 'rlvr-cli[vllm]'`).

One engine per run, held by its `PolicyEngine` (train/setup.py builds it once). The engine
starts from the policy's own folder, shares the GPU with the trainer
(`gpu_memory_utilization`, default 0.3 — `RLVR_VLLM_GPU_MEMORY` overrides it), and after
each optimizer step receives the new weights straight from the trainer's parameters (no
disk round trip). Sampling parameters and stop tokens are the contract's; per-token
log-probs are requested in vLLM's `processed_logprobs` mode (after temperature, as the
trainer's forward computes them). Prompts go in as token ids, so the chat template the
trainer rendered is the one vLLM sees.
"""

from __future__ import annotations

import os
from typing import Any

from rlvr_cli.engine.adapted import is_adapted, merged_state
from rlvr_cli.engine.types import Generation
from rlvr_cli.errors import UsageProblem


class VllmEngine:
    name = "vllm"
    holds_weights = True  # in its own GPU memory: given the trainer's at every sync, never lent them

    def __init__(self, model: Any) -> None:
        try:
            import torch
            import vllm
        except ImportError:
            raise UsageProblem("sampling.engine vllm needs the vllm extra: pip install 'rlvr-cli[vllm]'") from None
        if not torch.cuda.is_available():
            raise UsageProblem("sampling.engine vllm needs a GPU; use engine lean on CPU")
        self.vllm, self.model = vllm, model
        # in-process engine core: its model is reachable for in-memory weight updates
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.llm = vllm.LLM(
            model=model.name_or_path,
            dtype=dtype,
            gpu_memory_utilization=float(os.environ.get("RLVR_VLLM_GPU_MEMORY", "0.3")),
            enforce_eager=True,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
        )
        if is_adapted(model):  # it loaded the base from disk: the adapter (a starting one, too) goes in now
            self.load_weights(model)

    def sample(self, prompts: list[list[int]], params: Any, seed: int) -> list[Generation]:
        greedy = params.temperature == 0
        requests, settings = [], []
        for i, prompt in enumerate(prompts):
            requests.append({"prompt_token_ids": list(prompt)})
            settings.append(
                self.vllm.SamplingParams(
                    n=1,
                    temperature=0.0 if greedy else params.temperature,
                    top_p=1.0 if greedy else params.top_p,
                    top_k=-1 if greedy or not params.top_k else params.top_k,
                    max_tokens=params.max_new_tokens,
                    stop_token_ids=list(params.stop_ids),
                    skip_special_tokens=False,
                    logprobs=0,
                    seed=seed * 1_000_003 + i,  # per row, so a row's draw does not depend on its neighbours
                )
            )
        outputs = self.llm.generate(requests, settings, use_tqdm=False)
        return [self._generation(out.outputs[0], params, seed) for out in outputs]

    @staticmethod
    def _generation(completion: Any, params: Any, seed: int) -> Generation:
        ids = list(completion.token_ids)
        logps = [next(iter(step.values())).logprob if step else 0.0 for step in (completion.logprobs or [])]
        for position, token in enumerate(ids):  # through the first stop token
            if token in params.stop_ids:
                ids, logps = ids[: position + 1], logps[: position + 1]
                return Generation(ids, [1] * len(ids), "stop", seed, logps)
        return Generation(ids, [1] * len(ids), "length", seed, logps)

    def load_weights(self, model: Any) -> None:
        """The trainer's parameters into the engine's model, in GPU memory."""
        worker = self.llm.llm_engine.model_executor.driver_worker
        runner = getattr(worker, "model_runner", None) or worker.worker.model_runner
        runner.model.load_weights(merged_state(model).items())  # an adapter merged in, by the base's names
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights

    def describe(self) -> str:
        from importlib.metadata import version

        return f"vllm {version('vllm')} (colocated)"
