"""Serial normalizations: as many multipliers as their beats' rate needs, not a set per channel.

A BatchNormalization the passes cannot fold (after an activation, a pool, a merge) has one
multiplier per channel of a beat (`K2C.BatchNorm.batchNorm`), all busy in the one cycle a
beat passes. Where beats come slower (a dense layer's one beat an image, a convolution's
pixels at a long interval), they mostly wait: `batchNormLanes` computes `k` of the `c`
channels a cycle between a `K2C.Scatter` and a `K2C.Collect` of `c / k` beats, one beat
every `c / k + 1` cycles, with `k` multipliers. Measured on mlp_tanh balanced to ecp5-85k
(II 65): 132 -> 78 multipliers, latency 301 -> 359 cycles, and after place and route on the
LFE5U-85F 122.0 / 118.5 MHz (router1, seeds 1 / 2; whole beats: router2 at best 95.1,
router1 not routed after 33 minutes): the 32 multipliers of a whole beat, spread along the
DSP rows and read from one LUT-RAM queue, are its critical path.

A LayerNormalization (`kinds.layernorm`, `layerNormLanes`) has the same knob: two passes over
its `c / k` chunks, one beat every `2 c / k + 1` cycles, about `6 k + 4` multipliers instead of
`9 c`.

`with_lanes` gives every such layer (`Kind.lanes_knob`) the fewest lanes (a divisor of its channels)
for which the exact II of the whole design (`hw.hwmodel`, FIFOs sized again) is no longer
than with whole beats: one layer at a time in graph order, a binary search over the
divisors each (more lanes are never slower). The cost is latency, about `c / k` cycles per
serial layer, which is why `network.plan_network` does it under a multiplier budget (or
when asked: `--lanes auto`) and not by default; a budget that whole beats do not fit counts
them at their fewest lanes (`network._within_budget`).
"""

from __future__ import annotations

from collections.abc import Sequence

from keras2clash.errors import K2CError
from keras2clash.hw.hwmodel import timing, with_fifos
from keras2clash.hw.plan import LayerPlan

LANES_CHOICES = ("auto", "full")
"""`--lanes`: `auto` the fewest lanes that keep the II, `full` a whole beat a cycle."""


def resolve_lanes(lanes: str | None, dsp_budget: object) -> str:
    """`--lanes` as given, or its default: `auto` under a multiplier budget (the user asked
    for fewer multipliers at the best II), `full` otherwise (the shortest latency)."""
    if lanes is None:
        return "auto" if dsp_budget is not None else "full"
    choice = lanes.strip().lower()
    if choice not in LANES_CHOICES:
        raise K2CError(
            f"bad --lanes {lanes!r}: expected 'auto' (a Batch- or LayerNormalization computes the "
            "fewest channels a cycle that keep the initiation interval) or 'full' (a whole beat a cycle)"
        )
    return choice


def _serial(plan: LayerPlan) -> bool:
    """Whether the layer's kind can take fewer channels a cycle than a beat has (`Kind.lanes_knob`)."""
    return plan.kind is not None and plan.kind.lanes_knob


def _with_lanes(plan: LayerPlan, lanes: int) -> LayerPlan:
    assert plan.kind is not None
    return plan.kind.with_lanes(plan, lanes)


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def with_lanes(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """Every layer with lanes at the fewest that keep the design's exact II (the
    module's docstring); the FIFOs sized for the result."""
    current = with_fifos([_with_lanes(p, 0) if _serial(p) else p for p in plans])
    if not any(_serial(p) for p in current):
        return current
    target = timing(current).ii
    for index, plan in enumerate(current):
        if not _serial(plan):
            continue
        options = divisors(plan.output_shape[-1])[:-1]  # below all channels (lanes = 0)

        def trial(k: int) -> list[LayerPlan]:  # called within this iteration only
            return with_fifos([_with_lanes(p, k) if i == index else p for i, p in enumerate(current)])  # noqa: B023

        lo, hi, best = 0, len(options), None
        while lo < hi:  # the smallest option whose II is the target's
            mid = (lo + hi) // 2
            candidate = trial(options[mid])
            if timing(candidate).ii <= target:
                hi, best = mid, candidate
            else:
                lo = mid + 1
        if best is not None:
            current = best
    return current
