"""What the post-synthesis rewrites (fpga/dspregs.py, fpga/bramregs.py) read and edit in a
yosys JSON netlist of ECP5 cells: who drives and who reads each net bit, the clock and enable a
fabric flip-flop shares with a hard block's register, and renaming nets."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

FF = "TRELLIS_FF"

Bit = int | str
"""A netlist bit: an int net id, or a constant "0", "1", "x", "z"."""


@dataclass(frozen=True)
class Control:
    """The part of a TRELLIS_FF that a hard block's register must share."""

    clk: Bit
    ce: Bit


def ff_control(cell: dict[str, Any]) -> Control | None:
    """The flip-flop's clock and enable, or None if a hard block's register cannot stand for
    it (inverted clock or enable, a reset that can fire, power-up value 1)."""
    params = {k: str(v).strip() for k, v in cell.get("parameters", {}).items()}  # yosys writes "1 "
    conn = cell["connections"]
    if params.get("CLKMUX", "CLK") != "CLK" or params.get("REGSET", "RESET") != "RESET":
        return None
    lsr = conn.get("LSR", ["0"])[0]
    if params.get("LSRMUX", "LSR") != "LSR" or lsr != "0":
        return None
    cemux = params.get("CEMUX", "CE")
    if cemux == "1":
        ce: Bit = "1"
    elif cemux == "CE":
        ce = conn.get("CE", ["1"])[0]
    else:
        return None
    return Control(conn["CLK"][0], ce)


class Netlist:
    """One module's cells with who drives and who reads each net bit."""

    def __init__(self, module: dict[str, Any]) -> None:
        self.module = module
        self.cells: dict[str, dict[str, Any]] = module["cells"]
        self.driver: dict[int, tuple[str, str]] = {}
        self.readers: dict[int, list[tuple[str, str]]] = defaultdict(list)
        self.port_bits: set[int] = set()
        for name, cell in self.cells.items():
            dirs = cell.get("port_directions", {})
            for pin, bits in cell["connections"].items():
                for b in bits:
                    if isinstance(b, int):
                        if dirs.get(pin) == "output":
                            self.driver[b] = (name, pin)
                        else:
                            self.readers[b].append((name, pin))
        for info in module.get("ports", {}).values():
            self.port_bits.update(b for b in info["bits"] if isinstance(b, int))

    def ff_driving(self, bit: Bit) -> str | None:
        if not isinstance(bit, int):
            return None
        name, pin = self.driver.get(bit, ("", ""))
        return name if pin == "Q" and self.cells.get(name, {}).get("type") == FF else None

    def registers_reading(self, bit: Bit) -> tuple[Control, list[str]] | None:
        """(their shared control, the flip-flops) if every reader of `bit` is a flip-flop's D
        input that a hard block's register can stand for; None otherwise or if nothing reads it."""
        if not isinstance(bit, int) or bit in self.port_bits:
            return None
        control = None
        ffs = []
        for name, pin in self.readers.get(bit, []):
            cell = self.cells[name]
            if cell["type"] != FF or pin != "DI":
                return None
            c = ff_control(cell)
            if c is None or (control is not None and c != control):
                return None
            control = c
            ffs.append(name)
        return (control, ffs) if control is not None else None


def checked_note(cycles: int) -> str:
    """The report's words for a rewrite simulated equal over `cycles` (fpga/equiv.py), or ""."""
    return f"; both netlists equal over {cycles:,} random cycles" if cycles else ""


def pin(cell: dict[str, Any], name: str) -> Bit:
    return cell["connections"].get(name, ["x"])[0]


def connect(cell: dict[str, Any], name: str, bit: Bit) -> None:
    cell["connections"][name] = [bit]
    cell.setdefault("port_directions", {})[name] = "input"


def rename(module: dict[str, Any], mapping: dict[int, int]) -> None:
    """Replace net bits per `mapping` in every cell, port and net name of the module."""

    def fix(bits: list[Bit]) -> list[Bit]:
        return [mapping.get(b, b) if isinstance(b, int) else b for b in bits]

    for cell in module["cells"].values():
        cell["connections"] = {p: fix(bits) for p, bits in cell["connections"].items()}
    for info in module.get("ports", {}).values():
        info["bits"] = fix(info["bits"])
    for info in module.get("netnames", {}).values():
        info["bits"] = fix(info["bits"])


def remove_flip_flops(module: dict[str, Any], ffs: dict[str, int]) -> None:
    """Delete the flip-flops `ffs` ({name: the net that now stands for its Q}), their readers
    renamed to read that net."""
    mapping = {}
    for name, replacement in ffs.items():
        q = module["cells"][name]["connections"]["Q"][0]
        if isinstance(q, int):
            mapping[q] = replacement
        del module["cells"][name]
    rename(module, mapping)
