"""Golden model for conv2d, pooling, narrow accumulators and chunked ROMs, against loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras2clash.backend.memfiles import rom_table
from keras2clash.hw.plan import LayerFormats
from keras2clash.hw.planner import make_plan
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat
from keras2clash.quant.golden import QuantizedLayer


def _same_pads(size: int, k: int, s: int) -> tuple[int, int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return out, total // 2, total - total // 2


def _conv_ir(h, w, c, f, k, s, padding, act="relu", kind="conv2d"):
    kh, kw = k
    sh, sw = s
    if padding == "same":
        h2, top, bottom = _same_pads(h, kh, sh)
        w2, left, right = _same_pads(w, kw, sw)
    else:
        h2, w2 = (h - kh) // sh + 1, (w - kw) // sw + 1
        top = bottom = left = right = 0
    layer = {
        "type": kind,
        "name": "l",
        "input_shape": (h, w, c),
        "strides": s,
        "padding": padding,
        "pads": (top, bottom, left, right),
        "activation": act,
        "fused": [],
        "use_bias": True,
        "weights": {},
    }
    if kind == "conv2d":
        layer.update(kernel_size=k, output_shape=(h2, w2, f))
    else:
        layer.update(pool_size=k, output_shape=(h2, w2, c), activation="linear")
    return layer


def _ref_conv(x, kernel, bias, plan):
    """Plain loops over output pixels: pad with zeros, exact integer dot products."""
    kh, kw = plan.params.kernel_size
    sh, sw = plan.params.strides
    top, bottom, left, right = plan.params.pads
    n, h, w, c = x.shape
    xp = np.zeros((n, h + top + bottom, w + left + right, c), dtype=object)
    xp[:, top : top + h, left : left + w] = x
    h2, w2, f = plan.output_shape
    k4 = kernel.reshape(kh, kw, c, f)
    out = np.zeros((n, h2, w2, f), dtype=np.int64)
    shift = plan.acc_fmt.frac - plan.out_fmt.frac
    for b in range(n):
        for i in range(h2):
            for j in range(w2):
                for o in range(f):
                    acc = int(bias[o]) << (plan.acc_fmt.frac - plan.b_fmt.frac)
                    for di in range(kh):
                        for dj in range(kw):
                            for ch in range(c):
                                acc += int(xp[b, i * sh + di, j * sw + dj, ch]) * int(k4[di, dj, ch, o])
                    r = (acc + (1 << (shift - 1))) >> shift if shift > 0 else acc << -shift
                    r = max(plan.out_fmt.raw_min, min(plan.out_fmt.raw_max, r))
                    out[b, i, j, o] = max(r, 0)
    return out


@settings(max_examples=40, deadline=None)
@given(
    h=st.integers(3, 7),
    w=st.integers(3, 7),
    c=st.integers(1, 3),
    f=st.integers(1, 4),
    kh=st.integers(1, 3),
    kw=st.integers(1, 3),
    sh=st.integers(1, 3),
    sw=st.integers(1, 3),
    padding=st.sampled_from(["valid", "same"]),
    seed=st.integers(0, 10_000),
)
def test_conv2d_equals_loops(h, w, c, f, kh, kw, sh, sw, padding, seed) -> None:
    fmt = FixedFormat(1, 3, 4)
    plan = make_plan([_conv_ir(h, w, c, f, (kh, kw), (sh, sw), padding)], fmt)[0]
    rng = np.random.default_rng(seed)
    x = rng.integers(fmt.raw_min, fmt.raw_max + 1, (2, h, w, c))
    kernel = rng.integers(fmt.raw_min, fmt.raw_max + 1, (kh * kw * c, f))
    bias = rng.integers(fmt.raw_min, fmt.raw_max + 1, f)
    got = golden.layer(plan, {plan.name: QuantizedLayer(kernel, bias)}, [x])
    assert got.tolist() == _ref_conv(x, kernel, bias, plan).tolist()


@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize(("k", "s"), [((2, 2), (2, 2)), ((3, 3), (2, 2)), ((2, 3), (1, 2))])
def test_pooling_equals_loops(padding, k, s) -> None:
    fmt = FixedFormat(1, 3, 4)
    rng = np.random.default_rng(1)
    x = rng.integers(fmt.raw_min, fmt.raw_max + 1, (3, 7, 6, 2))
    plan_max = make_plan([_conv_ir(7, 6, 2, 2, k, s, padding, kind="maxpool2d")], fmt)[0]
    plan_avg = make_plan([_conv_ir(7, 6, 2, 2, k, s, "valid", kind="avgpool2d")], fmt)[0]
    got_max = golden.layer(plan_max, {}, [x])
    got_avg = golden.layer(plan_avg, {}, [x])
    top, _, left, _ = plan_max.params.pads
    for b in range(3):
        for i in range(plan_max.output_shape[0]):
            for j in range(plan_max.output_shape[1]):
                rows = [r for r in range(i * s[0] - top, i * s[0] - top + k[0]) if 0 <= r < 7]
                cols = [q for q in range(j * s[1] - left, j * s[1] - left + k[1]) if 0 <= q < 6]
                for ch in range(2):
                    assert got_max[b, i, j, ch] == max(x[b, r, q, ch] for r in rows for q in cols)
        for i in range(plan_avg.output_shape[0]):
            for j in range(plan_avg.output_shape[1]):
                for ch in range(2):
                    vals = [x[b, i * s[0] + di, j * s[1] + dj, ch] for di in range(k[0]) for dj in range(k[1])]
                    n = len(vals)
                    assert got_avg[b, i, j, ch] == math.floor(sum(vals) / n + 0.5)


def test_narrow_accumulator_saturates_per_chunk_in_order() -> None:
    fmt = FixedFormat(1, 3, 4)
    ir = [
        {
            "type": "dense",
            "name": "d",
            "input_shape": (4,),
            "output_shape": (1,),
            "activation": "linear",
            "use_bias": True,
            "fused": [],
            "weights": {},
        }
    ]
    # 4 inputs in 2 chunks; an 12-bit accumulator (frac 8) holds [-8, 8).
    plan = make_plan(ir, fmt, [1], {"d": LayerFormats(accumulator_bits=12)}, cycles=[2])[0]
    assert plan.acc_fmt == FixedFormat(1, 3, 8) and not plan.params.exact_accumulator
    x = np.array([[112, 112, -112, -112]])  # 7.0 each
    kernel = np.array([[16], [16], [16], [16]])  # 1.0 each
    params = QuantizedLayer(kernel, np.array([0]))
    # exact: 7 + 7 - 7 - 7 = 0; chunked: sat(14) = 7.996, then 7.996 - 14 = -6.004 -> -6.0
    assert golden.layer(plan, {plan.name: params}, [x]).tolist() == [[-96]]
    exact = make_plan(ir, fmt, [1], cycles=[2])[0]
    assert golden.layer(exact, {exact.name: params}, [x]).tolist() == [[0]]


def test_bias_format_may_differ_from_weights() -> None:
    ir = [
        {
            "type": "dense",
            "name": "d",
            "input_shape": (1,),
            "output_shape": (1,),
            "activation": "linear",
            "use_bias": True,
            "fused": [],
            "weights": {"kernel": np.array([[0.5]]), "bias": np.array([0.0625 + 1 / 1024])},
        }
    ]
    fmt = FixedFormat(1, 3, 4)
    plan = make_plan(ir, fmt, layer_formats={"d": LayerFormats(bias=FixedFormat(1, 1, 10))})[0]
    assert plan.acc_fmt.frac == 10  # max(4 + 4, 10)
    params = golden.quantize_params([plan], ir)
    assert params["d"].bias.tolist() == [65]
    out = golden.layer(plan, {plan.name: params["d"]}, [np.array([[16]])])  # 1.0 * 0.5 + 0.06348 -> 0.5625 (9/16)
    assert out.tolist() == [[9]]


def test_rom_table_chunks_and_bias_field() -> None:
    ir = [
        {
            "type": "dense",
            "name": "d",
            "input_shape": (5,),
            "output_shape": (3,),
            "activation": "relu",
            "use_bias": True,
            "fused": [],
            "weights": {},
        }
    ]
    plan = make_plan(ir, FixedFormat(1, 7, 8), [2], cycles=[2])[0]
    assert (plan.groups, plan.chunk, plan.rom_depth) == (2, 3, 4)
    kernel = np.arange(1, 16).reshape(5, 3)  # kernel[i, o]
    table = rom_table(plan, QuantizedLayer(kernel, np.array([-1, -2, -3])))
    assert table.shape == (4, 2, 4)
    # word g*b + t, PE j -> filter g*p + j, chunk t
    assert table[0, 0].tolist() == [1, 4, 7, -1]  # filter 0, inputs 0..2, bias
    assert table[1, 0].tolist() == [10, 13, 0, 0]  # filter 0, inputs 3..4 + pad, no bias
    assert table[0, 1].tolist() == [2, 5, 8, -2]  # filter 1
    assert table[2, 0].tolist() == [3, 6, 9, -3]  # filter 2 (group 1)
    assert table[3, 1].tolist() == [0, 0, 0, 0]  # padding filter 3
