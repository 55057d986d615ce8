"""The exact hardware model: cycles, multipliers and on-chip memory of a planned network.

Given the plans (`planner.make_plan`: layers, formats, each compute layer's `pe` and
`cycles`), this module predicts, without Clash:

- **latency**: cycles from the first beat of the first image being accepted to its (last)
  output beat moving, through an empty pipeline (`Comparison.first_latency`);
- **initiation interval** (II): cycles between outputs in the steady state, images back to
  back, downstream always ready;
- the accept and output cycle of every image of a run (`SimResult.accept_cycle`,
  `.output_cycle`), so also the simulation's mean `interval` over N images;
- multipliers, multiply-accumulates, and memory bits per layer (ROM, line buffers, data
  registers) from the storage formulas in the blocks' haddocks.

The blocks themselves are `hw.blocks` (one recurrence per Clash block); the resources are
`hw.resources`; this module runs them: steady state, timing, FIFO depths, figures.

Where it is not (or not claimed to be) exact:
- cycles: only the source and sink of `simulate` without `--gap-max` are modelled (beats back
  to back, output always ready); the block recurrences hold under any stalls, but the Sim's
  pseudo-random idle cycles and output stalls are not reproduced. A steady state whose period
  is longer than 4 images would raise an error (none seen).
- memory: data storage only (control counters and flags, a few bits per block, are left
  out); the R register's padding outputs (`G*p - F`) are left out as synthesis removes them.
  ROM + line-buffer bits equal Yosys' inferred memory bits; the register bits are an
  estimate of flip-flops (Yosys removes constant and unused bits and adds control).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from keras2clash.hw.blocks import _build, _knobs, beats_per_image, output_beats_per_image
from keras2clash.hw.events import CLAMP, NEG, Block, Cycle, EngineTiming, Join, Sink, Sources, Stateful
from keras2clash.hw.plan import LayerPlan
from keras2clash.hw.resources import HwFigures, LayerResources, layer_resources, runs_of, top_fifo_bits
from keras2clash.kinds.window import generator_geometry

# --- running the model -----------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Predicted cycles of a run of `images` images back to back (cycle 0 = first after reset)."""

    accept_cycle: np.ndarray  # (N,) first beat of each image accepted (several inputs: on the last port to take it)
    output_cycle: np.ndarray  # (N,) its (last) output beat moved: the last of its outputs' (`head_cycles`)
    ii: float  # steady-state initiation interval (exact; fractional only for a multi-image period)
    period_images: int  # images per period of the steady state (1 in every case seen)
    head_cycles: tuple[np.ndarray, ...] = ()  # (N,) per output (`hw.output.output_plans` order)

    @property
    def first_latency(self) -> int:
        return int(self.output_cycle[0] - self.accept_cycle[0])

    @property
    def interval(self) -> float:
        """What `SimResult.interval` measures: the mean distance between outputs of this run."""
        if len(self.output_cycle) < 2:
            return float("nan")
        return float(np.diff(self.output_cycle).mean())


