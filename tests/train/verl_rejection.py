"""Run by verl's own environment (`.venv-verl`): each case of the JSON file given goes through verl
0.9.1's `rollout_corr_helper.compute_rollout_rejection_mask` with log r = old − engine, as verl's
trainer calls it, and the modified response masks are printed as JSON
(tests/train/test_rejection.py compares them with rlvr's)."""

import json
import sys

import torch
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

with open(sys.argv[1], encoding="utf-8") as fh:
    cases = json.load(fh)
out = []
for c in cases:
    old, rollout, mask = (torch.tensor(c[k], dtype=torch.float64) for k in ("old", "engine", "mask"))
    m, _ = compute_rollout_rejection_mask(old - rollout, mask, rollout_rs=c["rs"], rollout_rs_threshold=c["threshold"])
    out.append(m.tolist())
print(json.dumps(out))
