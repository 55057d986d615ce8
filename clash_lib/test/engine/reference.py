#!/usr/bin/env python3
"""Independent model of K2C.Engine, K2C.Dense and K2C.Conv (stdlib only).

It implements, from the documentation and not from the Haskell code,

* the arithmetic: docs/guide/contract.md per filter, with the chunked saturating
  accumulator of K2C.Filter: acc_0 = sat(S_0), acc_t = sat(acc_(t-1) + S_t),
  S_t = sum of chunk t's exact products + bias field t (bias in chunk 0 only),
  all aligned to the accumulator's fraction bits;
* the ROM layout of docs/reference/project.md ("Weight memory files");
* the cycle rules of K2C.Engine (its module header: steps, pipeline depth D,
  output queue of depth Q), driven by the same input
  schedule and downstream-ready pattern as the simulation.

Usage:
  reference.py gen DIR      write DIR/<case>.mem, DIR/<case>.in and DIR/cases.json
  reference.py check DIR    compare every DIR/<case>.out with the model; exit 1
                            on any difference
  reference.py haskell DIR  write the case modules DIR/Cases*.hs (the engine
                            test-suite's, committed in clash_lib/test/engine)

The cabal test-suite `engine` (TestEngine.hs) runs gen, the cases in the Clash
simulation (which write DIR/<case>.out) and check.
"""
import json
import os
import random
import sys

# Formats as Clash types: (integer bits incl. sign, fraction bits).
F178 = (8, 8)    # 1,7,8
F134 = (4, 4)    # 1,3,4
F129 = (3, 9)    # 1,2,9


def clog2(n):
    return (n - 1).bit_length()


def lo(fmt):
    return -(1 << (sum(fmt) - 1))


def hi(fmt):
    return (1 << (sum(fmt) - 1)) - 1


def sat(x, fmt):
    return max(lo(fmt), min(hi(fmt), x))


