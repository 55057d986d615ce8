"""The pipeline depth for a target clock: `--pipeline auto` (100 MHz) or `--pipeline auto@150`.

The one depth knob of the datapath is the number of adder-tree levels between two registers
of a dot product (K2C.Engine; 0 = none). Each level is a carry chain and a route to the next;
a stage also pays a register's clock-to-Q and setup and the routes into and out of it. The
most levels whose delay fits the clock period is the shallowest pipeline (the least latency)
that leaves the adder tree off the critical path. The delays are measured after place and
route (docs/guide/place-and-route.md; `bench/fpga.py`), on the slowest family we target, so the
same choice also holds on the faster ones.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from keras2clash.errors import K2CError

DEFAULT_CLOCK_MHZ = 100.0
"""The clock `--pipeline auto` aims at when none is given (and `pnr`'s default target)."""


@dataclass(frozen=True)
class StageDelays:
    """Delays of one pipeline stage of an adder tree, after place and route."""

    register_ns: float  # clock-to-Q, setup, and the routes into and out of the stage
    level_ns: float  # one adder level: its carry chain and the route to the next level

    def levels(self, clock_mhz: float) -> int:
        """Most adder levels per stage that fit the clock's period (at least 1)."""
        period = 1000.0 / clock_mhz
        return max(1, math.floor((period - self.register_ns) / self.level_ns))


ECP5_STAGE = StageDelays(register_ns=2.3, level_ns=2.85)
"""LFE5U-85F, speed grade 6, nextpnr-ecp5, routed; the parts read off the critical paths of
the examples' reports (bench/fpga.json): clock-to-Q 0.52 ns + setup 0.25 ns + a route into
the stage 1.3-1.8 ns = 2.3 ns a stage; one level of a 20-30-bit adder tree = a CCU2C chain
(0.45 ns, then 0.07 ns per further 2 bits: ~0.9 ns) + the route to the next level (~1.5 ns)
= 2.85 ns. So 2 levels a stage at 100 MHz (`DEFAULT_PIPELINE`), 1 at 150 MHz, 4 at 66 MHz."""

_AUTO = re.compile(r"^\s*auto\s*(?:@\s*([0-9]+(?:\.[0-9]*)?)\s*(?:mhz)?)?\s*$", re.IGNORECASE)


def auto_clock(text: str) -> float | None:
    """The clock of `auto` / `auto@150` (MHz), or None if `text` is not an `auto` value."""
    match = _AUTO.match(text)
    if match is None:
        return None
    mhz = float(match.group(1)) if match.group(1) else DEFAULT_CLOCK_MHZ
    if not 1.0 <= mhz <= 1000.0:
        raise K2CError(f"bad pipeline {text!r}: the target clock must be 1 to 1000 MHz")
    return mhz


def auto_levels(clock_mhz: float, delays: StageDelays = ECP5_STAGE) -> int:
    """Adder levels per register stage for `clock_mhz` (module docstring)."""
    return delays.levels(clock_mhz)
