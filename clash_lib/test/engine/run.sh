#!/bin/sh
# Engine, dense and conv tests against reference.py (see its docstring).
# Usage: clash_lib/test/engine/run.sh [WORKDIR]   (default /tmp/k2c-engine-test)
# Builds outside the repository (WORKDIR), runs every case in the Clash
# simulation, and checks every output value and every cycle.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
LIB=$(cd "$HERE/../.." && pwd)
WORK=${1:-/tmp/k2c-engine-test}
rm -rf "$WORK/cases"
mkdir -p "$WORK/cases" "$WORK/build"
python3 "$HERE/reference.py" gen "$WORK/cases"
ghc -O1 -j2 -v0 -i"$HERE" -i"$LIB" -i"$WORK/cases" -outputdir "$WORK/build" \
    -o "$WORK/engine-test" "$WORK/cases/Main.hs"
"$WORK/engine-test"
python3 "$HERE/reference.py" check "$WORK/cases"

# HDL: ConvTop.hs (the case "convtop") through clash --verilog, verilator
# --lint-only, and a Verilator run whose trace must equal the simulation's.
HDL="$WORK/convtop"
rm -rf "$HDL"; mkdir -p "$HDL"
cp "$WORK/cases/convtop.mem" "$HDL/convtop.mem"
(cd "$HDL" && clash -i"$HERE" -i"$LIB" ConvTop --verilog -fclash-hdldir hdl \
   -outputdir build -fclash-no-cache -v0 >/dev/null)
V="$HDL/hdl/ConvTop.topEntity"
verilator --lint-only -Wno-WIDTH --top-module convtop "$V"/*.v
(cd "$V" && verilator --cc --exe --build -Wno-WIDTH -Wno-fatal --top-module convtop \
   -Mdir "$HDL/obj" -MAKEFLAGS "OPT_FAST=-O1" ./*.v "$HERE/convtop_tb.cpp" >/dev/null)
(cd "$V" && "$HDL/obj/Vconvtop" "$WORK/cases/convtop.in") > "$HDL/verilator.out"
grep -E '^(A|O) ' "$WORK/cases/convtop.out" > "$HDL/clash.out"
if cmp -s "$HDL/clash.out" "$HDL/verilator.out"; then
  echo "convtop: Verilator trace equals the Clash simulation ($(grep -c '^O' "$HDL/verilator.out") outputs)"
else
  echo "convtop: Verilator trace differs from the Clash simulation"; exit 1
fi

# HDL: the hand-written example (clash_lib/example) through clash --verilog,
# verilator --lint-only, and a Verilator run that must print expected.txt.
EX="$WORK/example"
rm -rf "$EX"; mkdir -p "$EX"
(cd "$LIB/example" && clash -i.. Top --verilog -fclash-hdldir "$EX/hdl" \
   -outputdir "$EX/build" -fclash-no-cache -v0 >/dev/null)
V="$EX/hdl/Top.topEntity"
verilator --lint-only -Wno-WIDTH --top-module network "$V"/*.v
(cd "$V" && verilator --cc --exe --build -Wno-WIDTH -Wno-fatal --top-module network \
   -Mdir "$EX/obj" -MAKEFLAGS "OPT_FAST=-O1" ./*.v "$HERE/example_tb.cpp" >/dev/null)
(cd "$V" && "$EX/obj/Vnetwork") < "$LIB/example/input.txt" > "$EX/verilator.out"
if cmp -s "$EX/verilator.out" "$LIB/example/expected.txt"; then
  echo "example: Verilator output equals expected.txt"
else
  echo "example: Verilator output differs from expected.txt"; exit 1
fi
