"""Copy the flip-flops and LUTs that drive too many pins, each copy driving a share of them.

Why: the open flow duplicates nothing. A register that enables or addresses a wide store (a
queue's write enable and pointers on a 1,024-bit LUT RAM, the clock enable of a window's
registers, a weight ROM's address on 35 block RAMs) and the LUT that selects a window's load
reach pins spread along the DSP rows, and their one net becomes the critical path. The
Clash source cannot hold copies apart: yosys merges identical cells (`opt_merge`). So the
copies are made here, on yosys' JSON netlist after synthesis (and after fpga/dspregs.py), where
nothing merges them again: a flip-flop's copy has the original's clock, enable, reset, data
input and parameters, a LUT's copy its inputs and truth table, hence the same value in every
cycle, and nextpnr places each near its readers.

Which readers share a copy decides whether it helps. By default they are split in the natural
order of their cell and pin names, which keeps the bits of one word (`...RAM.0.12`,
`...RAM.0.13`) together. Given where a first placement put them (`locations`, from nextpnr's
`--write` after `--no-route`; `pnr --fanout-placement`), they are split by recursive bisection
of the chip area instead (each group a compact region, so its copy sits among them). DSP blocks keep the original: all MULT18X18D
registers of a DSP block share four clock enables, which more distinct nets could exceed.

Name order at 64 is ECP5's default; devices.ECP5_MAX_FANOUT gives the measurement behind it.
With the heap placer and router2, digits_dense reaches 81.3 MHz without copies and 87.3 MHz
with flip-flop copies; with LUT copies too, grouped by placement, router2 does not converge.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keras2clash.fpga.netlist import FF, Netlist

KEEP_ON_ORIGINAL = ("MULT18X18D", "ALU54B")
"""Reader cell types that stay on the original flip-flop (module docstring)."""

DSP_DATA_PIN = re.compile(r"^[ABC]\d+$")
"""A MULT18X18D's operand pins (A0..A17, B0..B17, C0..C17)."""

OUTPUTS = {FF: "Q", "LUT4": "Z"}
"""The cells copied, with their one output pin."""

Location = tuple[float, float]
Reader = tuple[str, str, int]  # cell, pin, pins of it on the net


@dataclass(frozen=True)
class FanoutSplit:
    """What the pass did, for the place-and-route report."""

    limit: int
    flip_flops: int  # flip-flops that got copies
    copies: int  # cells added (flip-flops and LUTs)
    largest: int  # the largest fan-out split
    luts: int = 0  # LUTs that got copies
    placed: bool = False  # readers grouped by a first placement (else by name)
    operands: int = 0  # copies of flip-flops feeding several DSP blocks' operands, one per block

    @property
    def summary(self) -> str:
        dsp = (
            f"; {self.operands:,} copies of operand flip-flops shared by several MULT18X18D, one per block"
            if self.operands
            else ""
        )
        if not self.flip_flops and not self.luts:
            return f"no flip-flop or LUT drives more than {self.limit} pins{dsp}"
        how = "grouped by a first placement" if self.placed else "grouped by name"
        return (
            f"{self.flip_flops:,} flip-flops and {self.luts:,} LUTs driving more than {self.limit} pins "
            f"copied ({self.copies - self.operands:,} copies, readers {how}; the largest fan-out was "
            f"{self.largest:,}){dsp}"
        )


def _next_bit(module: dict[str, Any]) -> int:
    bits = [b for cell in module["cells"].values() for v in cell["connections"].values() for b in v]
    bits += [b for info in module.get("ports", {}).values() for b in info["bits"]]
    bits += [b for info in module.get("netnames", {}).values() for b in info["bits"]]
    return max((b for b in bits if isinstance(b, int)), default=1) + 1


