#!/usr/bin/env python3
"""Independent integer model of docs/contract.md for the example network.

Plain python3 integers, standard library only, written without looking at the
Clash code. It

* holds the example's weights (raw integers, format 1,7,8: value * 256),
* writes them as weights/<layer>.mem (``--write-mem``) or checks that the
  existing .mem files hold exactly them (default),
* reads input.txt (Sim protocol: N, then N lines of raw inputs) and prints the
  expected Sim output: ``accept_cycle output_cycle class raw...``, the cycles
  from a model of the documented K2C.Engine rules (inputs back to back,
  downstream always ready).

Each layer has two knobs: p processing elements and b cycles per group
(docs/architecture.md, "Two space-time knobs"); the ROM words and the
accumulation follow from them.

Usage: python3 reference.py [--write-mem] < input.txt > expected.txt
"""
import os
import sys

W, FRAC = 16, 8                    # format 1,7,8 for inputs, weights, outputs
LO, HI = -(1 << (W - 1)), (1 << (W - 1)) - 1
ONE = 1 << FRAC


def q(x):
    """A real number in 1,7,8 (floor(x * 2^8 + 1/2), saturated)."""
    from fractions import Fraction
    return max(LO, min(HI, int((Fraction(x) * ONE + Fraction(1, 2)).__floor__())))


# Layers: name, p, b, activation, kernel rows (one per neuron: weights, bias).
LAYERS = [
    ("dense_0", 2, 2, "relu", [
        ([1, 0, 0, 0], 0),                  # x0
        ([0, 1, 0, 0], 0),                  # x1
        ([0, 0, 2, -0.5], 0.25),            # saturates for large x2
        ([-1, 0, 0, 0.75], -1.5),           # bias decides the sign near 0
        ([0.5, 0.5, -1.25, 1 / 256], 2 / 256),  # half-LSB products: rounding ties
    ]),
    ("dense_1", 3, 2, "sigmoid", [
        ([1, -1, 0, 0, 0], 0),              # x0 - x1: breakpoints, negatives
        ([0, 0, 0.5, -0.25, 0.125], -0.75),
        ([0, -2, 2, 0, -1 / 256], 0.5),     # saturates both ways (incl. -128.0)
    ]),
]


def quantized(layer):
    name, p, b, act, rows = layer
    return name, p, b, act, [([q(w) for w in ws], q(bias)) for ws, bias in rows]


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


def sigmoid_plan(r):
    c = lambda num, den: (2 * num * ONE + den) // (2 * den)   # floor(v*2^fo + 1/2)
    a = abs(r)
    if a >= 5 * ONE:
        y = ONE
    elif a >= c(19, 8):
        y = (a >> 5) + c(27, 32)
    elif a >= ONE:
        y = (a >> 3) + c(5, 8)
    else:
        y = (a >> 2) + c(1, 2)
    if r < 0:
        y = ONE - y
    return max(LO, min(HI, y))


ACTIVATIONS = {"relu": lambda r: max(r, 0), "sigmoid": sigmoid_plan, "linear": lambda r: r}


def layer_forward(layer, xs):
    _, _, _, act, rows = layer
    cf = 2 * FRAC
    out = []
    # The accumulators have the exact width, so the chunk-by-chunk saturating
    # accumulation never clamps and equals the exact sum.
    for ws, b in rows:
        acc = sum(x * w for x, w in zip(xs, ws)) + (b << FRAC)
        out.append(ACTIVATIONS[act](requantize(acc, cf)))
    return out


class Engine:
    """The documented cycle rules of K2C.Engine (its module header): a window
    takes G*b steps; results go to the output register O, or to R when O is
    occupied; input ready is registered state only."""

    def __init__(self, groups, b):
        self.words, self.b = groups * b, b
        self.busy, self.word, self.chunk = False, 0, 0
        self.r_full = self.o_valid = False
        self.held = self.r_item = self.o_item = None

    def ready(self):
        return not self.busy or (self.word == self.words - 1 and not self.r_full)

    def cycle(self, offered, ready_out):
        last_word = self.word == self.words - 1
        o_free = not self.o_valid or ready_out
        stall = self.busy and self.chunk == self.b - 1 and self.r_full and not o_free
        step = self.busy and not stall
        done = step and last_word
        transfer = self.r_full and o_free
        direct = done and not self.r_full and o_free
        accepted = self.ready() and offered is not None
        o_valid = transfer or direct or (self.o_valid and not ready_out)
        o_item = self.r_item if transfer else self.held if direct else self.o_item
        r_full = (done and not direct) or (self.r_full and not transfer)
        r_item = self.held if done and not direct else self.r_item
        if step:
            self.word = (self.word + 1) % self.words
            self.chunk = (self.chunk + 1) % self.b
        self.busy = accepted or (self.busy and not done)
        if accepted:
            self.held = offered
        self.o_valid, self.o_item, self.r_full, self.r_item = o_valid, o_item, r_full, r_item


def schedule(layers, n):
    """Accept and output cycles of n back-to-back samples through the chain of
    engines (layers: (G, b) each), downstream always ready."""
    engines = [Engine(groups, b) for groups, b in layers]
    accepts, outputs, t = [], [], 0
    while len(outputs) < n:
        readies = [e.ready() for e in engines] + [True]
        offered = [len(accepts) if len(accepts) < n else None]
        offered += [e.o_item if e.o_valid else None for e in engines]
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
    for name, p, b, _, rows in layers:
        path = os.path.join(here, "weights", name + ".mem")
        lines = list(mem_lines(p, b, rows))
        if "--write-mem" in sys.argv:
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
        elif open(path).read().split() != lines:
            sys.exit("%s does not hold the weights in reference.py" % path)

    n = int(sys.stdin.readline())
    accepts, outputs = schedule([(ceil_div(len(rows), p), b) for _, p, b, _, rows in layers], n)
    for accept, output in zip(accepts, outputs):
        xs = [int(t) for t in sys.stdin.readline().split()]
        for layer in layers:
            xs = layer_forward(layer, xs)
        cls = max(range(len(xs)), key=lambda j: (xs[j], -j))
        print(accept, output, cls, *xs)


if __name__ == "__main__":
    main()
