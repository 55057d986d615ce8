"""A training core on an FPGA: its Verilog through the place-and-route flow of `pnr` (yosys and
nextpnr, the same steps and options as an inference design's), and what that makes of its
training speed (docs/guide/training.md, "The training core")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from keras2clash.fpga.flow import pnr_verilog
from keras2clash.fpga.report import PnrReport
from keras2clash.train.hardware import TrainCore
from keras2clash.verify.toolchain import generate_hdl


@dataclass(frozen=True)
class CorePnr:
    """A placed and routed core: the report, and a step's cycles at the clock it reached."""

    report: PnrReport
    step_cycles: int

    @property
    def samples_per_second(self) -> float | None:
        """Training samples a second at the routed clock (a sample a step, batch 1)."""
        fmax = self.report.fmax_mhz
        return None if not fmax else fmax * 1e6 / self.step_cycles


def pnr_core(
    core: TrainCore,
    project: Path,
    name: str,
    out: Path,
    fpga: str = "ecp5-85k",
    *,
    route: bool = True,
    force: bool = False,
    progress: Callable[..., object] | None = None,
) -> CorePnr:
    """Place and route the core that `write_core` wrote to `project` under the top name `name`:
    its Verilog (generated if not there yet), the report in `out`. The report's latency is a
    training sample's answer and its interval a step, in the hardware model's cycles."""
    verilog = project / "hdl" / "verilog"
    if not verilog.exists():
        generate_hdl(project, "verilog")
    top = verilog / "Top.topEntity"
    sources = sorted(str(p.relative_to(top)) for p in top.glob("*.v"))
    report = pnr_verilog(
        top,
        sources,
        name,
        out,
        fpga,
        latency_cycles=core.answer_cycle(),
        interval_cycles=float(core.step_cycles()),
        route=route,
        force=force,
        rw_dont_care=True,
        progress=progress,
    )
    return CorePnr(report, core.step_cycles())
