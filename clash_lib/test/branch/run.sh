#!/usr/bin/env bash
# Tests of K2C.Fifo, K2C.Branch and K2C.Merge; build products under $OUT
# (default /tmp/k2c-branch). Exits non-zero on the first failure.
#  1. TestBranch.hs: fifo and branches (nested too) against the cycle rules
#     (Reference.hs) under random input gaps and downstream stalls; every
#     Merge function bit-exact against Integer arithmetic.
#  2. clash --verilog of Tops.hs; verilator --lint-only -Wall: no
#     combinational loop (UNOPTFLAT) in the tops, while LoopTop.hs (branches
#     without fifos: a loop on purpose) must get one; average by 4 must have
#     no divider, by 3 one.
#  3. The Clash simulation of the tops replayed cycle by cycle on the Verilog
#     in Icarus and in Verilator (--binary --timing), plus a corrupted expected
#     file that must be caught.
#  4. With --mutants: six copies of the library, each with one rule broken,
#     must each make step 1 fail (a test that cannot fail proves nothing).
# Usage: clash_lib/test/branch/run.sh [--mutants]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lib="$(cd "$here/../.." && pwd)"
OUT="${OUT:-/tmp/k2c-branch}"
rm -rf "$OUT"; mkdir -p "$OUT"/test "$OUT"/tops "$OUT"/loop "$OUT"/cosim
cd "$here"

echo "== 1. simulation tests"
ghc -O1 -i"$lib" -outputdir "$OUT"/test -o "$OUT"/test/run TestBranch.hs > "$OUT"/test/build.log
"$OUT"/test/run

echo "== 2. clash --verilog and verilator lint"
(cd "$lib" && clash -i. -itest/branch test/branch/Tops.hs --verilog -fclash-no-cache \
   -fclash-hdldir "$OUT"/tops/hdl -outputdir "$OUT"/tops/obj > "$OUT"/tops/clash.log 2>&1)
(cd "$lib" && clash -i. -itest/branch test/branch/LoopTop.hs --verilog -fclash-no-cache \
   -fclash-hdldir "$OUT"/loop/hdl -outputdir "$OUT"/loop/obj > "$OUT"/loop/clash.log 2>&1)
loops='UNOPTFLAT|ALWCOMBORDER|Circular combinational'
for d in "$OUT"/tops/hdl/Tops.* "$OUT"/loop/hdl/LoopTop.*; do
  (cd "$d" && verilator --lint-only -Wall -Wno-fatal ./*.v > lint.log 2>&1 || { cat lint.log; exit 1; })
  case "$d" in
    */LoopTop.*)
      grep -Eq "$loops" "$d/lint.log" || { echo "negative control: no loop reported for $d"; exit 1; }
      echo "loop reported, as it must be: $(basename "$d")" ;;
    *)
      if grep -E "$loops" "$d/lint.log"; then echo "combinational loop in $d"; exit 1; fi
      echo "lint ok, no combinational loop: $(basename "$d")" ;;
  esac
done
if grep -q divSigned "$OUT"/tops/hdl/Tops.averageShiftTop/*.v; then
  echo "average by 4 built a divider"; exit 1; fi
grep -q divSigned "$OUT"/tops/hdl/Tops.averageDivideTop/*.v || { echo "average by 3: no divider?"; exit 1; }
echo "average by 4: no divider; by 3: divider"

echo "== 3. Clash simulation replayed on the Verilog (Icarus, Verilator)"
ghc -O1 -i"$lib" -outputdir "$OUT"/cosim/obj -o "$OUT"/cosim/gen Cosim.hs > "$OUT"/cosim/build.log
"$OUT"/cosim/gen "$OUT"/cosim | tee "$OUT"/cosim/beats.txt
cd "$OUT"/cosim
for tb in tb_*.v; do
  top="${tb#tb_}"; top="${top%.v}"
  verilog="$(grep -l "^module $top\b" "$OUT"/tops/hdl/Tops.*/*.v)"
  beats="$(grep "^$top:" beats.txt | awk '{print $2}')"
  iverilog -o "ivl_$top" "$tb" "$verilog"
  verilator --binary --timing -Wno-fatal -Wno-WIDTH -Wno-UNUSEDSIGNAL --top-module tb \
    -Mdir "vl_$top" -MAKEFLAGS "OPT_FAST=-O1" "$tb" "$verilog" > "vl_$top.log" 2>&1
  for sim in "vvp -n ivl_$top" "vl_$top/Vtb"; do
    $sim | grep mismatches | tee "$top.log"
    grep -q " $beats output beats, 0 mismatches" "$top.log" || { echo "FAIL: $sim"; exit 1; }
  done
done
# The replay must be able to fail: flip one data bit of a valid output.
mkdir -p corrupt && cp residual_top.in corrupt/
awk 'BEGIN{done=0} !done && substr($0,1,1)=="1" && NR>50 {sub(/0/,"1",$0); done=1} {print}' \
  residual_top.expect > corrupt/residual_top.expect
cmp -s residual_top.expect corrupt/residual_top.expect && { echo "corruption did nothing"; exit 1; }
(cd corrupt && vvp -n ../ivl_residual_top | grep mismatches) | tee corrupt.log
grep -q " 0 mismatches" corrupt.log && { echo "corrupted expectation not caught"; exit 1; }
echo "corrupted expectation caught"
cd "$here"

if [ "${1:-}" = "--mutants" ]; then
  echo "== 4. mutants (each must make step 1 fail)"
  mutate() {  # name file sed-expression
    local m="$OUT/mut/$1"
    mkdir -p "$m/obj"; cp -r "$lib/K2C" "$m/"
    sed -i "$3" "$m/K2C/$2"
    if cmp -s "$lib/K2C/$2" "$m/K2C/$2"; then echo "mutant $1 did not apply"; exit 1; fi
    ghc -O0 -i"$m" -i"$here" -outputdir "$m/obj" -o "$m/run" "$here/TestBranch.hs" > "$m/build.log"
    if "$m/run" > "$m/run.log" 2>&1; then echo "mutant $1 SURVIVED"; exit 1; fi
    echo "mutant $1 caught: $(grep -c '^FAIL' "$m/run.log") failing cases"
  }
  mutate fifo-ready-depth-1 Fifo.hs 's/readyIn  = (< maxBound) <\$> count/readyIn  = (< maxBound - 1) <$> count/'
  mutate fifo-ready-passthrough Fifo.hs 's/readyIn  = (< maxBound) <\$> count/readyIn  = ((< maxBound) <$> count) .||. readyOut/'
  mutate fork-ungated Branch.hs 's/offer otherReady = mux otherReady input (pure Nothing)/offer _ = input/'
  mutate join-ungated Branch.hs 's/take1  = readyOut .&&. valid2/take1  = readyOut/'
  mutate average-ties-down Merge.hs 's/+ fromInteger (shiftL count (natToNum @f))/+ fromInteger (shiftL count (natToNum @f)) - 1/'
  mutate widen-no-shift Merge.hs 's/shiftL (resize (unSF x)) (natToNum @fo - natToNum @f)/shiftL (resize (unSF x)) 0/'
fi
echo "== all branch checks passed"