def _natural(text: str) -> list[Any]:
    """Sort key: numbers inside names compare as numbers (`Q_9` before `Q_10`)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _by_name(readers: list[Reader], limit: int) -> list[list[Reader]]:
    groups: list[list[Reader]] = [[]]
    count = 0
    for reader in sorted(readers, key=lambda r: (_natural(r[0]), _natural(r[1]))):
        if groups[-1] and count + reader[2] > limit:
            groups.append([])
            count = 0
        groups[-1].append(reader)
        count += reader[2]
    return groups


def _by_place(readers: list[Reader], limit: int, where: Mapping[str, Location]) -> list[list[Reader]]:
    """Recursive bisection: split at the pin-weighted median of the longer side of the
    readers' bounding box until every group has at most `limit` pins."""
    if sum(r[2] for r in readers) <= limit or len(readers) == 1:
        return [readers]
    xs = [where[r[0]][0] for r in readers]
    ys = [where[r[0]][1] for r in readers]
    axis = 0 if max(xs) - min(xs) >= max(ys) - min(ys) else 1
    ordered = sorted(readers, key=lambda r: (where[r[0]][axis], _natural(r[0]), r[1]))
    half, count, cut = sum(r[2] for r in ordered) / 2, 0, 1
    for i, reader in enumerate(ordered[:-1], start=1):
        count += reader[2]
        cut = i
        if count >= half:
            break
    return _by_place(ordered[:cut], limit, where) + _by_place(ordered[cut:], limit, where)


def _located(net: Netlist, cells: list[str], locations: Mapping[str, Location]) -> dict[str, Location] | None:
    """The cells' locations; a cell packing absorbed (a PFUMX or L6MUX21 wide-function mux has
    no site of its own) sits in the slice of a cell driving one of its inputs. None if some
    cell has neither."""
    where = {}
    for name in cells:
        spot = locations.get(name)
        if spot is None:
            for pin, bits in net.cells[name]["connections"].items():
                if net.cells[name].get("port_directions", {}).get(pin) != "input":
                    continue
                drivers = (net.driver.get(b, ("", ""))[0] for b in bits if isinstance(b, int))
                spot = next((locations[d] for d in drivers if d in locations), None)
                if spot is not None:
                    break
        if spot is None:
            return None
        where[name] = spot
    return where


def _twin(module: dict[str, Any], name: str, out: str, bit: int, i: int) -> None:
    """A copy of cell `name` driving net `bit` instead of its own output."""
    twin = copy.deepcopy(module["cells"][name])
    twin["connections"][out] = [bit]
    module["cells"][f"{name}$fanout{i}"] = twin
    module.setdefault("netnames", {})[f"{name}$fanout{i}${out}"] = {"hide_name": 1, "bits": [bit], "attributes": {}}


def _rewire(net: Netlist, readers: list[Reader], old: int, new: int) -> None:
    for reader, pin, _ in readers:
        wires = net.cells[reader]["connections"][pin]
        net.cells[reader]["connections"][pin] = [new if b == old else b for b in wires]


def _split_dsp_operands(module: dict[str, Any], net: Netlist, fresh: int) -> tuple[dict[str, int], int]:
    """Give every MULT18X18D after the first that reads a flip-flop on an operand pin its own
    copy of that flip-flop; (copies made per flip-flop, next free net bit).

    Why: yosys merges identical registers, so the operand register of a window value that
    every processing element multiplies is one flip-flop read by all their DSP blocks, which
    lie along the chip's DSP rows (the thesis CNN at 130 multipliers on ECP5: conv_2's 16 PEs,
    a 14.9 ns route from that flip-flop to a far MULT18X18D, 64.7 MHz). A copy per block lets
    the placer put each between the window and its own DSP, halving the longest route. The
    block's register after it (fpga/dspregs.py) keeps the timing the same in every cycle."""
    copies: dict[str, int] = {}
    for name in sorted(n for n, c in net.cells.items() if c.get("type") == FF):
        q = net.cells[name]["connections"]["Q"][0]
        if not isinstance(q, int) or q in net.port_bits:
            continue
        by_block: dict[str, list[Reader]] = {}
        for reader, pin in sorted(set(net.readers[q])):
            if net.cells[reader].get("type") == "MULT18X18D" and DSP_DATA_PIN.match(pin):
                by_block.setdefault(reader, []).append((reader, pin, 1))
        for i, block in enumerate(sorted(by_block, key=_natural)[1:], start=1):
            _twin(module, name, "Q", fresh, i)
            _rewire(net, by_block[block], q, fresh)
            fresh, copies[name] = fresh + 1, i
    return copies, fresh


