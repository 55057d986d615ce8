#!/usr/bin/env bash
# The main job: the digits dense example -> Clash -> Verilog, VHDL, SystemVerilog ->
# Clash simulation of the whole test set -> comparison table (Keras, rounded, golden, sim).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/keras2clash run examples/digits_dense/digits_dense.keras \
  --data examples/digits_dense/test.npz --format "${FORMAT:-1,7,8}" \
  ${PARALLELISM:+--parallelism "$PARALLELISM"} \
  --out build/digits_dense --force \
  --markdown build/digits_dense.md --json build/digits_dense.json "$@"
# The last rung of the ladder: the generated Verilog in Verilator, whole test set, vs golden.
.venv/bin/keras2clash rtlsim build/digits_dense --data examples/digits_dense/test.npz --sim verilator
