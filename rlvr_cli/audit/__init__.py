"""Audits: the verifier before training (control group, isolation), rollouts and gates after it."""
