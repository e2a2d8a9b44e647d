"""Environments shipped with rlvr: toy arithmetic (single turn)."""
