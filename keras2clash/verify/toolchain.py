"""Driving the Haskell toolchain: `clash` for HDL, `ghc` for the simulation executable.

Both run from the emitted project directory, because Clash resolves weight-file paths
against its working directory (TOOLCHAIN gotcha 9). Clash's cache ignores weight-file
contents (gotcha 8), so every run uses -fclash-no-cache and a fresh build folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from keras2clash import procs
from keras2clash.errors import K2CError
from keras2clash.fsutil import atomic_directory

LANGUAGES = {"verilog": "--verilog", "vhdl": "--vhdl", "systemverilog": "--systemverilog"}
"""HDL name -> clash flag. Output lands in DIR/hdl/<language>/."""

INSTALL_HINT = "run ./scripts/setup.sh (it installs the Debian toolchain listed in the README)"
TOP_MODULE = "Top"
SIM_MODULE = "Sim"
BUILD_DIR = ".build"


def require_tool(name: str) -> str:
    """The absolute path of a tool, or one clear error saying how to get it."""
    path = shutil.which(name)
    if path is None:
        raise K2CError(f"'{name}' not found on PATH; {INSTALL_HINT}")
    return path


def _search_path_flags() -> list[str]:
    """Relative to the project (the working directory of every run): naming the project
    folder itself as well would make Clash see each weight file twice and refuse."""
    return ["-iclash_lib"]


def _run(cmd: list[str], cwd: Path, what: str, log: Path | None = None) -> subprocess.CompletedProcess:
    """Run a tool (in its own process group, stopped on Ctrl-C: procs.run); on failure
    raise with the tail of its output (not a Python traceback)."""
    proc = procs.run(cmd, cwd)
    if log is not None:
        log.write_text(f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise K2CError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc


def generate_hdl(project: Path, language: str) -> Path:
    """Run `clash --<language>` on the project's Top module; return DIR/hdl/<language>.

    The HDL appears whole: Clash writes into a temporary folder that is renamed at the end.
    """
    if language not in LANGUAGES:
        raise K2CError(f"unknown HDL {language!r}; choose from {', '.join(LANGUAGES)}")
    clash = require_tool("clash")
    project = Path(project).resolve()
    target = project / "hdl" / language
    fresh = not target.parent.exists()
    try:
        with tempfile.TemporaryDirectory(prefix="k2c-clash-") as objdir:
            with atomic_directory(target, force=True) as tmp:
                cmd = [
                    clash, *_search_path_flags(), TOP_MODULE + ".hs", LANGUAGES[language],
                    "-fclash-no-cache", "-fclash-hdldir", str(tmp), "-outputdir", objdir,
                ]
                _run(cmd, project, f"clash {LANGUAGES[language]}", log=Path(objdir) / "clash.log")
    except BaseException:
        if fresh:  # no empty hdl/ left behind by a failed or interrupted first run
            try:
                target.parent.rmdir()
            except OSError:
                pass
        raise
    return target


def hdl_files(project: Path, language: str) -> list[Path]:
    """The generated HDL source files (without the copied weight files)."""
    suffix = {"verilog": ".v", "vhdl": ".vhdl", "systemverilog": ".sv"}[language]
    return sorted(Path(project, "hdl", language).rglob(f"*{suffix}"))


def build_simulator(project: Path) -> Path:
    """Compile Sim.hs with GHC -O2 into DIR/.build/sim (a Clash-semantics simulator).

    The executable is rebuilt when any Haskell source or weight file is newer than it.
    """
    ghc = require_tool("ghc")
    project = Path(project).resolve()
    build = project / BUILD_DIR / "sim"
    exe = build / "sim"
    sources = list(project.rglob("*.hs")) + list((project / "weights").glob("*"))
    if exe.exists() and all(src.stat().st_mtime <= exe.stat().st_mtime for src in sources):
        return exe
    build.mkdir(parents=True, exist_ok=True)
    tmp_exe = build / "sim.tmp"
    cmd = [
        ghc, "-O2", "-threaded", "-rtsopts", *_search_path_flags(),
        "-outputdir", str(build / "obj"), "-o", str(tmp_exe), SIM_MODULE + ".hs",
    ]
    env_log = build / "ghc.log"
    _run(cmd, project, "ghc (building the simulator)", log=env_log)
    os.replace(tmp_exe, exe)
    return exe
