"""Write tests/contracts/invalid/*.rlvr.yaml and their expected diagnostics from base.yaml.

Each example is one small edit of the clean base. Its expected codes and lines are worked
out here, from where the edit lands in the text, not by running rlvr, so the test that
compares them with `rlvr validate` can fail. Run `python tests/contracts/make_examples.py`
after changing an example and review the diff.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
BASE = (HERE / "base.yaml").read_text(encoding="utf-8")

# name: (edits [(old, new)], expected [(code, severity, text on the line it points at)])
EXAMPLES: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str, str]]]] = {
    "RLV001-duplicate-key": (
        [("  seed: 0\n", "  seed: 0\n  seed: 1\n")],
        [("RLV001", "error", "seed: 1")],
    ),
    "RLV001-tab-indent": (
        [("  max_steps: 10\n", "\tmax_steps: 10\n")],
        [("RLV001", "error", "\tmax_steps: 10")],
    ),
    "RLV001-tag-on-a-sequence": (  # nothing runs here, but another loader of the same file would run it
        [("stop_tokens: [", "stop_tokens: !!python/object/apply:os.system [")],
        [("RLV001", "error", "stop_tokens: !!python")],
    ),
    "RLV002-unknown-key": (
        [("  aggregation: token_mean\n", "  aggregation: token_mean\n  entropy_coeff: 0.01\n")],
        [("RLV002", "error", "entropy_coeff")],
    ),
    "RLV002-misplaced-key": (
        [("  aggregation: token_mean\n", "  aggregation: token_mean\n  estimator: k3\n")],
        [("RLV002", "error", "  estimator: k3")],
    ),
    "RLV003-wrong-type": (
        [("group_size: 4", "group_size: four")],
        [("RLV003", "error", "group_size: four")],
    ),
    "RLV003-yaml11-boolean": (
        [("semantic_clusters: true", "semantic_clusters: yes")],
        [("RLV003", "error", "semantic_clusters: yes")],
    ),
    "RLV003-missing-key": (
        [("  aggregation: token_mean\n", "")],
        [("RLV003", "error", "objective:")],
    ),
    "RLV003-missing-when-kl-on": (
        [("estimator: k3, ", "")],
        [("RLV003", "error", "kl: {coef")],
    ),
    "RLV003-out-of-range": (
        [("lr: 1.0e-5", "lr: -1.0e-5")],
        [("RLV003", "error", "lr: -1.0e-5")],
    ),
    "RLV101-kl-without-reference": (
        [("reference: {path: ref-model}", 'reference: {none: "no anchor"}')],
        [("RLV101", "error", "kl: {coef"), ("RLV604", "error", "metric: kl,")],
    ),
    "RLV102-reference-same-files": (
        [("reference: {path: ref-model}", "reference: {path: ./model}")],
        [("RLV102", "warning", "reference: {path: ./model}")],
    ),
    "RLV103-unpinned-hub-id": (
        [("policy: {path: model}", "policy: {id: org/model, revision: main}")],
        [("RLV103", "warning", "policy: {id")],
    ),
    "RLV201-scale-without-std": (
        [("std: population, ", "")],
        [("RLV201", "error", "advantage:")],
    ),
    "RLV003-sapo-with-a-clip-range": (  # sapo's soft gate replaces the clip: low and high would change nothing
        [("  clip: {low: 0.2, high: 0.28}\n", "  clip:\n    kind: sapo\n    low: 0.2\n    high: 0.28\n")],
        [("RLV003", "error", "  clip:\n"), ("RLV003", "error", "low: 0.2"), ("RLV003", "error", "high: 0.28")],
    ),
    "RLV202-clip-high-below-low": (
        [("high: 0.28", "high: 0.1")],
        [("RLV202", "error", "high: 0.1")],
    ),
    "RLV202-clip-out-of-range": (
        [("low: 0.2", "low: 1.5")],
        [("RLV202", "error", "low: 1.5"), ("RLV202", "error", "low: 1.5")],
    ),
    "RLV203-session-reward-single-turn": (
        [("unit: response", "unit: session")],
        [("RLV203", "error", "unit: session")],
    ),
    "RLV204-reference-unused": (
        [
            ("coef: 0.001", "coef: 0.0"),
            ('    - {name: kl, metric: kl, when: "> 0.5", window: 3, action: pause, owner: oncall}\n', ""),
        ],
        [("RLV204", "warning", "reference: {path")],
    ),
    "RLV301-group-of-one": (
        [("group_size: 4", "group_size: 1"), ("prompts_per_step: 4", "prompts_per_step: 8")],
        [("RLV301", "error", "group_size: 1")],
    ),
    "RLV302-micro-batch-indivisible": (
        [("micro_batch_sequences: 8", "micro_batch_sequences: 5")],
        [("RLV302", "error", "micro_batch_sequences: 5")],
    ),
    "RLV303-policy-lag-over-limit": (
        [("updates_per_batch: 1", "updates_per_batch: 3")],
        [("RLV303", "error", "updates_per_batch: 3")],
    ),
    "RLV306-stale-samples-uncorrected": (
        [
            ("max_policy_lag: 0", "max_policy_lag: 1\n  sample_ahead: true"),
            (
                "  aggregation: token_mean\n",
                "  aggregation: token_mean\n  ratio: {level: token, denominator: trainer_recomputed}\n",
            ),
        ],
        [("RLV306", "warning", "ratio: {level: token")],
    ),
    "RLV401-hints-without-leak-check": (
        [
            (
                "hints: {used: false}",
                "hints: {used: true, source: data/hints.jsonl, field: hint, placement: prompt, share: 0.5, "
                "until_step: 10, advantage: subgroup}",
            )
        ],
        [("RLV401", "error", "hints: {used: true")],
    ),
    "RLV402-dedup-after-split": (
        [("stage: before_split", "stage: after_split")],
        [("RLV402", "error", "stage: after_split")],
    ),
    "RLV403-holdout-is-train": (
        [("holdout: {path: data/holdout.jsonl}", "holdout: {path: data/./train.jsonl}")],
        [("RLV403", "error", "holdout: {path: data/./train.jsonl}")],
    ),
    "RLV404-source-without-license": (
        [("license: MIT, ", "")],
        [("RLV404", "warning", "- {name: src")],
    ),
    "RLV501-penalize-without-penalty": (
        [("on_truncated: exclude", "on_truncated: penalize")],
        [("RLV501", "error", "on_truncated: penalize")],
    ),
    "RLV502-dynamic-sampling-without-log-by": (
        [
            (
                '  stop_tokens: ["<|im_end|>"]\n',
                '  stop_tokens: ["<|im_end|>"]\n  dynamic_sampling: {drop_uniform_groups: true, max_rounds: 3}\n',
            )
        ],
        [("RLV502", "error", "dynamic_sampling:")],
    ),
    "RLV505-uniform-on-that-changes-nothing": (
        [
            (
                '  stop_tokens: ["<|im_end|>"]\n',
                '  stop_tokens: ["<|im_end|>"]\n  dynamic_sampling:\n    drop_uniform_groups: true\n'
                "    log_by: [difficulty]\n    uniform_on: verifier_reward\n",
            )
        ],
        [("RLV505", "error", "uniform_on: verifier_reward")],
    ),
    "RLV506-uniform-on-unstated-beside-shaping": (
        [
            (
                '  stop_tokens: ["<|im_end|>"]\n',
                '  stop_tokens: ["<|im_end|>"]\n  overlong_penalty: {buffer_tokens: 256, factor: 1.0}\n'
                "  dynamic_sampling: {drop_uniform_groups: true, log_by: [difficulty]}\n",
            )
        ],
        [("RLV506", "warning", "dynamic_sampling:")],
    ),
    "RLV503-packing-without-isolation": (
        [
            (
                '  stop_tokens: ["<|im_end|>"]\n',
                '  stop_tokens: ["<|im_end|>"]\n  packing: {enabled: true, isolate_episodes: false}\n',
            )
        ],
        [("RLV503", "error", "packing:")],
    ),
    "RLV010-value-not-run": (
        [
            (
                'verifier: {version: "1.0"}',
                'verifier: {version: "1.0", container: "verifier@sha256:0000000000000000000000000000000000000000000000000000000000000000"}',
            )
        ],
        [("RLV010", "error", "container:")],
    ),
    "RLV205-credit-for-one-response": (
        [("unit: response", "unit: response\n    credit: all_sessions")],
        [("RLV205", "error", "credit: all_sessions")],
    ),
    "RLV206-set-without-size": (
        [("unit: response", "unit: set")],
        [("RLV206", "error", "  reward:")],
    ),
    "RLV207-leave-one-out-std-over-the-group-mean": (
        [("scale: group_std", "scale: leave_one_out_std")],
        [("RLV207", "error", "advantage:")],
    ),
    "RLV601-rule-without-owner": (
        [('when: "< 0.1", window: 3, action: pause, owner: oncall}', 'when: "< 0.1", window: 3, action: pause}')],
        [("RLV601", "error", "{name: entropy")],
    ),
    "RLV602-nonfinite-not-aborting": (
        [('when: "> 0", window: 1, action: abort', 'when: "> 0", window: 1, action: pause')],
        [("RLV602", "error", "  rules:")],
    ),
    "RLV603-entropy-unwatched": (
        [('    - {name: entropy, metric: entropy, when: "< 0.1", window: 3, action: pause, owner: oncall}\n', "")],
        [("RLV603", "warning", "  rules:")],
    ),
    "RLV604-unknown-metric": (
        [("metric: entropy,", "metric: entropyy,")],
        [("RLV604", "error", "metric: entropyy"), ("RLV603", "warning", "  rules:")],
    ),
    "RLV604-holdout-metric-without-holdout": (
        [
            ("  holdout_every: 5\n", ""),
            (
                "  rules:\n",
                '  rules:\n    - {name: hr, metric: holdout_reward, when: "< 0.1", window: 2, action: pause, owner: a}\n',
            ),
        ],
        [("RLV604", "error", "metric: holdout_reward")],
    ),
    "RLV605-reference-answers-without-holdout": (
        [("  holdout_every: 5\n", "  reference_answers: solution\n")],
        [("RLV605", "error", "reference_answers: solution")],
    ),
    "RLV701-checkpoint-without-rng": (
        [("scheduler, rng, sampler", "scheduler, sampler")],
        [("RLV701", "error", "include: [model")],
    ),
    "RLV801-gate-without-threshold": (
        [("split: holdout, min_delta: 0.0, critical", "split: holdout, critical")],
        [("RLV801", "error", "- {name: holdout")],
    ),
    "RLV801-gate-unknown-split": (
        [("split: holdout, min_delta", "split: test, min_delta")],
        [("RLV801", "error", "split: test")],
    ),
    "RLV803-gate-unknown-metric": (
        [("{name: holdout, metric: reward_mean,", "{name: holdout, metric: accuracy,")],
        [("RLV803", "error", "metric: accuracy")],
    ),
    "RLV802-no-critical-gate": (
        [("critical: true", "critical: false")],
        [("RLV802", "warning", "  gates:")],
    ),
    "RLV004-expired-waiver": (
        [
            ("critical: true", "critical: false"),
            (
                "acceptance:\n",
                'waivers:\n  - {rule: RLV802, reason: "pilot run", expires: "2020-01-31"}\nacceptance:\n',
            ),
        ],
        [("RLV004", "warning", 'expires: "2020-01-31"'), ("RLV802", "warning", "  gates:")],
    ),
    "RLV005-unused-waiver": (
        [("acceptance:\n", 'waivers:\n  - {rule: RLV404, reason: "all sources licensed"}\nacceptance:\n')],
        [("RLV005", "warning", "rule: RLV404")],
    ),
    "waived-warning": (
        [
            ("critical: true", "critical: false"),
            ("acceptance:\n", 'waivers:\n  - {rule: RLV802, reason: "smoke test, no release"}\nacceptance:\n'),
        ],
        [("RLV802", "waived", "  gates:")],
    ),
}


def line_of(text: str, needle: str) -> int:
    index = text.index(needle)
    return text.count("\n", 0, index) + 1


def build(name: str) -> tuple[str, str]:
    edits, expected = EXAMPLES[name]
    text = BASE.replace(
        "# The clean base every example under invalid/ is derived from (see make_examples.py).",
        f"# {name}: generated by make_examples.py from base.yaml",
    )
    for old, new in edits:
        assert text.count(old) == 1, (name, old)
        text = text.replace(old, new)
    lines = [f"{code} {line_of(text, needle)} {severity}" for code, severity, needle in expected]
    return text, "\n".join(sorted(lines)) + "\n"


def main() -> None:
    out = HERE / "invalid"
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    for name in EXAMPLES:
        text, expected = build(name)
        (out / f"{name}.rlvr.yaml").write_text(text, encoding="utf-8")
        (out / f"{name}.expected").write_text(expected, encoding="utf-8")


if __name__ == "__main__":
    main()
