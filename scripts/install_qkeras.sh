#!/usr/bin/env bash
# Make `import qkeras` give QKeras (qkeras-v3, the Keras 3 port) in a venv that has hgq2,
# without touching TensorFlow or Keras. Called by setup.sh; usage: install_qkeras.sh VENV.
#
# Why not a plain `pip install qkeras-v3`: its declared dependencies pull the full
# `tensorflow` next to `tensorflow-cpu`, plus tensorflow-model-optimization (Keras 2) and
# ruff; and hgq2 ships its own `qkeras` package (a compatibility layer for HGQ2 layers),
# into which qkeras-v3's files would be mixed: `qkeras/qlayers.py` next to hgq2's
# `qkeras/qlayers/` package, which Python prefers, hence the
# `ImportError: get_auto_range_constraint_initializer`. So qkeras-v3 and the one
# module it needs that the venv lacks (networkx, for qkeras.qtools) go, without their
# declared dependencies, into a directory of their own, VENV/qkeras-v3, put ahead of
# site-packages by a .pth file. Idempotent and quiet; fails loudly.
set -euo pipefail
venv="$(cd "${1:?usage: install_qkeras.sh VENV}" && pwd)"
QKERAS=qkeras-v3==1.2.1
NETWORKX=networkx==3.4.2
target="$venv/qkeras-v3"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
pth="$site/keras2clash-qkeras.pth"
changed=0
if [ ! -d "$target/qkeras_v3-1.2.1.dist-info" ] || [ ! -d "$target/networkx" ]; then
  echo "setup: installing $QKERAS (without its declared dependencies) into $target"
  log="$venv/qkeras-install.log"
  rm -rf "$target.tmp"
  if ! "$venv/bin/pip" install --no-deps --no-compile --target "$target.tmp" "$QKERAS" "$NETWORKX" >"$log" 2>&1; then
    tail -30 "$log"; echo "setup: installing $QKERAS failed (full log: $log)" >&2; exit 1
  fi
  # qkeras-v3's wheel also ships top-level tests/, examples/ and docs/: not importable modules
  rm -rf "$target.tmp/tests" "$target.tmp/examples" "$target.tmp/docs" "$target.tmp/bin"
  rm -rf "$target"; mv "$target.tmp" "$target"
  changed=1
fi
# One line, run by `site` at start-up: the directory goes just before site-packages, so
# `import qkeras` finds QKeras rather than hgq2's compatibility package.
line="import sys; p = '$target'; p in sys.path or sys.path.insert(next((i for i, e in enumerate(sys.path) if e.rstrip('/').endswith('site-packages')), len(sys.path)), p)"
if [ ! -f "$pth" ] || [ "$(cat "$pth")" != "$line" ]; then
  printf '%s\n' "$line" > "$pth.tmp" && mv "$pth.tmp" "$pth"
  changed=1
fi
[ "$changed" = 1 ] || exit 0  # checked when installed (importing TensorFlow takes seconds)
check="$venv/qkeras-check.log"
if ! "$venv/bin/python" -c 'import qkeras.qlayers, qkeras.quantizers, tensorflow, keras; print(qkeras.__file__)' >"$check" 2>&1; then
  tail -5 "$check"; echo "setup: 'import qkeras' fails after installing $QKERAS" >&2; exit 1
fi
case "$(tail -1 "$check")" in
  "$target/"*) ;;
  *) tail -5 "$check"; echo "setup: 'import qkeras' does not find $target" >&2; exit 1 ;;
esac
