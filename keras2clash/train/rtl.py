"""The training core's Verilog in Verilator: the host's messages through the AXI4-Stream ports
(back to back, or with random idle cycles and stalls), the answers read back, the weights by
the host's read command (docs/guide/training.md, "Checking the core")."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from keras2clash import procs
from keras2clash.errors import K2CError
from keras2clash.fsutil import work_dir
from keras2clash.train.core import CoreRun, Message, cycle_budget, read_events, template
from keras2clash.train.hardware import TrainCore
from keras2clash.verify.rtlsim import SIMULATORS, build_testbench, require_simulator
from keras2clash.verify.testbench import GAMMA, MIX1, MIX2, OUT_SEED_XOR, TB_DIR, TB_MODULE
from keras2clash.verify.toolchain import generate_hdl

WORDS_FILE = "words.hex"


def hdl_folder(project: Path) -> Path:
    """The core's Verilog (Clash's folder for the top entity), generated when missing or older
    than the project's Haskell and memory files."""
    folder = project / "hdl" / "verilog" / "Top.topEntity"
    sources = [*project.glob("*.hs"), *(project / "clash_lib" / "K2C").glob("*.hs"), *(project / "weights").glob("*")]
    newest = max(p.stat().st_mtime for p in sources)
    if (
        not folder.is_dir()
        or any(v.stat().st_mtime < newest for v in folder.glob("*.v"))
        or not any(folder.glob("*.v"))
    ):
        generate_hdl(project, "verilog")
    return folder


def rtl_core(
    core: TrainCore,
    project: Path,
    messages: Sequence[Message],
    *,
    gap_max: int = 0,
    seed: int = 1,
    progress: Callable[[int], None] | None = None,
) -> CoreRun:
    """Send `messages` to the core's Verilog in Verilator: words with 0 to `gap_max` idle cycles
    before each and the answers' ready low for 0 to `gap_max` cycles before each high one
    (splitmix64 from `seed`, as the inference testbenches)."""
    sim = SIMULATORS["verilator"]
    tools = require_simulator(sim)
    project = Path(project).resolve()
    folder = hdl_folder(project)
    tb_dir = work_dir(project / TB_DIR)
    words = [w for m in messages for w in m.words]
    (tb_dir / WORDS_FILE).write_text("\n".join(format(w & 0xFFFFFFFF, "08x") for w in words) + "\n")
    budget = cycle_budget(core, messages) * (gap_max + 1) + 1000
    (tb_dir / "tb.v").write_text(
        template("tb_core.v.j2").render(
            module=TB_MODULE,
            top=project_top(project),
            data=os.path.relpath(tb_dir / WORDS_FILE, folder),
            words=len(words),
            answers=len(messages),
            gap_max=gap_max,
            seed=seed,
            max_cycles=budget,
            gamma=GAMMA,
            mix1=MIX1,
            mix2=MIX2,
            out_seed_xor=OUT_SEED_XOR,
        )
    )
    cmd = build_testbench(sim, tools, folder, tb_dir, project / ".build" / "rtl-verilator")
    return read_events(core, messages, _events(cmd, folder), progress)


def project_top(project: Path) -> str:
    """The top entity's name (Top.hs' `t_name`)."""
    for line in (project / "Top.hs").read_text().splitlines():
        if "t_name" in line and '"' in line:
            return line.split('"')[1]
    raise K2CError(f"{project / 'Top.hs'}: no top entity name (t_name)")


def _events(cmd: list[str], folder: Path) -> Iterator[str]:
    """The testbench's `i`/`o` lines; one clear error on a timeout, an X or a failed run."""
    tail: list[str] = []
    with procs.child(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(("i ", "o ")):
                yield line
            elif line.strip():
                tail = [*tail[-19:], line.rstrip()]
        code = proc.wait()
    if code != 0 or not any(t.startswith("DONE") for t in tail):
        text = "\n".join(tail)
        raise K2CError(f"Verilator run of the training core failed (exit {code}):\n{text}", exit_code=1)
