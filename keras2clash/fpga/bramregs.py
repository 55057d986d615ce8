"""Move the flip-flops after each block-RAM read into the ECP5 block RAM's own output register.

Why: yosys `synth_ecp5` maps a registered ROM or RAM read to a DP16KD with its output register
bypassed (`REGMODE=NOREG`): the data leave the block 5.6 ns after the clock edge (nextpnr's
timing model of the LFE5U), and the flip-flop the design puts after the read (K2C's weight
ROMs and activation tables each have one, so the slow read has a cycle of its own) waits for
them across the routing: without the pass, iris' critical path is exactly that, 8.7 ns with no
logic at all.
With `REGMODE=OUTREG` the block registers its own output and the data leave it soon after the
clock edge. yosys has no pass for this on ECP5 (its `memory_dff` only merges the read
register that makes the port synchronous); fpga/dspregs.py does the same for multipliers.

The pass works on yosys' JSON netlist (after `synth_ecp5`, before nextpnr), and it changes
nothing a simulation could tell apart. A read port is folded when:

- its output register is off (`REGMODE` NOREG), its reset tied to 0 and its clock not inverted;
- every data bit it outputs that is read at all is read only by flip-flops' D inputs (no logic,
  no module port), and those flip-flops share the port's clock, one clock enable, no reset and
  power-up value 0 (the block's output register powers up at 0 as well).

Then `REGMODE` becomes OUTREG, the port's output clock enable `OCE` takes the flip-flops'
enable (the read itself keeps its own enable `CE`), the flip-flops go and their readers read
the block's data pins. A 36-bit pseudo-dual-port block (DATA_WIDTH_A = 36, yosys' wide ROM
mapping) reads on port B's clock with data on both DOA and DOB: it is one read port, both its
REGMODEs switch (as nextpnr's packer does for PDPW16KD's one REGMODE) and both OCEs take the
enable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keras2clash.fpga.netlist import Control, Netlist, checked_note, connect, pin, remove_flip_flops

RAM = "DP16KD"
DATA_PINS = 18
PDP_WIDTH = 36  # DATA_WIDTH_A of the pseudo-dual-port mode: one 36-bit read port on clock B


@dataclass(frozen=True)
class BramFold:
    """What the pass did, for the place-and-route report."""

    block_rams: int
    ports_folded: int  # read ports now registered in their block
    flip_flops_removed: int
    checked_cycles: int = 0  # random cycles both netlists were simulated equal (fpga/equiv.py)

    @property
    def summary(self) -> str:
        checked = checked_note(self.checked_cycles)
        return (
            f"{self.ports_folded} read ports of {self.block_rams} DP16KD registered inside the blocks "
            f"(REGMODE=OUTREG; {self.flip_flops_removed:,} fabric flip-flops absorbed{checked})"
        )


@dataclass(frozen=True)
class _Port:
    """One read port of a DP16KD: the side whose clock reads and the sides whose data pins,
    REGMODE and OCE belong to it."""

    clock_side: str
    sides: tuple[str, ...]


def _param(cell: dict[str, Any], name: str, default: str) -> str:
    return str(cell.get("parameters", {}).get(name, default)).strip()


def _int_param(cell: dict[str, Any], name: str) -> int:
    """A yosys integer parameter: a JSON number or a string of 32 or more binary digits."""
    value = cell.get("parameters", {}).get(name, 0)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text, 2) if len(text) >= 32 and set(text) <= {"0", "1"} else int(text or 0)


def _read_ports(ram: dict[str, Any]) -> list[_Port]:
    if _int_param(ram, "DATA_WIDTH_A") == PDP_WIDTH:
        return [_Port("B", ("A", "B"))]
    return [_Port("A", ("A",)), _Port("B", ("B",))]


def _plan(net: Netlist, ram: dict[str, Any], port: _Port) -> tuple[Control, dict[str, int]] | None:
    """(the flip-flops' control, {flip-flop: the data net that replaces its Q}) if the port's
    output register can take over the flip-flops after it."""
    clock = pin(ram, f"CLK{port.clock_side}")
    if (
        not isinstance(clock, int)
        or _param(ram, f"CLK{port.clock_side}MUX", f"CLK{port.clock_side}") != f"CLK{port.clock_side}"
    ):
        return None
    if any(
        _param(ram, f"REGMODE_{s}", "NOREG") != "NOREG" or pin(ram, f"RST{s}") not in ("0", "x") for s in port.sides
    ):
        return None
    control = None
    ffs: dict[str, int] = {}
    for side in port.sides:
        for i in range(DATA_PINS):
            bit = pin(ram, f"DO{side}{i}")
            if not isinstance(bit, int) or (bit not in net.port_bits and not net.readers.get(bit)):
                continue
            regs = net.registers_reading(bit)
            if regs is None or regs[0].clk != clock or (control is not None and regs[0] != control):
                return None
            control = regs[0]
            ffs.update(dict.fromkeys(regs[1], bit))
    return (control, ffs) if control is not None else None


def fold_module(module: dict[str, Any]) -> BramFold:
    """Fold the flip-flops after every DP16KD read port of `module` (yosys JSON, edited in place)."""
    net = Netlist(module)
    rams = [cell for cell in net.cells.values() if cell["type"] == RAM]
    folded = 0
    removed: dict[str, int] = {}
    for ram in rams:
        for port in _read_ports(ram):
            plan = _plan(net, ram, port)
            if plan is None:
                continue
            control, ffs = plan
            for side in port.sides:
                ram.setdefault("parameters", {})[f"REGMODE_{side}"] = "OUTREG"
                connect(ram, f"OCE{side}", control.ce)
            removed.update(ffs)
            folded += 1
    remove_flip_flops(module, removed)
    return BramFold(block_rams=len(rams), ports_folded=folded, flip_flops_removed=len(removed))


def fold_netlist(netlist: dict[str, Any], top: str) -> BramFold:
    """Fold the block-RAM output registers of module `top` in a yosys JSON netlist (in place)."""
    return fold_module(netlist["modules"][top])