def ceil_div(a, b):
    return -(-a // b)


def exact_acc(a, w, bias, k):
    """The contract's exact accumulator (Clash counting), bias wider allowed."""
    cf = max(a[1] + w[1], bias[1])
    ci = max(a[0] + w[0], bias[0]) + clog2(k + 1) + 1
    return (ci, cf)


# ---------------------------------------------------------------- arithmetic

def requantize(acc, cf, out):
    s = cf - out[1]
    r = (acc + (1 << (s - 1))) >> s if s > 0 else acc << -s
    return sat(r, out)


def hard_sigmoid(r, out):
    """docs/guide/contract.md's hard_sigmoid on the output format's raw value:
    v = clip(r + 3*2^f, 0, 6*2^f), y = floor((2 v 2^f + 6 2^f) / (12 2^f)),
    saturated."""
    one = 1 << out[1]
    v = max(0, min(6 * one, r + 3 * one))
    return sat((2 * v * one + 6 * one) // (12 * one), out)


def hard_sigmoid_width(out):
    """The work width the compiler gives K2C.Relu.hardSigmoid (bits + 2 frac + 8)."""
    return sum(out) + 2 * out[1] + 8


def finish(case, acc):
    fn = case["finish"]
    if fn == "acc":
        return acc
    r = requantize(acc, case["acc"][1], case["out"])
    if fn == "linear":
        return r
    if fn == "relu":
        return max(r, 0)
    if fn == "hard_sigmoid":
        return hard_sigmoid(r, case["out"])
    raise ValueError(fn)


def filter_result(case, window, ws, bias):
    """One filter on one window: b chunks, saturating accumulator."""
    k, b = case["k"], case["b"]
    ch = ceil_div(k, b)
    af, wf = case["a"][1], case["w"][1]
    bf = case["bias"][1]
    ci, cf = case["acc"]
    xs = window + [0] * (b * ch - k)
    ws = ws + [0] * (b * ch - k)
    acc = 0
    for t in range(b):
        s = sum(x * w for x, w in zip(xs[t * ch:(t + 1) * ch], ws[t * ch:(t + 1) * ch]))
        s <<= cf - (af + wf)
        if t == 0:
            s += bias << (cf - bf)
        acc = sat((acc if t > 0 else 0) + s, case["acc"])
    return finish(case, acc)


def engine_values(case, window):
    return [filter_result(case, window, ws, bias)
            for ws, bias in zip(case["kernel"], case["biases"])]


def conv_windows(case, image):
    """Windows of a valid conv in raster order, flattened (i, j, c) row-major."""
    h, w = case["h"], case["w_img"]
    kh, kw, sh, sw = case["kh"], case["kw"], case["sh"], case["sw"]
    h2, w2 = (h - kh) // sh + 1, (w - kw) // sw + 1
    out = []
    for i in range(h2):
        for j in range(w2):
            win = []
            for r in range(kh):
                for s in range(kw):
                    win += image[(i * sh + r) * w + (j * sw + s)]
            out.append(win)
    return out


# ---------------------------------------------------------------- ROM layout

def mem_lines(case):
    f, k, p, b = case["f"], case["k"], case["p"], case["b"]
    ch, groups = ceil_div(k, b), ceil_div(f, p)
    wbits, bbits = sum(case["w"]), sum(case["bias"])
    lines = []
    for g in range(groups):
        for t in range(b):
            bits = ""
            for j in range(p):
                n = g * p + j
                for e in range(ch):
                    i = t * ch + e
                    v = case["kernel"][n][i] if n < f and i < k else 0
                    bits += format(v & ((1 << wbits) - 1), "0%db" % wbits)
                v = case["biases"][n] if n < f and t == 0 else 0
                bits += format(v & ((1 << bbits) - 1), "0%db" % bbits)
            lines.append(bits)
    return lines


# ---------------------------------------------------------------- timing

def pipe_depth(ch, levels, b, t=0, g=1):
    """D (K2C.Engine's PipeDepth): cycles from a window's last step to its result
    entering the output queue; 0 without pipelining, else two operand registers, two
    product registers, one register per `levels` adder-tree levels (and one after the
    last level when b >= 2 and `levels` does not divide the tree: TreeStages), the
    accumulators and the finish's two registers (requantized, activated), and `t` more
    (a table activation's block RAM output register: K2C.Activation.Finish), and with
    g >= 2 groups the result register the queue is written from."""
    if levels == 0:
        return 0
    whole, rest = divmod(clog2(ch + 1), levels)
    return 7 + t + whole + int(b >= 2 and rest > 0) + int(g >= 2)


def queue_depth(ch, levels, b, steps, t=0, g=1, e=0):
    """Q (K2C.Engine's QueueDepth): the output queue's depth, the most windows in flight;
    `e` = 1 when the engine loads a window the cycle after it accepted it (a conv's engine
    behind its window generator: K2C.Engine.afterAccept)."""
    return 2 + (pipe_depth(ch, levels, b, t, g) + e + 1) // steps


class EngineModel:
    """K2C.Engine's documented cycle rules, one call of `cycle` per cycle."""

    def __init__(self, words, depth, queue):
        self.words, self.depth, self.queue_depth = words, depth, queue
        self.busy, self.word, self.outstanding = False, 0, 0
        self.held = None
        self.t = 0
        self.pending = []   # (cycle the result enters the queue, item)
        self.queue = []     # (first cycle at the queue's output, item)

    def ready(self):
        return ((not self.busy) or self.word == self.words - 1) and self.outstanding < self.queue_depth

    def output(self):
        """The item at the output in this cycle (valid), or None."""
        return self.queue[0][1] if self.queue and self.queue[0][0] <= self.t else None

    def cycle(self, offered, ready_out):
        """offered: None or an item id. Returns (accepted, moved_output_item)."""
        t = self.t
        accepted = self.ready() and offered is not None
        head_valid = bool(self.queue) and self.queue[0][0] <= t
        moved = self.queue.pop(0)[1] if head_valid and ready_out else None
        if self.busy:   # a step: the engine never stalls
            if self.word == self.words - 1:
                self.pending.append((t + self.depth, self.held))
                self.busy = False
            self.word = (self.word + 1) % self.words
        for entry in [e for e in self.pending if e[0] == t]:
            self.queue.append((t + 1, entry[1]))
            self.pending.remove(entry)
        if accepted:
            self.held, self.busy = offered, True
        self.outstanding += int(accepted) - int(moved is not None)
        self.t += 1
        return accepted, moved


def engine_model(case, e=0):
    """The engine of a case; `e` = 1: it loads windows the cycle after the accept, which
    delays every result by that cycle (K2C.Engine.afterAccept)."""
    steps = case["groups"] * case["b"]
    t = case["table_regs"]
    return EngineModel(steps, pipe_depth(case["ch"], case["levels"], case["b"], t, case["groups"]) + e,
                       queue_depth(case["ch"], case["levels"], case["b"], steps, t, case["groups"], e))


def engine_trace(case, windows):
    """Expected trace lines of an engine case (same format as Driver.hs)."""
    model = engine_model(case)
    schedule = []
    for gap, i in zip(case["gaps"], range(len(windows))):
        schedule += [None] * gap + [("item", i)]
    pattern = case["pattern"]
    lines, outputs, t, pos = [], 0, 0, 0
    values = [engine_values(case, w) for w in windows]
    while outputs < len(windows):
        if t > 100000:
            raise RuntimeError("model does not finish")
        item = schedule[pos] if pos < len(schedule) else None
        offered = item[1] if item else None
        ready_out = pattern[t] == "1" if t < len(pattern) else True
        accepted, moved = model.cycle(offered, ready_out)
        if accepted:
            lines.append("A %d" % t)
        if moved is not None:
            lines.append(" ".join(["O", str(t)] + [str(v) for v in values[moved]]))
            outputs += 1
        if item is None or accepted:
            pos += 1
        t += 1
    return lines


# ---------------------------------------------------------------- cases

def rand_raw(rng, fmt, extreme=0.1):
    u = rng.random()
    if u < extreme / 2:
        return lo(fmt)
    if u < extreme:
        return hi(fmt)
    return rng.randint(lo(fmt), hi(fmt))


def rand_pattern(rng, length, busy):
    if not busy:
        return "-"
    return "".join("1" if rng.random() < 0.5 else "0" for _ in range(length))


def make_engine_case(rng, name, f, k, p, b, a, w, bias, acc, fn, out, n_windows=6,
                     stalls=False, gaps=False, extreme=0.1, levels=None, table_regs=0):
    """An engine case; `levels` (adder levels per pipeline stage) random 0..3 if None;
    `table_regs`: the finish's registers after the activation (0 to 2, K2C.Activation.Finish)."""
    levels = rng.choice([0, 0, 1, 2, 3]) if levels is None else levels
    case = dict(kind="engine", name=name, f=f, k=k, p=p, b=b, a=a, w=w, bias=bias,
                acc=acc, finish=fn, out=out, levels=levels, table_regs=table_regs)
    case["ch"], case["groups"] = ceil_div(k, b), ceil_div(f, p)
    case["kernel"] = [[rand_raw(rng, w, extreme) for _ in range(k)] for _ in range(f)]
    case["biases"] = [rand_raw(rng, bias, extreme) for _ in range(f)]
    case["windows"] = [[rand_raw(rng, a, extreme) for _ in range(k)] for _ in range(n_windows)]
    # Saturating inputs: all minimum, all maximum.
    case["windows"][0] = [lo(a)] * k
    case["windows"][1] = [hi(a)] * k
    case["gaps"] = [rng.choice([0, 0, 1, 3, case["groups"] * b]) if gaps else 0
                    for _ in range(n_windows)]
    case["pattern"] = rand_pattern(rng, n_windows * (case["groups"] * b + 2) * 2, stalls)
    return case


def make_conv_case(rng, name, h, w_img, c, kh, kw, sh, sw, f, p, b, a, w, bias, acc, fn,
                   out, images=2, stalls=False, levels=None, table_regs=0):
    k = kh * kw * c
    case = make_engine_case(rng, name, f, k, p, b, a, w, bias, acc, fn, out, n_windows=2,
                            levels=levels, table_regs=table_regs)
    case.update(kind="conv", h=h, w_img=w_img, c=c, kh=kh, kw=kw, sh=sh, sw=sw)
    case["images"] = [[[rand_raw(rng, a) for _ in range(c)] for _ in range(h * w_img)]
                      for _ in range(images)]
    case["images"][0][0] = [lo(a)] * c
    case["images"][0][1] = [hi(a)] * c
    case["pixel_gaps"] = [0] * (images * h * w_img)
    h2, w2 = (h - kh) // sh + 1, (w_img - kw) // sw + 1
    case["n_out"] = images * h2 * w2
    case["pattern"] = rand_pattern(rng, case["n_out"] * (case["groups"] * b + 2) * 3, stalls)
    return case


def all_cases():
    rng = random.Random(20240601)
    cases = []
    fns = ["acc", "linear", "relu", "hard_sigmoid"]
    # 1. every (p, b) for f = 7, k = 10, format 1,7,8, exact accumulator.
    f, k = 7, 10
    acc = exact_acc(F178, F178, F178, k)
    for p in range(1, f + 1):
        for b in range(1, k + 1):
            i = len(cases)
            cases.append(make_engine_case(
                rng, "grid_p%d_b%d" % (p, b), f, k, p, b, F178, F178, F178, acc,
                fns[i % 4], F178, stalls=(i % 3 == 1), gaps=(i % 3 == 2), table_regs=(i // 3) % 3))
    # 2. format 1,3,4 everywhere, exact accumulator, assorted knobs.
    acc = exact_acc(F134, F134, F134, 9)
    for p, b in [(1, 1), (2, 3), (5, 9), (3, 4), (4, 2), (5, 1)]:
        for fn in ["acc", "hard_sigmoid"]:
            cases.append(make_engine_case(
                rng, "f134_p%d_b%d_%s" % (p, b, fn), 5, 9, p, b, F134, F134, F134, acc, fn,
                F134, stalls=True, gaps=True))
    # 3. format 1,2,9 weights with 1,7,8 inputs; bias in its own format
    #    (1,5,10); accumulator with more fraction bits than the products.
    for p, b in [(1, 13), (2, 5), (6, 1), (4, 4), (3, 7)]:
        bias = (6, 10)
        exact = exact_acc(F178, F129, bias, 13)
        for fn, acc in [("acc", exact), ("linear", (exact[0], exact[1] + 2)),
                        ("relu", exact)]:
            out = F129 if fn != "acc" else None
            cases.append(make_engine_case(
                rng, "f129_p%d_b%d_%s" % (p, b, fn), 6, 13, p, b, F178, F129, bias, acc, fn,
                out, stalls=(b % 2 == 1), gaps=True))
    # 4. narrow accumulators: saturation in the middle of a window.
    for p, b in [(1, 1), (1, 2), (2, 3), (3, 5), (3, 12), (2, 4)]:
        for acc in [(3, 8), (5, 8), (4, 9)]:
            cases.append(make_engine_case(
                rng, "narrow_p%d_b%d_%d_%d" % (p, b, acc[0], acc[1]), 3, 12, p, b, F134,
                F134, F134, acc, "acc", None, n_windows=8, stalls=(b % 2 == 0),
                gaps=True, extreme=0.5))
        cases.append(make_engine_case(
            rng, "narrow_p%d_b%d_hsig" % (p, b), 3, 12, p, b, F134, F134, F134, (4, 8),
            "hard_sigmoid", F134, n_windows=8, stalls=True, extreme=0.5))
    # 5. edges: one filter, one input, and G*b = 1 with heavy stalls.
    cases.append(make_engine_case(rng, "edge_k1", 4, 1, 2, 1, F178, F178, F178,
                                  exact_acc(F178, F178, F178, 1), "acc", None,
                                  n_windows=10, stalls=True))
    cases.append(make_engine_case(rng, "edge_f1_b5", 1, 5, 1, 5, F178, F178, F178,
                                  exact_acc(F178, F178, F178, 5), "relu", F178,
                                  n_windows=10, stalls=True, gaps=True))
    cases.append(make_engine_case(rng, "edge_gb1_stalls", 3, 4, 3, 1, F134, F134, F134,
                                  exact_acc(F134, F134, F134, 4), "acc", None,
                                  n_windows=20, stalls=True))
    cases.append(make_engine_case(rng, "edge_gb1_b2b", 3, 4, 3, 1, F134, F134, F134,
                                  exact_acc(F134, F134, F134, 4), "acc", None,
                                  n_windows=20))
    # 6. conv end to end.
    convs = [
        # h, w, c, kh, kw, sh, sw, f, p, b
        (6, 5, 2, 3, 2, 1, 2, 3, 1, 1),
        (6, 5, 2, 3, 2, 1, 2, 3, 2, 4),
        (6, 5, 2, 3, 2, 1, 2, 3, 3, 12),
        (4, 4, 1, 3, 3, 1, 1, 2, 2, 1),
        (4, 4, 1, 3, 3, 1, 1, 2, 1, 3),
        (5, 6, 3, 1, 1, 1, 1, 4, 4, 1),
        (5, 6, 3, 1, 1, 2, 2, 4, 3, 2),
        (7, 7, 2, 3, 3, 2, 2, 5, 2, 7),
        (5, 5, 1, 1, 1, 1, 2, 2, 1, 1),     # spacing 1 across rows < sw = G*b = 2
        (5, 5, 2, 1, 1, 1, 2, 3, 3, 1),     # G*b = 1: every window at once
        (4, 6, 1, 1, 1, 1, 2, 2, 1, 1),     # G*b = spacing = 2
    ]
    for i, (h, w, c, kh, kw, sh, sw, f, p, b) in enumerate(convs):
        k = kh * kw * c
        for stalls in [False, True]:
            cases.append(make_conv_case(
                rng, "conv%d_%s" % (i, "stall" if stalls else "ready"), h, w, c, kh, kw,
                sh, sw, f, p, b, F178, F178, F178, exact_acc(F178, F178, F178, k),
                ["relu", "acc"][i % 2], F178 if i % 2 == 0 else None, stalls=stalls,
                table_regs=2 * int(stalls)))
    # 7. the case behind ConvTop.hs (HDL checks): keep the two in step.
    cases.append(make_conv_case(
        rng, "convtop", 6, 5, 2, 3, 2, 1, 2, 3, 2, 4, F178, F178, F178,
        exact_acc(F178, F178, F178, 12), "relu", F178, stalls=True, levels=1))
    return cases


# ---------------------------------------------------------------- Haskell

def sfixed(fmt):
    return "(SFixed %d %d)" % fmt


def haskell_case(case):
    """One case's line: file names relative to the case folder, the working
    directory of the test-suite while it runs the cases."""
    prefix = case["name"]
    acc = sfixed(case["acc"])
    out = acc if case["finish"] == "acc" else sfixed(case["out"])
    if case["finish"] == "hard_sigmoid":
        fn = "Finish requantize (hardSigmoid @%d)" % hard_sigmoid_width(case["out"])
    else:
        fn = {"acc": "Finish id id", "linear": "Finish requantize linear",
              "relu": "Finish requantize relu"}[case["finish"]]
    rom = "(WeightRom %s :: WeightRom %d %d %d %s %s)" % (
        json.dumps(prefix + ".mem"), case["groups"] * case["b"], case["p"], case["ch"],
        sfixed(case["w"]), sfixed(case["bias"]))
    finish = "(%s :: Finish %d %s %s)" % (fn, case["table_regs"], acc, out)
    knobs = "(SNat @%d) (SNat @%d) (SNat @%d) (SNat @%d)" % (case["f"], case["p"], case["b"],
                                                           case["levels"])
    if case["kind"] == "engine":
        return "runEngineCase %s (Proxy @(Vec %d %s)) %s %s %s" % (
            json.dumps(prefix), case["k"], sfixed(case["a"]), knobs, rom, finish)
    geometry = " ".join("(SNat @%d)" % case[x] for x in ["h", "w_img", "kh", "kw", "sh", "sw"])
    return "runConvCase %s (Proxy @(Vec %d %s)) %s %s %s %s" % (
        json.dumps(prefix), case["c"], sfixed(case["a"]), geometry, knobs, rom, finish)


CASES_HEADER = """{-# LANGUAGE DataKinds, TypeApplications, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
-- Generated by reference.py (python3 reference.py haskell .): one engine or conv
-- instance per case. Do not edit; tests/test_blocks.py checks it is up to date.
module %s (cases) where

import Clash.Prelude (SFixed, SNat (..), Vec)
import Data.Proxy (Proxy (..))

import Driver (runConvCase, runEngineCase)
import K2C.Activation (Finish (..), linear, relu, requantize)
import K2C.Memory (WeightRom (..))
import K2C.Relu (hardSigmoid)

cases :: [IO ()]
cases =
"""

ALL_CASES = """-- Generated by reference.py (python3 reference.py haskell .): every case
-- module's cases. Do not edit; tests/test_blocks.py checks it is up to date.
module Cases (cases) where

%s

cases :: [IO ()]
cases = concat [%s]
"""

CHUNK = 20   # cases per generated module (keeps each module's compile time small)


def haskell_modules(cases):
    """{module name: source} of the case modules: Cases0, Cases1, .. and Cases."""
    modules = {}
    for i in range(0, len(cases), CHUNK):
        mod = "Cases%d" % (i // CHUNK)
        body = "\n".join(("  [ " if j == 0 else "  , ") + haskell_case(c)
                         for j, c in enumerate(cases[i:i + CHUNK]))
        modules[mod] = CASES_HEADER % mod + body + "\n  ]\n"
    names = list(modules)
    imports = "\n".join("import qualified %s" % m for m in names)
    modules["Cases"] = ALL_CASES % (imports, ", ".join("%s.cases" % m for m in names))
    return modules


def write_haskell(folder):
    for mod, text in haskell_modules(all_cases()).items():
        with open(os.path.join(folder, mod + ".hs"), "w") as fh:
            fh.write(text)


def gen(folder):
    os.makedirs(folder, exist_ok=True)
    cases = all_cases()
    for case in cases:
        prefix = os.path.join(folder, case["name"])
        with open(prefix + ".mem", "w") as fh:
            fh.write("\n".join(mem_lines(case)) + "\n")
        with open(prefix + ".in", "w") as fh:
            if case["kind"] == "engine":
                fh.write("%d %s\n" % (len(case["windows"]), case["pattern"]))
                for gap, win in zip(case["gaps"], case["windows"]):
                    fh.write(" ".join(str(v) for v in [gap] + win) + "\n")
            else:
                fh.write("%d %s\n" % (case["n_out"], case["pattern"]))
                pixels = [px for image in case["images"] for px in image]
                for gap, px in zip(case["pixel_gaps"], pixels):
                    fh.write(" ".join(str(v) for v in [gap] + px) + "\n")
    with open(os.path.join(folder, "cases.json"), "w") as fh:
        json.dump(cases, fh)
    print("%d cases written to %s" % (len(cases), folder))


# ---------------------------------------------------------------- checking

def check_engine(case, got):
    want = engine_trace(case, case["windows"])
    errors = []
    if got != want:
        for i, (g, w) in enumerate(zip(got + [""] * len(want), want + [""] * len(got))):
            if g != w:
                errors.append("line %d: got %r, want %r" % (i, g, w))
                break
    # Closed form with downstream always ready: a_i = max(v_i, a_(i-1) + G*b),
    # output at a_i + G*b + D + 1 (the queue never holds the input back).
    if case["pattern"] == "-":
        gb = case["groups"] * case["b"]
        depth = pipe_depth(case["ch"], case["levels"], case["b"], case["table_regs"], case["groups"])
        accepts = [int(l.split()[1]) for l in got if l.startswith("A ")]
        outs = [int(l.split()[1]) for l in got if l.startswith("O ")]
        prev, free = None, 0
        for i, gap in enumerate(case["gaps"]):
            v = free + gap                    # offered gap cycles after the last move
            a = v if prev is None else max(v, prev + gb)
            if i >= len(accepts) or accepts[i] != a or outs[i] != a + gb + depth + 1:
                errors.append("closed form: window %d" % i)
                break
            prev, free = a, a + 1
    return errors


def check_conv(case, got, folder):
    errors = []
    if os.path.exists(os.path.join(folder, case["name"] + ".mismatch")):
        errors.append("conv2d and windowHeld into engineFrom (afterAccept) differ")
    windows = [w for image in case["images"] for w in conv_windows(case, image)]
    values = [" ".join(str(v) for v in engine_values(case, w)) for w in windows]
    outs = [l.split(None, 2) for l in got if l.startswith("O ")]
    if [o[2] for o in outs] != values:
        errors.append("output values differ")
    # The engine inside (loading from the generator's register: K2C.Conv's direct):
    # replay its rules on the observed window stream.
    model = engine_model(case, e=1)
    mids = {int(l.split()[1]) for l in got if l.startswith("M ")}
    taken = [int(l.split()[1]) for l in got if l.startswith("a ")]
    out_cycles = [int(o[1]) for o in outs]
    pattern = case["pattern"]
    want_taken, want_out, n = [], [], 0
    for t in range(max(out_cycles) + 1 if out_cycles else 0):
        ready_out = pattern[t] == "1" if t < len(pattern) else True
        accepted, moved = model.cycle(n if t in mids else None, ready_out)
        if accepted:
            want_taken.append(t)
            n += 1
        if moved is not None:
            want_out.append(t)
    if taken != want_taken or out_cycles != want_out:
        errors.append("engine timing inside the conv differs from its rules")
    if pattern == "-":
        gb = case["groups"] * case["b"]
        depth = pipe_depth(case["ch"], case["levels"], case["b"], case["table_regs"], case["groups"]) + 1
        # a_i = max(v_i, a_(i-1) + G*b) with v_i the first cycle window i is valid; D
        # counts the load's cycle after the accept.
        a_prev = None
        for a in taken:
            v = min(t for t in mids if t <= a and (a_prev is None or t > a_prev))
            if a != (v if a_prev is None else max(v, a_prev + gb)):
                errors.append("closed form inside the conv")
                break
            a_prev = a
        if [a + gb + depth + 1 for a in taken] != out_cycles:
            errors.append("conv output cycles are not a_i + G*b + D + 1 (D with the load's cycle)")
        # First output (pixels from cycle 0, no gaps): (kh-1)*w + kw + G*b + D (the
        # first window is offered in its last pixel's cycle, (kh-1)*w + kw - 1).
        if out_cycles[0] != (case["kh"] - 1) * case["w_img"] + case["kw"] + gb + depth:
            errors.append("first conv output not at (kh-1)*w + kw + G*b + D")
        # G*b <= min window spacing: the engine takes every window the cycle
        # it appears.
        w2 = (case["w_img"] - case["kw"]) // case["sw"] + 1
        spacing = min(case["sw"], case["sh"] * case["w_img"] - (w2 - 1) * case["sw"])
        if gb <= spacing and any(a - 1 in mids for a in taken if a not in
                                    [t + 1 for t in taken]):
            errors.append("a window waited although G*b <= window spacing")
    return errors


def check(folder):
    with open(os.path.join(folder, "cases.json")) as fh:
        cases = json.load(fh)
    failed = 0
    for case in cases:
        path = os.path.join(folder, case["name"] + ".out")
        if not os.path.exists(path):
            print("FAIL %s: no output" % case["name"])
            failed += 1
            continue
        with open(path) as fh:
            got = fh.read().split("\n")[:-1]
        errors = (check_engine(case, got) if case["kind"] == "engine"
                  else check_conv(case, got, folder))
        if errors:
            failed += 1
            print("FAIL %s: %s" % (case["name"], "; ".join(errors)))
    print("%d of %d cases pass" % (len(cases) - failed, len(cases)))
    return failed == 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "check", "haskell"):
        sys.exit(__doc__)
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    elif sys.argv[1] == "haskell":
        write_haskell(sys.argv[2])
    elif not check(sys.argv[2]):
        sys.exit(1)
