"""A plain (non-editable) install emits working projects: the wheel carries the Clash
blocks (keras2clash/clash_lib) and the templates, and nothing reaches into the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from helpers import needs_toolchain

ROOT = Path(__file__).resolve().parent.parent


@needs_toolchain
def test_wheel_emits_and_builds_a_project(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("keras2clash-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    blocks = sorted(n for n in names if n.startswith("keras2clash/clash_lib/K2C/"))
    assert {f"keras2clash/clash_lib/K2C/{m}.hs" for m in ("Engine", "Branch", "Fifo", "Merge", "Sim")} <= set(blocks)
    assert "keras2clash/backend/templates/Network.hs.j2" in names
    assert "keras2clash/backend/templates/tb_top.v.j2" in names
    assert "keras2clash/search/study.py" in names  # every sub-package (pyproject packages)
    assert "keras2clash/cli/params.py" in names and "keras2clash/__main__.py" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    script = (
        "import keras2clash, pathlib; from keras2clash import api; from keras2clash.verify import toolchain\n"
        f"assert pathlib.Path(keras2clash.__file__).is_relative_to({str(site)!r}), keras2clash.__file__\n"
        f"out = api.emit({str(ROOT / 'examples/iris/iris.keras')!r}, '1,7,8', {str(tmp_path / 'net')!r}, show=False)\n"
        "toolchain.build_simulator(out)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "net" / "clash_lib" / "K2C").glob("*.hs")) == sorted(
        Path(n).name for n in blocks
    )
