#!/usr/bin/env bash
# Everything in test/stream, build products under $OUT (default /tmp/k2c-stream):
#  1. randomised Clash-simulation tests of Window, Pad, Pool, Collect (TestStream.hs);
#  2. clash --verilog of the small tops (Tops.hs) and verilator --lint-only -Wno-WIDTH;
#  3. cycle-exact replay of the Clash simulation on the Verilog in Icarus (Cosim.hs).
# Run from anywhere; exits non-zero on the first failure.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lib="$here/../.."
OUT="${OUT:-/tmp/k2c-stream}"
rm -rf "$OUT"; mkdir -p "$OUT"/test "$OUT"/tops "$OUT"/cosim
cd "$here"

echo "== 1. simulation tests"
ghc -O2 -i"$lib" -outputdir "$OUT"/test -o "$OUT"/test/run TestStream.hs > "$OUT"/test/build.log
"$OUT"/test/run

echo "== 2. clash --verilog and verilator lint"
(cd "$lib" && clash -i. -itest/stream test/stream/Tops.hs --verilog -fclash-no-cache \
   -fclash-hdldir "$OUT"/tops/hdl -outputdir "$OUT"/tops/obj > "$OUT"/tops/clash.log 2>&1)
# -Wno-UNOPTFLAT: a window generator's valid follows its input's valid, and Clash packs a
# stage's (data, ready) pair into one vector, so Verilator (whole vectors) sees a circle
# through a Pad and its Window that no bit follows; yosys checks bit by bit instead.
for d in "$OUT"/tops/hdl/Tops.*; do
  (cd "$d" && verilator --lint-only -Wno-WIDTH -Wno-UNOPTFLAT ./*.v)
  top="$(basename "$d"/*.sdc .sdc)"  # Clash writes one constraints file, named after the top
  (cd "$d" && yosys -q -p "read_verilog -sv ./*.v; hierarchy -top $top; proc; flatten; check -assert")
  echo "lint ok, no combinational loop: $(basename "$d")"
done

echo "== 3. Icarus replay of the Clash simulation"
ghc -O2 -i"$lib" -outputdir "$OUT"/cosim/obj -o "$OUT"/cosim/gen Cosim.hs > "$OUT"/cosim/build.log
"$OUT"/cosim/gen "$OUT"/cosim
for tb in "$OUT"/cosim/tb_*.v; do
  top="$(basename "$tb" .v)"; top="${top#tb_}"
  verilog="$(grep -l "^module $top\b" "$OUT"/tops/hdl/Tops.*/*.v)"
  (cd "$OUT"/cosim && iverilog -o "sim_$top" "$tb" "$verilog" && vvp -n "sim_$top") | tee "$OUT/cosim/$top.log"
  grep -q " 0 mismatches" "$OUT/cosim/$top.log"
done
echo "== all stream checks passed"
