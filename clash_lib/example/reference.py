#!/usr/bin/env python3
"""Independent integer model of docs/contract.md for the example network.

Plain python3 integers, standard library only, written without looking at the
Clash code. It

* holds the example's weights (raw integers, format 1,7,8: value * 256),
* writes them as weights/<layer>.mem (``--write-mem``) or checks that the
  existing .mem files hold exactly them (default),
* reads input.txt (Sim protocol: N, then N lines of raw inputs) and prints the
  expected Sim output: ``accept_cycle output_cycle class raw...``, the cycles
  from a model of the documented K2C.Dense schedule (inputs back to back,
  downstream always ready).

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


# Layers: name, p, activation, kernel rows (one per neuron: weights, bias).
LAYERS = [
    ("dense_0", 2, "relu", [
        ([1, 0, 0, 0], 0),                  # x0
        ([0, 1, 0, 0], 0),                  # x1
        ([0, 0, 2, -0.5], 0.25),            # saturates for large x2
        ([-1, 0, 0, 0.75], -1.5),           # bias decides the sign near 0
        ([0.5, 0.5, -1.25, 1 / 256], 2 / 256),  # half-LSB products: rounding ties
    ]),
    ("dense_1", 3, "sigmoid", [
        ([1, -1, 0, 0, 0], 0),              # x0 - x1: breakpoints, negatives
        ([0, 0, 0.5, -0.25, 0.125], -0.75),
        ([0, -2, 2, 0, -1 / 256], 0.5),     # saturates both ways (incl. -128.0)
    ]),
]


def quantized(layer):
    name, p, act, rows = layer
    return name, p, act, [([q(w) for w in ws], q(b)) for ws, b in rows]


def mem_lines(p, rows):
    """Pack as Clash packs Vec p (Vec n w, w): PE 0 in the MSBs."""
    n = len(rows[0][0])
    g = -(-len(rows) // p)
    padded = rows + [([0] * n, 0)] * (g * p - len(rows))
    for k in range(g):
        bits = ""
        for ws, b in padded[k * p:(k + 1) * p]:
            for v in ws + [b]:
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
    _, _, act, rows = layer
    cf = 2 * FRAC
    out = []
    for ws, b in rows:
        acc = sum(x * w for x, w in zip(xs, ws)) + (b << FRAC)
        out.append(ACTIVATIONS[act](requantize(acc, cf)))
    return out


def schedule(words, n):
    """Accept and output cycles of n back-to-back samples through a chain of
    K2C.Dense controllers with g = words[i] ROM words each: Idle (ready) ->
    Busy 0 .. Busy g-1 -> Full (until downstream ready) -> Idle."""
    phases = ["idle"] * len(words)
    accepts, outputs, t = [], [], 0
    while len(outputs) < n:
        ready = [ph == "idle" for ph in phases]
        valid = [len(accepts) < n] + [ph == "full" for ph in phases[:-1]]
        taken = ready[1:] + [True]                     # downstream always ready
        if ready[0] and valid[0]:
            accepts.append(t)
        if phases[-1] == "full":
            outputs.append(t)
        nxt = []
        for ph, g, r, v, d in zip(phases, words, ready, valid, taken):
            if ph == "idle":
                nxt.append(0 if r and v else "idle")
            elif ph == "full":
                nxt.append("idle" if d else "full")
            else:
                nxt.append("full" if ph == g - 1 else ph + 1)
        phases, t = nxt, t + 1
    return accepts, outputs


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    layers = [quantized(l) for l in LAYERS]
    for name, p, _, rows in layers:
        path = os.path.join(here, "weights", name + ".mem")
        lines = list(mem_lines(p, rows))
        if "--write-mem" in sys.argv:
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
        elif open(path).read().split() != lines:
            sys.exit("%s does not hold the weights in reference.py" % path)

    n = int(sys.stdin.readline())
    accepts, outputs = schedule([-(-len(rows) // p) for _, p, _, rows in layers], n)
    for accept, output in zip(accepts, outputs):
        xs = [int(t) for t in sys.stdin.readline().split()]
        for layer in layers:
            xs = layer_forward(layer, xs)
        cls = max(range(len(xs)), key=lambda j: (xs[j], -j))
        print(accept, output, cls, *xs)


if __name__ == "__main__":
    main()
