#!/usr/bin/env python3
"""Independent integer model of docs/guide/contract.md for the example network.

Plain python3 integers, standard library only, written without looking at the
Clash code. It

* holds the example's weights (raw integers, format 1,7,8: value * 256),
* writes them as weights/<layer>.mem (``--write-mem``) or checks that the
  existing .mem files hold exactly them (default),
* reads input.txt (Sim protocol: N, then N lines of raw inputs) and prints the
  expected Sim output: ``accept_cycle output_cycle class raw...``, the cycles
  from the model of the documented K2C.Engine rules in
  ../test/engine/reference.py (inputs back to back, downstream always ready).

Each layer has two knobs: p processing elements and b cycles per group
(docs/reference/project.md, "Weight memory files"); the ROM words and the
accumulation follow from them. A third, the adder levels per pipeline stage,
sets only the timing (dense_0 is pipelined, dense_1 is not).

Usage: python3 reference.py [--write-mem] < input.txt > expected.txt
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "engine"))
from reference import EngineModel, pipe_depth, queue_depth  # noqa: E402  (the engine's cycle rules)

W, FRAC = 16, 8                    # format 1,7,8 for inputs, weights, outputs
LO, HI = -(1 << (W - 1)), (1 << (W - 1)) - 1
ONE = 1 << FRAC


def q(x):
    """A real number in 1,7,8 (floor(x * 2^8 + 1/2), saturated)."""
    from fractions import Fraction
    return max(LO, min(HI, int((Fraction(x) * ONE + Fraction(1, 2)).__floor__())))


# Layers: name, p, b, adder levels per pipeline stage (0: none), activation,
# kernel rows (one per neuron: weights, bias).
LAYERS = [
    ("dense_0", 2, 2, 1, "relu", [
        ([1, 0, 0, 0], 0),                  # x0
        ([0, 1, 0, 0], 0),                  # x1
        ([0, 0, 2, -0.5], 0.25),            # saturates for large x2
        ([-1, 0, 0, 0.75], -1.5),           # bias decides the sign near 0
        ([0.5, 0.5, -1.25, 1 / 256], 2 / 256),  # half-LSB products: rounding ties
    ]),
    ("dense_1", 3, 2, 0, "hard_sigmoid", [
        ([1, -1, 0, 0, 0], 0),              # x0 - x1: both clip points (+-3), negatives
        ([0, 0, 0.5, -0.25, 0.125], -0.75),
        ([0, -2, 2, 0, -1 / 256], 0.5),     # saturates both ways (incl. -128.0)
    ]),
]


def quantized(layer):
    name, p, b, levels, act, rows = layer
    return name, p, b, levels, act, [([q(w) for w in ws], q(bias)) for ws, bias in rows]


def ceil_div(a, b):
    return -(-a // b)


def mem_lines(p, b, rows):
    """G*b words; word g*b + t holds, for PE j, neuron g*p + j's chunk t (ch
    weights) and a bias field (the bias in chunk 0, else 0). Packed as Clash
    packs Vec p (Vec ch w, bias): PE 0 in the MSBs. Padding is zero."""
    n = len(rows[0][0])
    ch, groups = ceil_div(n, b), ceil_div(len(rows), p)
    padded = [(ws + [0] * (b * ch - n), bias) for ws, bias in rows]
    padded += [([0] * (b * ch), 0)] * (groups * p - len(rows))
    for g in range(groups):
        for t in range(b):
            bits = ""
            for ws, bias in padded[g * p:(g + 1) * p]:
                for v in ws[t * ch:(t + 1) * ch] + [bias if t == 0 else 0]:
                    bits += format(v & ((1 << W) - 1), "0%db" % W)
            yield bits


def requantize(acc, cf):
    s = cf - FRAC
    r = (acc + (1 << (s - 1))) >> s if s > 0 else acc << -s
    return max(LO, min(HI, r))


def hard_sigmoid(r):
    """clip(x + 3, 0, 6) / 6, rounded half up: floor((2 v 2^fo + 6 2^fo) / (12 2^fo))."""
    v = max(0, min(6 * ONE, r + 3 * ONE))
    return max(LO, min(HI, (2 * v * ONE + 6 * ONE) // (12 * ONE)))


ACTIVATIONS = {"relu": lambda r: max(r, 0), "hard_sigmoid": hard_sigmoid, "linear": lambda r: r}


def layer_forward(layer, xs):
    _, _, _, _, act, rows = layer
    cf = 2 * FRAC
    out = []
    # The accumulators have the exact width, so the chunk-by-chunk saturating
    # accumulation never clamps and equals the exact sum.
    for ws, b in rows:
        acc = sum(x * w for x, w in zip(xs, ws)) + (b << FRAC)
        out.append(ACTIVATIONS[act](requantize(acc, cf)))
    return out


def schedule(layers, n):
    """Accept and output cycles of n back-to-back samples through the chain of
    engines (layers: (G, b, ch, levels) each), downstream always ready."""
    engines = [EngineModel(groups * b, pipe_depth(ch, levels, b, 0, groups),
                           queue_depth(ch, levels, b, groups * b, 0, groups))
               for groups, b, ch, levels in layers]
    accepts, outputs, t = [], [], 0
    while len(outputs) < n:
        readies = [e.ready() for e in engines] + [True]
        offered = [len(accepts) if len(accepts) < n else None]
        offered += [e.output() for e in engines]
        if readies[0] and offered[0] is not None:
            accepts.append(t)
        if offered[-1] is not None:
            outputs.append(t)
        for i, e in enumerate(engines):
            e.cycle(offered[i], readies[i + 1])
        t += 1
    return accepts, outputs


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    layers = [quantized(l) for l in LAYERS]
    for name, p, b, _, _, rows in layers:
        path = os.path.join(here, "weights", name + ".mem")
        lines = list(mem_lines(p, b, rows))
        if "--write-mem" in sys.argv:
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
        elif open(path).read().split() != lines:
            sys.exit("%s does not hold the weights in reference.py" % path)

    n = int(sys.stdin.readline())
    accepts, outputs = schedule([(ceil_div(len(rows), p), b, ceil_div(len(rows[0][0]), b), levels)
                                 for _, p, b, levels, _, rows in layers], n)
    for accept, output in zip(accepts, outputs):
        xs = [int(t) for t in sys.stdin.readline().split()]
        for layer in layers:
            xs = layer_forward(layer, xs)
        cls = max(range(len(xs)), key=lambda j: (xs[j], -j))
        print(accept, output, cls, *xs)


if __name__ == "__main__":
    main()
