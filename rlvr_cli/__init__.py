"""rlvr: reinforcement learning with verifiable rewards, run exactly as the contract says."""

__version__ = "0.1.0"
