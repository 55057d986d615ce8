"""The Clash blocks' own randomized test benches (clash_lib/test/*), run in CI.

Each script builds its tests outside the repository, checks every value and every cycle
against an independent reference (Python or Haskell), replays the Clash simulation on the
generated Verilog, and exits non-zero on the first difference: pytest only runs them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers import needs_toolchain

TESTS = Path(__file__).resolve().parent.parent / "clash_lib" / "test"


@needs_toolchain
@pytest.mark.parametrize(("script", "what"), [
    ("stream/run_all.sh", "Window, Pad, Pool, Collect"),
    ("engine/run.sh", "Engine, dense and conv"),
    ("branch/run.sh", "Fifo, Branch (fork/join), Merge"),
])
def test_block_bench(tmp_path: Path, script: str, what: str) -> None:
    env = {**os.environ, "OUT": str(tmp_path)}
    args = [str(TESTS / script)] + ([str(tmp_path)] if script.startswith("engine") else [])
    proc = subprocess.run(["bash", *args], env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"{what}: {script} failed\n{(proc.stdout + proc.stderr)[-3000:]}"