def split_module(
    module: dict[str, Any], limit: int, locations: Mapping[str, Location] | None = None, dsp_operands: bool = True
) -> FanoutSplit:
    """Give every TRELLIS_FF and LUT4 of `module` that drives more than `limit` pins copies,
    so that each copy drives at most `limit` of them (edited in place); readers grouped by
    `locations` (cell name -> chip coordinates) where every reader has one, else by name.
    `dsp_operands`: first, every flip-flop read by several DSP blocks' operand pins gets one
    copy per block (`_split_dsp_operands`)."""
    if limit < 1:
        raise ValueError(f"fan-out limit {limit}: at least 1")
    net = Netlist(module)
    fresh = _next_bit(module)
    twins: dict[str, int] = {}
    if dsp_operands:
        twins, fresh = _split_dsp_operands(module, net, fresh)
    operands = copies = sum(twins.values())
    split = {FF: 0, "LUT4": 0}
    largest = 0
    placed = False
    for name in sorted(n for n, c in net.cells.items() if c.get("type") in OUTPUTS):
        cell = net.cells[name]
        out = OUTPUTS[cell["type"]]
        q = cell["connections"][out][0]
        if not isinstance(q, int) or q in net.port_bits:
            continue
        readers = [
            (reader, pin, net.cells[reader]["connections"][pin].count(q))
            for reader, pin in sorted(set(net.readers[q]))
            if net.cells[reader].get("type") not in KEEP_ON_ORIGINAL
        ]
        pins = sum(r[2] for r in readers)
        if pins <= limit:
            continue
        where = _located(net, [r[0] for r in readers], locations) if locations is not None else None
        if where is not None:
            groups, placed = _by_place(readers, limit, where), True
        else:
            groups = _by_name(readers, limit)
        split[cell["type"]] += 1
        largest = max(largest, pins)
        for i, group in enumerate(groups[1:], start=twins.get(name, 0) + 1):  # the first group keeps the original
            bit, fresh = fresh, fresh + 1
            _twin(module, name, out, bit, i)
            _rewire(net, group, q, bit)
            copies += 1
    return FanoutSplit(limit, split[FF], copies, largest, luts=split["LUT4"], placed=placed, operands=operands)


_BEL = re.compile(r"X(\d+)/Y(\d+)")


def placed_locations(placed: Mapping[str, Any]) -> dict[str, Location]:
    """Cell name -> (x, y) from a netlist nextpnr wrote after placement (`--write`; one module,
    which nextpnr calls `top`): its cells carry their site in the `NEXTPNR_BEL` attribute
    (`X12/Y34/SLICEB.K0`). A cell nextpnr split while packing (a carry `CCU2C` into
    `name$CCU2_COMB0/1`, a LUT RAM into `name$DPRAM_COMB0..3` and `name$RAMW`) is found under
    its yosys name too, at its first part's site."""
    where: dict[str, Location] = {}
    split: dict[str, Location] = {}
    for module in placed.get("modules", {}).values():
        for name, cell in module.get("cells", {}).items():
            match = _BEL.match(str(cell.get("attributes", {}).get("NEXTPNR_BEL", "")))
            if match:
                where[name] = (float(match.group(1)), float(match.group(2)))
                if "$" in name:
                    split.setdefault(name.rsplit("$", 1)[0], where[name])
    return {**split, **where}


def split_netlist(
    netlist: dict[str, Any],
    top: str,
    limit: int,
    locations: Mapping[str, Location] | None = None,
    dsp_operands: bool = True,
) -> FanoutSplit:
    """`split_module` on module `top` of a yosys JSON netlist."""
    return split_module(netlist["modules"][top], limit, locations, dsp_operands)