def _knob_arrays(configs: Sequence[Sequence[LayerPlan]]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return _as_arrays([tuple(_knobs(p) for p in plans if p.is_compute) for plans in configs])


def _as_arrays(keys: Sequence[Sequence[tuple[int, int, int]]]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per compute layer, the (S, D, Q) of every configuration as three int arrays."""
    return [
        tuple(np.array([key[i][j] for key in keys], dtype=np.int64) for j in range(3))  # type: ignore[misc]
        for i in range(len(keys[0]))
    ]


def _simulate_batch(
    plans: Sequence[LayerPlan],
    knobs: Sequence[EngineTiming],
    n_configs: int,
    images: int | None,
    max_images: int = 24,
    max_period: int = 4,
) -> tuple[list[np.ndarray], list[Cycle], list[np.ndarray], np.ndarray, np.ndarray]:
    """Run the event model on arrays of `n_configs` configurations. With `images` given,
    exactly that many images; otherwise until the state of every configuration repeats (or
    `max_images`)."""
    first, blocks, sinks = _build(plans, knobs, np.maximum)
    k = beats_per_image(plans)
    last = np.full(n_configs, -1, dtype=np.int64)
    accepts: list[np.ndarray] = []
    snaps: list[tuple[Signature, np.ndarray]] = []
    refs: list[np.ndarray] = []
    found_lag = np.zeros(n_configs, dtype=np.int64)  # 0: not yet periodic
    found_at = np.zeros(n_configs, dtype=np.int64)
    n = 0
    while True:
        if images is not None and n >= images:
            break
        ref = last + 1
        snap = (
            _signature(blocks),
            np.stack(
                [
                    np.broadcast_to(np.maximum(np.asarray(s) - ref, CLAMP), (n_configs,))
                    for b in blocks
                    for s in b.state()
                ]
            ),
        )
        for lag in range(1, min(max_period, len(snaps)) + 1):
            if snaps[-lag][0] != snap[0]:
                continue
            same = np.all(snap[1] == snaps[-lag][1], axis=0) & (found_lag == 0)
            found_lag[same] = lag
            found_at[same] = n - lag
        snaps.append(snap)
        refs.append(ref)
        if images is None and (not np.any(found_lag == 0) or n >= max_images):
            break
        for j in range(k):
            # one array per configuration: a port whose path has no knob answers one cycle for all
            q = np.broadcast_to(np.asarray(first.accept(last + 1)), (n_configs,))
            if j == 0:
                accepts.append(q)
            last = q
        n += 1
    if isinstance(first, Sources):
        accepts = [np.broadcast_to(a, (n_configs,)) for a in _accepts(first, len(accepts))]
    outputs = _last_outputs(sinks, output_beats_per_image(plans), len(accepts))
    return accepts, outputs, refs, found_lag, found_at


def _accepts(feed: Sources, images: int) -> list[Any]:
    """A sample's accept cycle on several input ports: the cycle the last port accepted
    the sample's first beat."""
    return [functools.reduce(np.maximum, [port[i] for port in feed.firsts]) for i in range(images)]


def _head_outputs(sinks: Sequence[Sink], beats: Sequence[int], images: int) -> list[list[Cycle]]:
    """Per output, the cycle each image's last output beat moved (`beats` per image)."""
    return [sink.times[j - 1 :: j][:images] for sink, j in zip(sinks, beats)]


def _last_outputs(sinks: Sequence[Sink], beats: Sequence[int], images: int) -> list[Cycle]:
    """The cycle each image's last output beat of all its outputs moved."""
    heads = _head_outputs(sinks, beats, images)
    if len(heads) == 1:
        return heads[0]
    return [functools.reduce(np.maximum, cycles) for cycles in zip(*heads)]


Signature = tuple[int | tuple[int, ...], ...]
"""How many values each stateful block's state holds: a count, or a join's FIFO fills."""


def _signature(blocks: Sequence[Stateful]) -> Signature:
    """How many values each block's state holds (a join's FIFOs hold a varying number)."""
    return tuple(b.shape() if isinstance(b, Join) else len(b.state()) for b in blocks)


def _snapshot(blocks: Sequence[Stateful], ref: int) -> tuple[Signature, tuple[int, ...]]:
    return _signature(blocks), tuple(max(int(v) - ref, CLAMP) for b in blocks for v in b.state())


def _restore(blocks: Sequence[Any], snap: tuple[Signature, Sequence[int]], ref: int) -> None:
    # `blocks` are the model's stateful blocks; a Join restores its queues with their shape.
    signature, rel = snap
    values = [NEG if r <= CLAMP else ref + r for r in rel]
    i = 0
    for b, shape in zip(blocks, signature):
        if isinstance(shape, tuple):
            n = 1 + sum(shape)
            b.set_state(values[i : i + n], shape)
        else:
            n = shape
            b.set_state(values[i : i + n])
        i += n


def _one_image(first: Block, beats: int, ref: int) -> int:
    """Feed one image from cycle `ref` on; the next image's first offer cycle."""
    last = ref - 1
    for _ in range(beats):
        last = int(first.accept(last + 1))
    return last + 1


AFFINE_LIMIT = 1 << 24
"""Images an affine extrapolation may jump at most; past it the run goes on image by image."""


def steady_state(
    plans: Sequence[LayerPlan],
    knobs: Sequence[EngineTiming] | None = None,
    max_images: int = 100_000,
    depths: Mapping[str, Sequence[int | None]] | None = None,
) -> tuple[float, int]:
    """The exact steady-state II (and its period in images) of one configuration.

    Images are fed back to back until the blocks' state, relative to the image's first offer
    cycle, repeats (any earlier state: behind a join with deep FIFOs the period can be several
    images long). A slow bottleneck far downstream can take many images to back the
    pipeline up (its backlog grows by a few cycles per image); when two successive images
    change the relative state by the same vector, the run is affine until some comparison
    in a block flips, and each comparison between quantities that move linearly flips at
    most once: so the first image where the one-image step stops being that affine step is
    found by exponential and binary search on extrapolated states, and the run continues
    from there exactly.
    """
    knobs = knobs if knobs is not None else [_knobs(p) for p in plans if p.is_compute]
    first, blocks, _ = _build(plans, knobs, max, depths=depths)
    probe_first, probe_blocks, _ = _build(plans, knobs, max, depths=depths)
    beats = beats_per_image(plans)
    ref, images = 0, 0
    rels: list[tuple[Signature, tuple[int, ...]]] = []
    refs: list[int] = []
    seen: dict[tuple[Signature, tuple[int, ...]], int] = {}  # a state -> its index in rels
    # Affine jumps assume each comparison flips at most once along the extrapolation; a
    # join's window of fire cycles breaks that, so graphs with merges run image by image.
    jumps = not any(p.is_merge for p in plans)
    while images < max_images:
        rel = _snapshot(blocks, ref)
        if rel in seen:
            lag = len(rels) - seen[rel]
            return (ref - refs[-lag]) / lag, lag
        if (
            jumps
            and len(rels) >= 2
            and ref - refs[-1] == refs[-1] - refs[-2]
            and rel[0] == rels[-1][0] == rels[-2][0]
            and all(a - b == b - c for a, b, c in zip(rel[1], rels[-1][1], rels[-2][1]))
        ):
            period, delta = ref - refs[-1], [a - b for a, b in zip(rel[1], rels[-1][1])]
            signature, values = rel

            # virtual and affine run within this iteration only: the loop's values are theirs
            def virtual(j: int) -> tuple[tuple[Signature, tuple[int, ...]], int]:
                return (
                    signature,  # noqa: B023
                    tuple(r if r <= CLAMP else r + j * d for r, d in zip(values, delta)),  # noqa: B023
                ), ref + j * period  # noqa: B023

            def affine(j: int) -> bool:
                state, start = virtual(j)
                _restore(probe_blocks, state, start)
                nxt = _one_image(probe_first, beats, start)
                return (nxt, _snapshot(probe_blocks, nxt)) == virtual(j + 1)[::-1]

            hi = 1
            while hi <= AFFINE_LIMIT and affine(hi):
                hi *= 2
            if hi > AFFINE_LIMIT:  # no break found: keep feeding images one by one
                jumps = False  # (a safety net: not seen on chains)
                seen[rel] = len(rels)
                rels.append(rel)
                refs.append(ref)
                ref = _one_image(first, beats, ref)
                images += 1
                continue
            lo = hi // 2  # affine(lo) holds (or lo == 0: the step just measured)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if affine(mid) else (lo, mid)
            state, ref = virtual(hi)
            _restore(blocks, state, ref)
            images += hi
            rels, refs, seen = [], [], {}
            continue
        seen[rel] = len(rels)
        rels.append(rel)
        refs.append(ref)
        ref = _one_image(first, beats, ref)
        images += 1
    raise RuntimeError(f"hwmodel: no periodic steady state within {max_images} images")


# --- the drift jump on a batch of configurations ----------------------------------------

DRIFT_PERIOD = 4
"""The longest period (images) `_drift_batch` looks for; a longer one goes to `steady_state`."""
DRIFT_IMAGES = 2048
"""Images `_drift_batch` runs at most between jumps, all configurations together."""
DRIFT_WAIT = 8
"""Images a drifting configuration waits for others to drift before its jump is searched."""
SEARCH_POINTS = 16
"""Probes per configuration in each round of the search for a drift's end (`_drift_ends`)."""


def _columns(knobs: Sequence[EngineTiming], n: int, cols: np.ndarray) -> list[EngineTiming]:
    """The knob arrays of the configurations `cols` (of `n`), in that order."""
    return [tuple(np.broadcast_to(k, (n,))[cols] for k in layer) for layer in knobs]  # type: ignore[misc]


def _rel_state(blocks: Sequence[Stateful], ref: np.ndarray) -> np.ndarray:
    """`_snapshot`'s values for a batch: (state values, configurations), relative to `ref`."""
    values = [v for b in blocks for v in b.state()]
    out = np.empty((len(values), ref.shape[0]), dtype=np.int64)
    for i, v in enumerate(values):
        out[i] = v  # a block's value is one for all configurations where no knob reaches it
    return np.maximum(out - ref, CLAMP)


def _set_rel_state(blocks: Sequence[Any], rel: np.ndarray, ref: np.ndarray) -> None:
    """`_restore` for a batch: every block's state from `rel` relative to `ref` (no joins)."""
    values = np.where(rel <= CLAMP, NEG, ref + rel)
    i = 0
    for b in blocks:
        n = len(b.state())
        b.set_state(list(values[i : i + n]))
        i += n


def _drift_batch(plans: Sequence[LayerPlan], knobs: Sequence[EngineTiming], m: int) -> tuple[np.ndarray, np.ndarray]:
    """`steady_state` of `m` configurations of a chain at once: the II and the period of each
    (period 0 where none of at most `DRIFT_PERIOD` images was found within `DRIFT_IMAGES`
    images after its last jump). Every configuration runs image by image, and one whose last
    two images changed its relative state by the same vector jumps to the end of that affine
    run, found for all of them together (`_drift_ends`), as `steady_state` does one by one.

    An engine's history of results is as long as the deepest queue of the configurations run
    together: the probes' runs hold one more column with the batch's deepest, so every
    snapshot has the same values."""
    first, blocks, _ = _build(plans, knobs, np.maximum)
    deepest = [tuple(np.asarray(x).max(keepdims=True) for x in layer) for layer in knobs]
    beats = beats_per_image(plans)
    ref = np.zeros(m, dtype=np.int64)
    ii, lag = np.zeros(m), np.zeros(m, dtype=np.int64)
    jumps = np.ones(m, dtype=bool)  # False once a drift ran AFFINE_LIMIT images without a break
    hist: list[tuple[np.ndarray, np.ndarray]] = []  # (relative state, ref) of the last images
    since = np.zeros(m, dtype=np.int64)  # per configuration: its images in `hist` since its last jump
    plain = np.zeros(m, dtype=np.int64)  # per configuration: images since its last jump
    waited = np.zeros(m, dtype=np.int64)  # per configuration: images it has been drifting unjumped
    while True:
        rel = _rel_state(blocks, ref)
        for back in range(1, min(DRIFT_PERIOD, len(hist)) + 1):
            old, old_ref = hist[-back]
            same = (lag == 0) & (since >= back) & np.all(rel == old, axis=0)
            ii[same] = (ref[same] - old_ref[same]) / back
            lag[same] = back
        running = (lag == 0) & (plain < DRIFT_IMAGES)
        if not running.any():
            return ii, lag
        if len(hist) >= 2:
            (rel2, ref2), (rel1, ref1) = hist[-2], hist[-1]
            delta, period = rel - rel1, ref - ref1
            affine = running & jumps & (since >= 2) & (period == ref1 - ref2) & np.all(delta == rel1 - rel2, axis=0)
            waited = np.where(affine, waited + 1, 0)
            # A search runs the probes of every drifting configuration at once: the ones found
            # drifting wait a few images (exact all the same) for others to join them.
            if affine.any() and (waited.max() > DRIFT_WAIT or 2 * affine.sum() >= running.sum()):
                cols = np.nonzero(affine)[0]
                sub = _columns(knobs, m, cols)
                found = _drift_ends(plans, sub, deepest, rel[:, cols], delta[:, cols], ref[cols], period[cols], beats)
                ends = np.zeros(m, dtype=np.int64)
                ends[cols] = found
                jumps[affine & (ends == 0)] = False
                jumped = affine & (ends > 0)
                rel = np.where(jumped & (rel > CLAMP), rel + ends * delta, rel)
                ref = ref + np.where(jumped, ends * period, 0)
                _set_rel_state(blocks, rel, ref)
                since[jumped], plain[jumped], waited[affine] = 0, 0, 0
        hist = [*hist[-DRIFT_PERIOD:], (rel, ref)]
        since += 1
        plain += 1
        last = ref - 1
        for _ in range(beats):
            last = np.broadcast_to(first.accept(last + 1), ref.shape)
        ref = last + 1


def _drift_ends(
    plans: Sequence[LayerPlan],
    knobs: Sequence[EngineTiming],
    deepest: Sequence[EngineTiming],
    rel: np.ndarray,
    delta: np.ndarray,
    ref: np.ndarray,
    period: np.ndarray,
    beats: int,
) -> np.ndarray:
    """Per configuration (column) in an affine drift (its state `rel + j*delta` at `ref +
    j*period` after j images), the first j whose next image is not that affine step (0: none
    up to `AFFINE_LIMIT`): `steady_state`'s exponential and binary search, with every
    configuration's probes in one run, `SEARCH_POINTS` probes a round. One more column in
    every probe run, with the knobs `deepest` (each layer's deepest queue in the batch),
    gives the engines' histories the batch's length."""
    k = ref.shape[0]
    own = [tuple(np.broadcast_to(x, (k,)) for x in layer) for layer in knobs]

    def holds(j: np.ndarray) -> np.ndarray:
        """Whether the affine step holds after j[p, c] images (p: probes, c: configurations)."""
        probes = j.shape[0]
        tiled = [
            tuple(np.concatenate([np.tile(x, probes), pad]) for x, pad in zip(layer, top))
            for layer, top in zip(own, deepest)
        ]
        first, blocks, _ = _build(plans, tiled, np.maximum)  # type: ignore[arg-type]
        jj = np.append(j.ravel(), 0)
        r, d = np.tile(rel, probes + 1)[:, : jj.size], np.tile(delta, probes + 1)[:, : jj.size]
        per = np.tile(period, probes + 1)[: jj.size]
        start = np.tile(ref, probes + 1)[: jj.size] + jj * per
        _set_rel_state(blocks, np.where(r <= CLAMP, r, r + jj * d), start)
        last = start - 1
        for _ in range(beats):
            last = np.broadcast_to(first.accept(last + 1), start.shape)
        nxt = last + 1
        want = np.where(r <= CLAMP, r, r + (jj + 1) * d)
        ok = (nxt == start + per) & np.all(_rel_state(blocks, nxt) == want, axis=0)
        return ok[:-1].reshape(probes, k)

    powers = 1 << np.arange(AFFINE_LIMIT.bit_length(), dtype=np.int64)  # 1, 2, 4, ... AFFINE_LIMIT
    ok = holds(np.repeat(powers[:, None], k, axis=1))
    hi = np.where(ok.all(axis=0), 0, powers[np.argmin(ok, axis=0)])  # the first power that breaks
    lo = hi // 2  # holds (or 0: the step just measured)
    t = np.arange(1, SEARCH_POINTS, dtype=np.int64)[:, None]
    while (hi - lo > 1).any():
        open_ = hi - lo > 1
        points = np.where(open_, np.clip(lo + (hi - lo) * t // SEARCH_POINTS, lo + 1, hi - 1), 0)
        good = holds(points)
        # the breaks are monotone in j: the first failing probe is the new end, the probe before it holds
        fails = np.where(good | ~open_, hi, points).min(axis=0)
        lo = np.where(open_, np.where(good & (points < fails), points, lo).max(axis=0), lo)
        hi = np.where(open_, fails, hi)
    return hi


def timing(plans: Sequence[LayerPlan], images: int = 0) -> Timing:
    """The exact cycles of `images` images back to back (at least one), and the exact II."""
    ii, period = steady_state(plans)
    first, _, sinks = _build(plans, [_knobs(p) for p in plans if p.is_compute], max)
    beats = beats_per_image(plans)
    accepts: list[Cycle] = []
    last: Cycle = -1
    for _ in range(max(images, 1)):
        for j in range(beats):
            last = first.accept(last + 1)
            if j == 0:
                accepts.append(last)
    if isinstance(first, Sources):
        accepts = _accepts(first, len(accepts))
    acc = np.array(accepts, dtype=np.int64)
    heads = tuple(np.array(c, dtype=np.int64) for c in _head_outputs(sinks, output_beats_per_image(plans), len(acc)))
    out = np.max(np.stack(heads), axis=0)
    return Timing(acc, out, ii, period, heads)


def fifo_depths(plans: Sequence[LayerPlan]) -> dict[str, tuple[int, ...]]:
    """The depth of every branch FIFO, per merge layer (branch order), for this configuration.

    1. No deadlock: a FIFO must hold every beat its branch can produce before the other
       branches produce the beat the join needs, i.e. the most beats it holds in the event
       order (which depends on the geometry only: two images with unbounded FIFOs measure
       it). With that depth no stall pattern can deadlock the fork and join, and the
       bounded FIFOs' cycles are computable in the event order.
    2. No lost throughput: the smallest common slack `s` added to every FIFO such that the
       steady-state II equals the II with FIFOs a whole image deeper (found by doubling,
       then bisection, on the exact model).
    """
    need = branch_needs(plans)
    if not need:
        return {}
    knobs = [_knobs(p) for p in plans if p.is_compute]
    beats = beats_per_image(plans)

    def with_slack(s: int) -> dict[str, tuple[int, ...]]:
        return {name: tuple(n + s for n in counts) for name, counts in need.items()}

    def ii(s: int) -> float:
        return steady_state(plans, knobs, depths=with_slack(s))[0]

    deep = max(beats, 2) + 1
    best = ii(deep)
    if ii(0) <= best:
        return with_slack(0)
    lo, hi = 0, 1
    while ii(hi) > best:
        lo, hi = hi, 2 * hi
        if hi > deep:
            hi = deep
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ii(mid) > best else (lo, mid)
    return with_slack(hi)


def branch_needs(plans: Sequence[LayerPlan]) -> dict[str, list[int]]:
    """Per merge layer, the most beats each branch FIFO holds in the event order (at least 1):
    the depth below which a fork and join can deadlock. It depends on the geometry only, not
    on the knobs, so two images with unbounded FIFOs measure it."""
    if not any(p.is_merge for p in plans):
        return {}
    joins: list[tuple[str, Join]] = []
    first, _, _ = _build(plans, [_knobs(p) for p in plans if p.is_compute], max, joins, depths={})
    beats = beats_per_image(plans)
    ref = 0
    for _ in range(2):
        ref = _one_image(first, beats, ref)
    return {name: [max(n, 1) for n in join.need] for name, join in joins}


def with_deep_branch_fifos(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """The plans with every merge's branch FIFOs a whole image deeper than `branch_needs`: the
    II that `fifo_depths` then reaches at emit time, for ranking configurations (`hw.allocate`).
    Without depths a join's FIFOs are unbounded and never hold a branch back, so a bottleneck
    after the join never slows the layers before the fork: the model then drifts without a
    steady state (resnet_digits within 156 multipliers)."""
    need = branch_needs(plans)
    deep = max(beats_per_image(plans), 2) + 1
    return [_with_branch_fifos(p, tuple(n + deep for n in need[p.name])) if p.name in need else p for p in plans]


def _with_branch_fifos(plan: LayerPlan, depths: tuple[int, ...]) -> LayerPlan:
    assert plan.kind is not None
    return plan.kind.with_branch_fifos(plan, depths)


def queued(plan: LayerPlan, windows: int | None = None, pixels: int | None = None) -> LayerPlan:
    """A convolution's plan with a FIFO of `windows` windows before its engine and one of
    `pixels` input pixels before its padding (`Kind.with_fifos`; 0: none, None: as it is)."""
    assert plan.kind is not None
    return plan.kind.with_fifos(plan, windows=windows, pixels=pixels)


MAX_WINDOW_FIFO = 64
"""The deepest FIFO of windows `window_fifos` considers (LUT RAM: a window per entry)."""


def _window_spacing(plan: LayerPlan) -> int:
    """The fewest cycles between two windows of one image at one pixel a cycle (K2C.Conv):
    `sw` within a row, `sh*w - (w2-1)*sw` from a row's last window to the next row's first."""
    _, w, _, kw, sh, sw = generator_geometry(plan)
    w2 = (w - kw) // sw + 1
    return min(sw, sh * w - (w2 - 1) * sw)


def window_fifos(plans: Sequence[LayerPlan]) -> dict[str, int]:
    """The depth of the FIFO of windows between each convolution's window generator and its
    engine (0: none), for this configuration.

    A window generator holds one window (its shift register); when its engine takes longer per window (`G*b`)
    than the windows are apart, a row's windows back up and the generator stops its input,
    which holds every layer before it back (the thesis CNN balanced within 217 multipliers:
    II 358 against its layers' bound of 288). A FIFO of windows lets the generator run
    ahead. The depth is the smallest common one that gives the II of FIFOs `MAX_WINDOW_FIFO`
    deep (doubling, then bisection, on the exact model); then each layer whose FIFO the II
    does not need loses it. Branch FIFOs are taken as the plans give them (`with_fifo_depths`
    first; `plan_network` then sizes them again).
    """
    convs = [p for p in plans if p.is_compute and p.is_windowed and p.steps > _window_spacing(p)]
    if not convs:
        return {}

    def ii(depths: Mapping[str, int]) -> float:
        trial = [queued(p, windows=depths.get(p.name, 0)) if p.is_compute and p.is_windowed else p for p in plans]
        return steady_state(trial)[0]  # the plans' branch FIFO depths (with_fifo_depths)

    def common(d: int) -> dict[str, int]:
        return {p.name: d for p in convs}

    best = ii(common(MAX_WINDOW_FIFO))
    if ii({}) <= best:
        return {}
    lo, hi = 0, 2
    while hi < MAX_WINDOW_FIFO and ii(common(hi)) > best:
        lo, hi = hi, min(2 * hi, MAX_WINDOW_FIFO)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ii(common(mid)) > best else (lo, mid)
    depths = common(hi)
    for p in convs:
        trial = {**depths, p.name: 0}
        if ii(trial) <= best:
            depths = trial
    return {name: d for name, d in depths.items() if d}


MAX_INPUT_FIFO = 64
"""The deepest FIFO of input pixels `input_fifos` considers."""


def _window_bits(plan: LayerPlan) -> int:
    """Values per window entry (a depthwise window holds every channel's)."""
    assert plan.kind is not None
    return plan.kind.window_values(plan)


def input_fifos(plans: Sequence[LayerPlan], windows: Mapping[str, int]) -> dict[str, int]:
    """The convolutions whose FIFO of windows (`windows`, from `window_fifos`) a FIFO of input
    pixels in front of the padding and the window generator replaces, with its depth.

    Both let the layers before the generator run ahead while the engine is busy, but a pixel
    is a window's `kh*kw`-th part: a FIFO of pixels is far narrower, and narrowness is what
    place and route needs. Every LUT-RAM cell of a queue takes the queue's write enable and
    addresses, so a queue of wide windows spreads those nets over the chip (the thesis CNN at
    130 multipliers on ECP5: conv_2's 3 windows of 2,304 bits, 576 LUT-RAM cells along the
    DSP rows, its write enable the critical path at 81.7 MHz; 7 pixels of 256 bits give the
    same II 464). A layer's FIFO of windows is replaced where the shallowest FIFO of pixels
    that keeps the II holds fewer bits; layers in plan order, each with the choices before it.
    """
    choice: dict[str, int] = {}

    def ii(inputs: Mapping[str, int]) -> float:
        trial = [
            queued(p, 0 if p.name in inputs else windows.get(p.name, 0), inputs.get(p.name, 0))
            if p.is_compute and p.is_windowed
            else p
            for p in plans
        ]
        return steady_state(trial)[0]

    best = ii({})
    for p in plans:
        if p.name not in windows or ii({**choice, p.name: MAX_INPUT_FIFO}) > best:
            continue
        lo, hi = 0, MAX_INPUT_FIFO  # ii(hi) <= best; smallest such depth by bisection
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ii({**choice, p.name: mid}) <= best else (mid, hi)
        if hi * p.input_shape[-1] < windows[p.name] * _window_bits(p):
            choice[p.name] = hi
    return choice


def with_window_fifos(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """The plans with every convolution's FIFO set: of windows by `window_fifos`, or instead of
    input pixels where `input_fifos` finds that narrower."""
    convs = [p.is_compute and p.is_windowed for p in plans]
    plans = [queued(p, pixels=0) if conv else p for p, conv in zip(plans, convs)]
    windows = window_fifos(plans)
    inputs = input_fifos(plans, windows)
    return [
        queued(p, 0 if p.name in inputs else windows.get(p.name, 0), inputs.get(p.name, 0)) if conv else p
        for p, conv in zip(plans, convs)
    ]


def with_fifo_depths(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """The plans with every merge's branch FIFOs (`Kind.with_branch_fifos`) sized by `fifo_depths`."""
    depths = fifo_depths(plans)
    return [_with_branch_fifos(p, depths[p.name]) if p.name in depths else p for p in plans]


def with_fifos(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """The plans with every FIFO `network.plan_network` emits sized: the branch FIFOs, then the
    convolutions' FIFOs (which need the joins' depths to be timed), then the branch FIFOs
    again for the II those reach."""
    return with_fifo_depths(with_window_fifos(with_fifo_depths(plans)))


def timings(configs: Sequence[Sequence[LayerPlan]]) -> list[tuple[int, float]]:
    """(latency, II) of many configurations (plans) of one network in one vectorised run."""
    if not configs:
        return []
    latency, ii = timing_batch(configs[0], _knob_arrays(configs))
    return [(int(latency[i]), float(ii[i])) for i in range(len(configs))]


LONG_BATCH_IMAGES = 512
"""Images the batch model runs on, together, the configurations behind a join that are not
periodic after the first batch (then the scalar model, one by one)."""


def timing_batch(
    plans: Sequence[LayerPlan], knobs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """Latency and II arrays for configurations given as knob arrays: per compute layer
    (S = G*b, D, Q), each an array with one element per configuration; `plans` gives
    the geometry (any configuration of the network)."""
    n = len(knobs[0][0]) if knobs else 1
    accepts, outputs, refs, lag, at = _simulate_batch(plans, knobs, n, None)
    ref = np.stack(refs)  # (images, configs)
    idx = np.arange(n)
    safe = np.maximum(lag, 1)
    ii = (ref[np.minimum(at + safe, len(refs) - 1), idx] - ref[at, idx]) / safe
    slow = np.nonzero(lag == 0)[0]
    if slow.size:
        # Long transients: the batch goes on for those configurations, together. In a chain
        # it jumps each one's drift (`_drift_batch`); behind a join the model goes image by
        # image (the scalar model too), until every one is periodic.
        sub = _columns(knobs, n, slow)
        if any(p.is_merge for p in plans):
            _, _, refs2, lag2, at2 = _simulate_batch(plans, sub, slow.size, None, max_images=LONG_BATCH_IMAGES)
            ref2, done = np.stack(refs2), lag2 > 0
            rows = np.arange(slow.size)[done]
            ii[slow[done]] = (ref2[at2[done] + lag2[done], rows] - ref2[at2[done], rows]) / lag2[done]
        else:
            ii2, lag2 = _drift_batch(plans, sub, slow.size)
            done = lag2 > 0
            ii[slow[done]] = ii2[done]
        lag[slow[done]] = lag2[done]
    for i in np.nonzero(lag == 0)[0]:  # a period longer than the batch looks for: the scalar model
        one = [
            (int(np.broadcast_to(s, (n,))[i]), int(np.broadcast_to(d, (n,))[i]), int(np.broadcast_to(q, (n,))[i]))
            for s, d, q in knobs
        ]
        ii[i] = steady_state(plans, one)[0]
    latency = np.broadcast_to(outputs[0] - accepts[0], (n,))
    return latency.astype(np.int64), ii


Config = tuple[tuple[int, ...], tuple[int, ...]]
"""(pe per compute layer, cycles per compute layer)."""


def figures_many(plans: Sequence[LayerPlan], configs: Sequence[Config]) -> list[HwFigures]:
    """HwFigures of many (pe, cycles) configurations of the network `plans` (whose own
    knobs are ignored; their pipeline levels hold): timing vectorised, deduplicated by
    (S, D, Q) per layer; resources memoised per layer and knob pair."""
    compute = [i for i, p in enumerate(plans) if p.is_compute]
    if not configs:
        return []
    timed: dict[tuple[int, int, int], tuple[int, int, int]] = {}

    def knobs(i: int, p: int, b: int) -> tuple[int, int, int]:
        if (i, p, b) not in timed:
            timed[(i, p, b)] = _knobs(plans[i].with_knobs(p, b))
        return timed[(i, p, b)]

    keys = [tuple(knobs(i, p, b) for i, p, b in zip(compute, pes, cyc)) for pes, cyc in configs]
    unique = list(dict.fromkeys(keys))
    latency, ii = timing_batch(plans, _as_arrays(unique))
    where = {k: n for n, k in enumerate(unique)}
    runs = runs_of(plans)
    fixed = [layer_resources(p, runs) for p in plans if not p.is_compute]
    top = top_fifo_bits(plans)
    cache: dict[tuple[int, int, int], LayerResources] = {}

    def res(i: int, p: int, b: int) -> LayerResources:
        if (i, p, b) not in cache:
            cache[(i, p, b)] = layer_resources(plans[i].with_knobs(p, b), runs)
        return cache[(i, p, b)]

    out = []
    for (pes, cyc), key in zip(configs, keys):
        n = where[key]
        layers = [res(i, p, b) for i, p, b in zip(compute, pes, cyc)]
        out.append(_assemble(list(pes), list(cyc), int(latency[n]), float(ii[n]), layers, fixed, plans, top))
    return out


def _assemble(
    pes: list[int],
    cyc: list[int],
    latency: int,
    ii: float,
    compute_res: Sequence[LayerResources],
    fixed: Sequence[LayerResources],
    plans: Sequence[LayerPlan],
    top: int | None = None,
) -> HwFigures:
    by_name = {r.name: r for r in [*compute_res, *fixed]}
    layers = [by_name[p.name] for p in plans]
    top = top_fifo_bits(plans) if top is None else top  # the same for every configuration
    return HwFigures(
        parallelism=pes,
        cycles=cyc,
        latency=latency,
        ii=ii,
        multipliers=sum(r.multipliers for r in layers),
        macs=sum(r.macs for r in layers),
        memory_bits=sum(r.memory_bits for r in layers) + top,
        rom_bits=sum(r.rom_bits for r in layers),
        line_buffer_bits=sum(r.line_buffer_bits for r in layers),
        register_bits=sum(r.register_bits for r in layers),
        fifo_bits=sum(r.fifo_bits for r in layers) + top,
        block_fifo_bits=sum(r.block_fifo_bits for r in layers),
        logic_cells=sum(r.logic_cells for r in layers),
        layers=layers,
    )


def figures(plans: Sequence[LayerPlan], latency: int | None = None, ii: float | None = None) -> HwFigures:
    """Everything the model says about the configuration in `plans`."""
    if latency is None or ii is None:
        t = timing(plans)
        latency, ii = t.first_latency, t.ii
    compute = [p for p in plans if p.is_compute]
    runs = runs_of(plans)
    return _assemble(
        [p.engine_knobs.pe for p in compute],
        [p.engine_knobs.cycles for p in compute],
        latency,
        ii,
        [layer_resources(p, runs) for p in compute],
        [layer_resources(p, runs) for p in plans if not p.is_compute],
        plans,
    )
