"""Driving the Haskell toolchain: `clash` for HDL, `ghc` for the simulation executable.

Both run from the emitted project directory, because Clash resolves weight-file paths
against its working directory (TOOLCHAIN gotcha 9). Clash's cache ignores weight-file
contents (gotcha 8), so every run uses -fclash-no-cache and a fresh build folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from keras2clash import procs
from keras2clash.backend.emitter import CLASH_FLAGS
from keras2clash.errors import K2CError
from keras2clash.fsutil import atomic_directory, cache_root

LANGUAGES = {"verilog": "--verilog", "vhdl": "--vhdl", "systemverilog": "--systemverilog"}
"""HDL name -> clash flag. Output lands in DIR/hdl/<language>/."""

INSTALL_HINT = "run ./scripts/setup.sh (it installs the Debian toolchain)"
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
                    clash,
                    *_search_path_flags(),
                    TOP_MODULE + ".hs",
                    LANGUAGES[language],
                    "-fclash-no-cache",
                    *CLASH_FLAGS,
                    "-fclash-hdldir",
                    str(tmp),
                    "-outputdir",
                    objdir,
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

    The executable is rebuilt when any Haskell source or weight file is newer than it. The
    blocks (clash_lib/K2C) are the same in every project, so their compiled objects are shared
    between projects through the object cache (`block_cache`); the paths given to GHC are
    relative to the project, because GHC recompiles a module whose flags (output folder
    included) differ from those it was compiled with.
    """
    ghc = require_tool("ghc")
    project = Path(project).resolve()
    build = project / BUILD_DIR / "sim"
    exe = build / "sim"
    sources = list(project.rglob("*.hs")) + list((project / "weights").glob("*"))
    if exe.exists() and all(src.stat().st_mtime <= exe.stat().st_mtime for src in sources):
        return exe
    build.mkdir(parents=True, exist_ok=True)
    rel = Path(BUILD_DIR, "sim")
    flags = ["-O2", "-threaded", "-rtsopts", *_search_path_flags(), "-outputdir", str(rel / "obj")]
    cache = BlockCache(ghc, flags, project / "clash_lib" / "K2C")
    cache.restore(build / "obj" / "K2C")
    cmd = [ghc, *flags, "-o", str(rel / "sim.tmp"), SIM_MODULE + ".hs"]
    _run(cmd, project, "ghc (building the simulator)", log=build / "ghc.log")
    cache.store(build / "obj" / "K2C")
    os.replace(build / "sim.tmp", exe)
    return exe


_IMPORT = re.compile(r"^import\s+(?:qualified\s+)?K2C\.(\w+)", re.MULTILINE)


class BlockCache:
    """Compiled objects (.o, .hi) of the K2C blocks, one folder per module and key.

    A module's key hashes the compiler (its path, size and time), the flags, its source and the
    keys of the K2C modules it imports, so an entry is only ever used for the same source
    compiled the same way against the same blocks. GHC still checks what it is given (source
    time against object time, and the interface hashes of every import) and recompiles anything
    that does not fit, so the cache can make a build faster but never different. The cache is
    best effort: a folder that cannot be read or written is the same as an empty one.
    """

    def __init__(self, ghc: str, flags: list[str], blocks: Path) -> None:
        self.root = cache_root()
        self.keys: dict[str, str] = {}
        if self.root is None or not blocks.is_dir():
            return
        stat = Path(ghc).resolve().stat()
        compiler = f"{Path(ghc).resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{' '.join(flags)}"
        sources = {path.stem: path.read_text() for path in blocks.glob("*.hs")}

        def key(name: str, seen: tuple[str, ...] = ()) -> str:
            if name not in self.keys:
                imports = sorted(set(_IMPORT.findall(sources[name])) & sources.keys() - {name, *seen})
                digest = hashlib.sha256(compiler.encode())
                digest.update(sources[name].encode())
                for dep in imports:
                    digest.update(f"{dep}={key(dep, (*seen, name))}".encode())
                self.keys[name] = digest.hexdigest()[:32]
            return self.keys[name]

        for name in sources:
            key(name)

    def _entry(self, name: str) -> Path:
        assert self.root is not None
        return self.root / "ghc" / f"{name}-{self.keys[name]}"

    def restore(self, objdir: Path) -> None:
        """Copy every cached module into OBJDIR, newer than its source."""
        for name in self.keys:
            entry = self._entry(name)
            try:
                if not (entry / f"{name}.o").is_file() or not (entry / f"{name}.hi").is_file():
                    continue
                objdir.mkdir(parents=True, exist_ok=True)
                for suffix in (".hi", ".o"):
                    target = objdir / f"{name}{suffix}"
                    shutil.copyfile(entry / f"{name}{suffix}", target)
                    os.utime(target)
            except OSError:
                continue

    def store(self, objdir: Path) -> None:
        """Keep the modules OBJDIR has and the cache has not (whole entries, by rename)."""
        for name in self.keys:
            entry = self._entry(name)
            built = [objdir / f"{name}{suffix}" for suffix in (".hi", ".o")]
            if entry.exists() or not all(path.is_file() for path in built):
                continue
            try:
                entry.parent.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=entry.parent))
                for path in built:
                    shutil.copyfile(path, tmp / path.name)
                try:
                    tmp.rename(entry)
                except OSError:  # another build stored it meanwhile
                    shutil.rmtree(tmp, ignore_errors=True)
            except OSError:
                continue
