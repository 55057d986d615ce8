"""Pack the multiplier pipeline's flip-flops into the ECP5 DSP blocks' own registers.

Why: the Engine registers each multiplier's operands and its product (K2C.Engine: operand
and product stages), but yosys `synth_ecp5` maps `$mul` to a MULT18X18D with every register
bypassed and leaves those registers in the fabric (yosys has `ice40_dsp`, `xilinx_dsp` and
`lattice_dsp_nexus` for this; nothing for ECP5). Every multiplier path then runs fabric
flip-flop -> routing -> MULT18X18D -> routing -> fabric flip-flop, about 11.5 ns on the
LFE5U-85F whatever the design: an 85 MHz wall. With the registers inside the block, the
multiply runs register to register within it (nextpnr's timing class MULT18X18D_REGS_ALL)
and only short fabric hops are left on either side.

The pass works on yosys' JSON netlist (after `synth_ecp5`, before nextpnr), and it changes
nothing a simulation could tell apart:

- an input port (A or B) is folded when each of its 18 pins is a constant or the Q of a
  TRELLIS_FF, and all those flip-flops share one clock, clock enable, no reset (LSR tied to
  0) and power-up value 0 (REGSET=RESET), the MULT18X18D registers' own behaviour. The pin
  then takes the flip-flop's D; the flip-flop stays while anything else reads it (the
  register is duplicated into each block that reads it, each copy holding the same value);
- the output is folded when every product bit that is read at all is read only by such
  flip-flops (their D): those flip-flops are removed and their readers read the product pin;
- a block's registers all use one clock and enable (CLK0, CE0; nextpnr's timing model of
  MULT18X18D clocks every register from CLK0).

A constant-1 pin behind a folded input register reads 0 until the first enabled clock edge (the
register's power-up value) where the fabric version read 1. When both inputs move in under one
enable, the other operand reads its power-up 0 over the same cycles, so the product is 0 either
way; a port with constant-1 pins is therefore never folded alone. For the same reason a port
of constants only (a BatchNormalization's scale) gets its register too when the other port's
moves in: nextpnr's MULT18X18D timing model takes a block with one registered and one
unregistered input ("mixed input register modes") as if neither were registered, which turns
the folded operand's register into a path from its source through the multiplier (mlp_tanh).
Where a block's A, B and P want different enables, the enable that moves the most of them wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keras2clash.fpga.netlist import Control, Netlist, checked_note, connect, ff_control, rename
from keras2clash.fpga.netlist import pin as net_pin

MULT = "MULT18X18D"
PORT_BITS = 18
PRODUCT_BITS = 36


@dataclass(frozen=True)
class DspFold:
    """What the pass did, for the place-and-route report."""

    multipliers: int
    inputs_folded: int  # A/B ports now registered in their block
    outputs_folded: int  # products now registered in their block
    flip_flops_removed: int
    checked_cycles: int = 0  # random cycles both netlists were simulated equal (fpga/equiv.py)

    @property
    def summary(self) -> str:
        checked = checked_note(self.checked_cycles)
        return (
            f"{self.inputs_folded} multiplier operands and {self.outputs_folded} products of "
            f"{self.multipliers} MULT18X18D registered inside the blocks "
            f"({self.flip_flops_removed:,} fabric flip-flops absorbed{checked})"
        )


def _input_plan(net: Netlist, mult: dict[str, Any], port: str) -> tuple[Control, dict[str, str]] | None:
    """(control, {pin: driving flip-flop}) if port A/B can take its register into the block."""
    control = None
    ffs: dict[str, str] = {}
    for i in range(PORT_BITS):
        pin = f"{port}{i}"
        bit = net_pin(mult, pin)
        if bit in ("0", "1"):
            continue
        ff = net.ff_driving(bit)
        if ff is None:
            return None
        c = ff_control(net.cells[ff])
        if c is None or (control is not None and c != control):
            return None
        control = c
        ffs[pin] = ff
    return (control, ffs) if control is not None else None


def _output_plan(net: Netlist, mult: dict[str, Any]) -> tuple[Control, dict[str, list[str]]] | None:
    """(control, {product pin: flip-flops it feeds}) if the product register can move in."""
    control = None
    ffs: dict[str, list[str]] = {}
    for i in range(PRODUCT_BITS):
        pin = f"P{i}"
        bit = net_pin(mult, pin)
        if not isinstance(bit, int) or (bit not in net.port_bits and not net.readers.get(bit)):
            continue
        regs = net.registers_reading(bit)
        if regs is None or (control is not None and regs[0] != control):
            return None
        control, ffs[pin] = regs
    return (control, ffs) if control is not None else None


def _set_register(mult: dict[str, Any], which: str) -> None:
    params = mult.setdefault("parameters", {})
    params[f"REG_{which}_CLK"] = "CLK0"
    params[f"REG_{which}_CE"] = "CE0"
    params[f"REG_{which}_RST"] = "RST0"


def _connect_control(mult: dict[str, Any], control: Control) -> None:
    for name, bit in (("CLK0", control.clk), ("CE0", control.ce), ("RST0", "0")):
        connect(mult, name, bit)


def _constant_port(mult: dict[str, Any], port: str) -> bool:
    """Whether every pin of input port A or B is tied to a constant."""
    return all(net_pin(mult, f"{port}{i}") in ("0", "1") for i in range(PORT_BITS))


def _best_fold(mult: dict[str, Any], plans: dict[str, Any], out: Any) -> tuple[Control, dict[str, Any], bool] | None:
    """The clock/enable under which the most of A, B and P can move into the block (one
    CLK0/CE0 per block), with what moves; None if nothing can."""
    best = None
    for control in dict.fromkeys(p[0] for p in (plans["A"], plans["B"], out) if p is not None):
        fold_in = {port: p for port, p in plans.items() if p is not None and p[0] == control}
        if len(fold_in) == 1:
            # a lone input register reads 0 at power-up where a constant-1 pin read 1: only
            # safe when the port has none, or the other port is constant and is registered
            # with it (module docstring)
            (port,) = fold_in
            if not _constant_port(mult, "B" if port == "A" else "A") and any(
                net_pin(mult, f"{port}{i}") == "1" for i in range(PORT_BITS)
            ):
                fold_in = {}
        fold_out = out is not None and out[0] == control
        count = len(fold_in) + fold_out
        if count and (best is None or count > best[0]):
            best = (count, control, fold_in, fold_out)
    return None if best is None else best[1:]


def fold_module(module: dict[str, Any]) -> DspFold:
    """Fold the registers around every MULT18X18D of `module` (yosys JSON, edited in place)."""
    net = Netlist(module)
    cells = net.cells
    mults = [name for name, cell in cells.items() if cell["type"] == MULT]
    inputs = outputs = 0
    removed_outputs: set[str] = set()
    mapping: dict[int, int] = {}
    touched_ffs: set[str] = set()
    free = [
        name
        for name in mults
        if not any(
            cells[name].get("parameters", {}).get(f"REG_{r}_CLK", "NONE") != "NONE"
            for r in ("INPUTA", "INPUTB", "INPUTC", "PIPELINE", "OUTPUT")
        )
    ]  # hand-made: left alone
    input_plans = {name: {port: _input_plan(net, cells[name], port) for port in ("A", "B")} for name in free}
    # a flip-flop that some block copies into its input register must keep its timing: the
    # product register feeding it stays in the fabric (a cascade would gain a cycle)
    copied = {ff for plans in input_plans.values() for p in plans.values() if p is not None for ff in p[1].values()}
    for name in free:
        mult = cells[name]
        plans = input_plans[name]
        out = _output_plan(net, mult)
        if out is not None and any(ff in copied for ffs in out[1].values() for ff in ffs):
            out = None
        choice = _best_fold(mult, plans, out)
        if choice is None:
            continue
        control, fold_in, fold_out = choice
        _connect_control(mult, control)
        for port, (_, ffs) in fold_in.items():
            for pin, ff in ffs.items():
                mult["connections"][pin] = [cells[ff]["connections"]["DI"][0]]
                touched_ffs.add(ff)
            _set_register(mult, f"INPUT{port}")
            inputs += 1
        for port in ("A", "B"):  # a constant operand beside a registered one: registered too
            if fold_in and port not in fold_in and _constant_port(mult, port):
                _set_register(mult, f"INPUT{port}")
        if fold_out:
            assert out is not None
            for pin, ffs in out[1].items():
                product = net_pin(mult, pin)
                assert isinstance(product, int)
                for ff in ffs:
                    q = cells[ff]["connections"]["Q"][0]
                    if isinstance(q, int):
                        mapping[q] = product
                    removed_outputs.add(ff)
            _set_register(mult, "OUTPUT")
            outputs += 1
    for ff in removed_outputs:
        del cells[ff]
    rename(module, mapping)
    # input flip-flops nobody reads any more
    readers: set[int] = set(net.port_bits)
    for cell in cells.values():
        dirs = cell.get("port_directions", {})
        for pin, bits in cell["connections"].items():
            if dirs.get(pin) != "output":
                readers.update(b for b in bits if isinstance(b, int))
    unread = [ff for ff in touched_ffs if ff in cells and cells[ff]["connections"]["Q"][0] not in readers]
    for ff in unread:
        del cells[ff]
    return DspFold(
        multipliers=len(mults),
        inputs_folded=inputs,
        outputs_folded=outputs,
        flip_flops_removed=len(removed_outputs) + len(unread),
    )


def fold_netlist(netlist: dict[str, Any], top: str) -> DspFold:
    """Fold the DSP registers of module `top` in a yosys JSON netlist (edited in place)."""
    return fold_module(netlist["modules"][top])
