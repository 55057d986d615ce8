"""Copy the flip-flops that drive too many pins, each copy driving a share of them.

Why: the open flow duplicates nothing. A register that enables or addresses a wide store (a
queue's write enable and pointers on a 1,024-bit LUT RAM, the clock enable of a window's
registers) reaches pins spread along the DSP rows, and its one net becomes the critical path
(digits_dense: a queue's write enable, 12.2 ns of routing; mobilenet_digits: 17-19 ns). The
Clash source cannot hold copies apart: yosys merges identical flip-flops (`opt_merge`). So the
copies are made here, on yosys' JSON netlist after synthesis (and after fpga/dspregs.py), where
nothing merges them again: each copy has the original's clock, enable, reset, data input and
parameters, hence the same value in every cycle, and nextpnr places each near its readers.

Readers are split in the order of their cell and pin names, which keeps the bits of one word
(`...RAM.0.12`, `...RAM.0.13`) and the flip-flops of one slice together (flip-flops packed in
one slice must share their enable). DSP blocks keep the original: all MULT18X18D registers of
a DSP block share four clock enables, which more distinct nets could exceed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from keras2clash.fpga.dspregs import FF, _Netlist

KEEP_ON_ORIGINAL = ("MULT18X18D", "ALU54B")
"""Reader cell types that stay on the original flip-flop (module docstring)."""


@dataclass(frozen=True)
class FanoutSplit:
    """What the pass did, for the place-and-route report."""

    limit: int
    flip_flops: int  # flip-flops that got copies
    copies: int  # flip-flops added
    largest: int  # the largest fan-out split

    @property
    def summary(self) -> str:
        if not self.flip_flops:
            return f"no flip-flop drives more than {self.limit} pins"
        return (f"{self.flip_flops:,} flip-flops driving more than {self.limit} pins copied "
                f"({self.copies:,} copies; the largest fan-out was {self.largest:,})")


def _next_bit(module: dict[str, Any]) -> int:
    bits = [b for cell in module["cells"].values() for v in cell["connections"].values() for b in v]
    bits += [b for info in module.get("ports", {}).values() for b in info["bits"]]
    bits += [b for info in module.get("netnames", {}).values() for b in info["bits"]]
    return max((b for b in bits if isinstance(b, int)), default=1) + 1


def split_module(module: dict[str, Any], limit: int) -> FanoutSplit:
    """Give every TRELLIS_FF of `module` that drives more than `limit` pins copies, so that
    each copy drives at most `limit` of them (edited in place)."""
    if limit < 1:
        raise ValueError(f"fan-out limit {limit}: at least 1")
    net = _Netlist(module)
    fresh = _next_bit(module)
    split = copies = largest = 0
    for name in sorted(n for n, c in net.cells.items() if c.get("type") == FF):
        cell = net.cells[name]
        q = cell["connections"]["Q"][0]
        if not isinstance(q, int) or q in net.port_bits:
            continue
        movable = sorted({(reader, pin) for reader, pin in net.readers[q]
                          if net.cells[reader].get("type") not in KEEP_ON_ORIGINAL})
        pins = sum(net.cells[r]["connections"][p].count(q) for r, p in movable)
        if pins <= limit:
            continue
        groups, group, count = [], [], 0
        for reader, pin in movable:  # whole (cell, pin) pairs, at most `limit` pins a group
            width = net.cells[reader]["connections"][pin].count(q)
            if group and count + width > limit:
                groups.append(group)
                group, count = [], 0
            group.append((reader, pin))
            count += width
        groups.append(group)
        split, largest = split + 1, max(largest, pins)
        for i, group in enumerate(groups[1:], start=1):  # the first group keeps the original
            bit, fresh = fresh, fresh + 1
            twin = copy.deepcopy(cell)
            twin["connections"]["Q"] = [bit]
            module["cells"][f"{name}$fanout{i}"] = twin
            module.setdefault("netnames", {})[f"{name}$fanout{i}$Q"] = {"hide_name": 1, "bits": [bit],
                                                                       "attributes": {}}
            for reader, pin in group:
                wires = net.cells[reader]["connections"][pin]
                net.cells[reader]["connections"][pin] = [bit if b == q else b for b in wires]
            copies += 1
    return FanoutSplit(limit, split, copies, largest)


def split_netlist(netlist: dict[str, Any], top: str, limit: int) -> FanoutSplit:
    """`split_module` on module `top` of a yosys JSON netlist."""
    return split_module(netlist["modules"][top], limit)
