"""Interop with the peers' configurations: `rlvr import` turns a TRL GRPOConfig or a verl
ppo_trainer config into a contract with every implicit default written out; `rlvr export`
turns a contract into the peer's config that computes the same objective, or refuses with
each choice the peer cannot express. docs/interop.md is the mapping table."""
