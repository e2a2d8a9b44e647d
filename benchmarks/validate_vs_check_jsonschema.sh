#!/usr/bin/env bash
# rlvr validate vs check-jsonschema on the same contract, side by side (hyperfine).
# Usage: bash benchmarks/validate_vs_check_jsonschema.sh [CONTRACT]
# Needs: make install (the venv), and hyperfine (apt-get install hyperfine).
set -euo pipefail
cd "$(dirname "$0")/.."
contract=${1:-contracts/grpo-cpu.rlvr.yaml}
bin=.venv/bin
hyperfine --warmup 5 --runs 40 --shell=none --export-json build/bench-validate.json \
  "$bin/rlvr validate $contract" \
  "$bin/check-jsonschema --schemafile schemas/contract.schema.json $contract"
