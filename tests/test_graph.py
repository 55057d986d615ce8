"""Networks as graphs: merges in the golden model, the branch structure, the
FIFO depths of the hardware model, and random graph-shaped networks bit-exact through the
Clash simulation with the hardware model's cycles.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerPlan
from keras2clash.ir.structure import Chain, Parallel, structure
from keras2clash.kinds.merge import PRODUCT_DEPTH, MergeParams
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat

MERGES = ("add", "subtract", "multiply", "average", "maximum", "minimum", "concatenate")


# --- the golden model of merges against exact rationals ---------------------------------


def _round_sat(value: Fraction, fmt: FixedFormat) -> int:
    """The contract: floor(v * 2^frac + 1/2), then saturate."""
    scaled = value * (1 << fmt.frac) + Fraction(1, 2)
    raw = scaled.numerator // scaled.denominator
    return max(fmt.raw_min, min(fmt.raw_max, raw))


def _exact(op: str, values: list[Fraction]) -> Fraction:
    if op == "add":
        return sum(values, Fraction(0))
    if op == "subtract":
        return values[0] - values[1]
    if op == "multiply":
        out = Fraction(1)
        for v in values:
            out *= v
        return out
    if op == "average":
        return sum(values, Fraction(0)) / len(values)
    return max(values) if op == "maximum" else min(values)


fmts = st.builds(lambda i, f: FixedFormat(1, i, f), st.integers(0, 8), st.integers(0, 10))


@settings(max_examples=300, deadline=None)
@given(
    op=st.sampled_from(MERGES),
    n=st.integers(2, 4),
    data=st.data(),
    out=fmts,
    activation=st.sampled_from(["linear", "relu"]),
)
def test_merge_golden_equals_exact_rationals(op, n, data, out, activation) -> None:
    n = 2 if op == "subtract" else n
    in_fmts = [data.draw(fmts) for _ in range(n)]
    width = 3
    raws = [
        np.array(data.draw(st.lists(st.integers(f.raw_min, f.raw_max), min_size=width, max_size=width)))
        for f in in_fmts
    ]
    out_width = width * n if op == "concatenate" else width
    plan = LayerPlan(
        name="m",
        type=op,
        input_shape=(width,),
        output_shape=(out_width,),
        activation=activation,
        in_fmt=in_fmts[0],
        out_fmt=out,
        inputs=tuple(f"t{i}" for i in range(n)),
        params=MergeParams(in_fmts=tuple(in_fmts), input_shapes=((width,),) * n),
    )
    got = golden.layer(plan, {}, [r[None, :] for r in raws])[0]
    values = [[Fraction(int(v), 1 << f.frac) for v in r] for r, f in zip(raws, in_fmts)]
    if op == "concatenate":
        want = [_round_sat(v, out) for vs in values for v in vs]
    else:
        want = [_round_sat(_exact(op, [vs[k] for vs in values]), out) for k in range(width)]
    if activation == "relu":
        want = [max(w, 0) for w in want]
    assert list(got) == want


# --- structure ----------------------------------------------------------------------------


class _N:
    def __init__(self, name: str, *inputs: str) -> None:
        self.name, self.inputs = name, tuple(inputs)


def test_residual_and_inception_structure() -> None:
    nodes = [
        _N("stem", "in"),
        _N("c1", "stem"),
        _N("c2", "c1"),
        _N("add", "c2", "stem"),
        _N("a", "add"),
        _N("b", "a"),
        _N("d", "a"),
        _N("cat", "b", "d", "a"),
        _N("o", "cat"),
    ]
    chain = structure(nodes, "in", "o")
    assert chain == Chain(
        (
            "stem",
            Parallel((Chain(("c1", "c2")), Chain(()))),
            "add",
            "a",
            Parallel((Chain(("b",)), Chain(("d",)), Chain(()))),
            "cat",
            "o",
        )
    )


def test_non_series_parallel_graph_names_the_layer() -> None:
    nodes = [
        _N("t1", "in"),
        _N("t2", "in"),
        _N("m1", "t1", "t2"),
        _N("m2", "m1", "t1"),
        _N("m3", "m2", "t2"),
        _N("o", "m3"),
    ]
    with pytest.raises(K2CError, match="layer '(t1|t2)'|merge layer"):
        structure(nodes, "in", "o")


# --- random graph-shaped Keras models ---------------------------------------------------


def small_weights(model, rng):
    """`model` with uniform weights in [-0.6, 0.6]: small weights keep values inside the format."""
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([rng.uniform(-0.6, 0.6, size=w.shape).astype(np.float32) for w in weights])
    return model


def build_graph_model(seed: int, kind: str, op: str, image: bool):
    """A small functional model with one or two fork/merge blocks of the given merge `op`.

    `kind`: "residual" (a two-layer branch against the identity or a projection),
    "inception" (two or three computed branches), "nested" (a residual block inside a
    branch of another merge)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    if image:
        inp = keras.Input((5, 5, 2))
        stem = layers.Conv2D(3, 3, padding="same", activation="relu", name="stem")(inp)

        def unit(x, name, f=3, k=3):
            return layers.Conv2D(f, k, padding="same", name=name)(x)
    else:
        inp = keras.Input((6,))
        stem = layers.Dense(5, activation="relu", name="stem")(inp)

        def unit(x, name, f=5, k=None):
            return layers.Dense(f, name=name)(x)

    merge = {
        "add": layers.Add,
        "subtract": layers.Subtract,
        "multiply": layers.Multiply,
        "average": layers.Average,
        "maximum": layers.Maximum,
        "minimum": layers.Minimum,
        "concatenate": layers.Concatenate,
    }[op]
    if kind == "residual":
        branch = unit(layers.ReLU(name="b_relu")(unit(stem, "b1")), "b2")
        short = stem if rng.random() < 0.5 else unit(stem, "proj", k=1)
        x = merge(name="merge")([branch, short])
    elif kind == "inception":
        n = 2 if op == "subtract" else 3
        branches = [unit(stem, f"br{i}", k=1 + 2 * (i % 2)) for i in range(n)]
        x = merge(name="merge")(branches)
    else:  # nested
        inner = layers.Add(name="inner_add")([unit(stem, "in1"), stem])
        outer = unit(layers.ReLU(name="in_relu")(inner), "in2")
        x = merge(name="merge")([outer, unit(stem, "side", k=1)])
    x = layers.ReLU(name="after")(x)
    if image:
        x = layers.Flatten(name="flat")(layers.MaxPooling2D(2, name="pool")(x))
    out = layers.Dense(3, name="out")(x)
    model = keras.Model(inp, out, name=f"g_{kind}_{op}")
    return small_weights(model, rng)


def test_golden_follows_keras_on_random_graphs() -> None:
    """At a wide format the golden model's outputs are Keras' to within rounding."""
    from keras2clash.network import load_network

    rng = np.random.default_rng(0)
    for seed, (kind, op, image) in enumerate(
        [(k, o, i) for k in ("residual", "inception", "nested") for o in MERGES for i in (False, True)]
    ):
        model = build_graph_model(seed, kind, op, image)
        network = load_network(model, "1,9,14", fifos=False)
        x = rng.uniform(0, 1, size=(8, *model.inputs[0].shape[1:])).astype(np.float32)
        raw = golden.run(network.plans, network.params, golden.quantize_inputs(network.plans, x))
        want = np.asarray(model(x, training=False), dtype=np.float64)
        np.testing.assert_allclose(raw / (1 << 14), want, atol=0.02, err_msg=f"{kind} {op} image={image}")


def build_gated_model(seed: int, op: str, gate: str, gate_first: bool, size: int = 4):
    """A `size` x `size` map merged with a per-channel gate computed from it:
    squeeze-and-excitation (global pooling, two Dense, the gate reshaped to (1, 1, C)) or,
    with `gate` "vector", the (C,) gate as it leaves the Dense (FiLM-like)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    inp = keras.Input((size, size, 2))
    fmap = layers.Conv2D(3, 3, padding="same", activation="relu", name="stem")(inp)
    g = layers.GlobalAveragePooling2D(name="squeeze")(fmap)
    g = layers.Dense(2, activation="relu", name="reduce")(g)
    g = layers.Dense(3, activation="sigmoid", name="excite")(g)
    if gate == "map":
        g = layers.Reshape((1, 1, 3), name="gate")(g)
    merge = {
        "add": layers.Add,
        "subtract": layers.Subtract,
        "multiply": layers.Multiply,
        "average": layers.Average,
        "maximum": layers.Maximum,
        "minimum": layers.Minimum,
    }[op]
    x = merge(name="merge")([g, fmap] if gate_first else [fmap, g])
    out = layers.Dense(3, name="out")(layers.Flatten(name="flat")(x))
    model = keras.Model(inp, out, name=f"se_{op}_{gate}")
    return small_weights(model, rng)


def test_golden_broadcasts_a_per_channel_gate_as_keras() -> None:
    """A (1, 1, C) or (C,) gate, first or second, is broadcast over the map's positions as
    Keras broadcasts it; the record names it as held."""
    from keras2clash.network import load_network

    rng = np.random.default_rng(1)
    cases = [
        (op, gate, op != "subtract" and i % 2 == 0) for i, op in enumerate(MERGES[:-1]) for gate in ("map", "vector")
    ]
    for seed, (op, gate, first) in enumerate(cases):
        model = build_gated_model(seed, op, gate, first)
        network = load_network(model, "1,9,14", fifos=False)
        merge = next(p for p in network.plans if p.is_merge)
        assert merge.params.held == ((0,) if first else (1,))
        x = rng.uniform(0, 1, size=(8, 4, 4, 2)).astype(np.float32)
        raw = golden.run(network.plans, network.params, golden.quantize_inputs(network.plans, x))
        want = np.asarray(model(x, training=False), dtype=np.float64)
        np.testing.assert_allclose(raw / (1 << 14), want, atol=0.02, err_msg=f"{op} {gate} first={first}")


def test_held_gate_repeats_and_the_map_waits_an_image_in_block_ram(tmp_path) -> None:
    """The gate's branch ends in a repeat of its beat at each of the map's positions; the map's
    FIFO holds the whole image (global pooling reads it all before the gate exists), in block
    RAM once deeper than LUT RAM holds, which the resources count as block RAM."""
    from keras2clash import api
    from keras2clash.hw import hwmodel
    from keras2clash.hw.events import BLOCK_RAM_FIFO_DEPTH
    from keras2clash.hw.summary import design_summary
    from keras2clash.network import load_network

    small = load_network(build_gated_model(0, "add", "vector", True), "1,7,8")
    merge = next(p for p in small.plans if p.is_merge)
    assert merge.kind.branch_repeats(merge) == (16, 1)
    assert 4 * 4 <= merge.params.fifo_depths[1] <= BLOCK_RAM_FIFO_DEPTH
    assert hwmodel.figures(small.plans).block_fifo_bits == 0

    model = build_gated_model(0, "multiply", "map", False, size=9)
    network = load_network(model, "1,7,8")
    merge = next(p for p in network.plans if p.is_merge)
    image, gate = merge.params.fifo_depths
    assert image > BLOCK_RAM_FIFO_DEPTH and image >= 9 * 9 and gate < BLOCK_RAM_FIFO_DEPTH
    res = next(r for r in hwmodel.figures(network.plans).layers if r.name == "merge")
    assert res.block_fifo_bits == image * 3 * 16  # 3 channels of 1,7,8 a beat
    # the gate's FIFO, the product stage's queue (its 3 registers + 2 results: K2C.Pipe.mapP2)
    assert res.fifo_bits == gate * 3 * 16 + (PRODUCT_DEPTH + 2) * 3 * 16
    summary = next(layer for layer in design_summary(network.plans)["layers"] if layer["name"] == "merge")
    assert summary["block_fifo_bits"] == res.block_fifo_bits
    api.emit(model, "1,7,8", tmp_path / "se", show=False)
    text = (tmp_path / "se" / "Network.hs").read_text()
    assert "(blockFifo d_merge_layer_0)" in text  # the layer is named merge_layer in Haskell
    assert "|> gate\n        |> repeatS (SNat @81) |> fifo d_merge_layer_1)" in text


@needs_toolchain
def test_an_elementwise_merge_of_wide_operands_registers_them_after_the_join(tmp_path) -> None:
    """A residual Add of 12 values of 16 bits a beat (192 bits, `WIDE_MERGE_BITS`) combines the
    joined operands in its one stage (`mapP`); of 13 values it registers them, then the exact
    sums, then the requantized result (`mapP2`, `PRODUCT_DEPTH`), and its Clash simulation
    equals the golden model in the hardware model's cycles, under gaps and stalls too."""
    import keras

    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.kinds.merge import MERGE_DEPTH, WIDE_MERGE_BITS
    from keras2clash.network import load_network

    def residual(width: int) -> keras.Model:
        x = keras.Input((width,), name="x")
        y = keras.layers.Dense(width, activation="relu", name="proj")(x)
        z = keras.layers.Add(name="res")([x, y])
        return keras.Model(x, keras.layers.Dense(4, name="out")(z))

    assert WIDE_MERGE_BITS == 12 * 16
    for width, depth, stage in ((12, MERGE_DEPTH, "mapP (\\"), (13, PRODUCT_DEPTH, "mapP2 (\\")):
        model = residual(width)
        merge = next(p for p in load_network(model, "1,7,8").plans if p.is_merge)
        assert merge.kind.stage_depth(merge) == depth
        api.emit(model, "1,7,8", tmp_path / f"w{width}", show=False)
        text = (tmp_path / f"w{width}" / "Network.hs").read_text()
        assert f"res =\n  {stage}" in text
    project = load_project(tmp_path / "w13")
    x = np.random.default_rng(13).uniform(-1.5, 1.5, size=(12, 13))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), 13)


def test_broadcasts_other_than_a_per_channel_gate_are_refused() -> None:
    import keras
    from keras import layers

    from keras2clash.network import load_network

    inp = keras.Input((4, 4, 3))
    row = layers.Conv2D(3, (4, 1), name="row")(inp)  # (1, 4, 3): not one value per channel
    x = layers.Multiply(name="merge")([inp, row])
    model = keras.Model(inp, layers.Dense(2, name="out")(layers.Flatten(name="flat")(x)))
    with pytest.raises(K2CError, match="one value per channel"):
        load_network(model, "1,9,14", fifos=False)


def test_fifo_depths_cover_the_structural_lag() -> None:
    """A 3x3 'same' convolution needs a row and a pixel of input before its first output, so
    the identity shortcut's FIFO must hold at least that many beats."""
    from keras2clash.network import load_network

    model = build_graph_model(1, "residual", "add", True)
    network = load_network(model, "1,7,8")
    merge = next(p for p in network.plans if p.is_merge)
    assert len(merge.params.fifo_depths) == 2 and min(merge.params.fifo_depths) >= 1
    assert max(merge.params.fifo_depths) >= 5 + 1 + 1  # W + 1 beats of lookahead (two convolutions: more)


# --- bit-exact in the Clash simulation, cycles as the hardware model says -----------------


@needs_toolchain
@pytest.mark.parametrize("op", MERGES)  # every merge kind in every CI run (the simplest graph, then a drawn one)
@settings(
    max_examples=int(__import__("os").environ.get("K2C_GRAPH_EXAMPLES", "2")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)  # no shrinking:
# each example compiles a Clash project (~30 s); the failing example is printed as drawn
@given(
    seed=st.integers(0, 10_000),
    kind=st.sampled_from(["residual", "inception", "nested"]),
    image=st.booleans(),
    fmt=st.sampled_from(["1,7,8", "1,4,6", "1,5,10"]),
    knobs=st.integers(0, 10_000),
)
def test_random_graphs_bit_exact_in_clash(tmp_path_factory, op, seed, kind, image, fmt, knobs) -> None:
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.network import load_network

    model = build_graph_model(seed, kind, op, image)
    rng = np.random.default_rng(knobs)
    planned = load_network(model, fmt, fifos=False)
    compute = [p for p in planned.plans if p.is_compute]
    pes = [int(rng.integers(1, p.filters + 1)) for p in compute]
    cyc = [int(rng.integers(1, min(p.window, 4) + 1)) for p in compute]
    out = tmp_path_factory.mktemp("graph") / "net"
    api.emit(model, fmt, out, pes, cycles=cyc, show=False)
    project = load_project(out)
    x = rng.uniform(-0.5, 1.5, size=(6, *model.inputs[0].shape[1:]))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed)


GATED_CASES = [
    pytest.param("multiply", "map", False, 9, id="multiply-map-second-9x9"),
    pytest.param("add", "vector", True, 4, id="add-vector-first-4x4"),
    *(
        pytest.param(op, gate, first, 4, id=f"{op}-{gate}-{'first' if first else 'second'}", marks=pytest.mark.slow)
        for op in MERGES[:-1]
        for gate in ("map", "vector")
        for first in ((False,) if op == "subtract" else (False, True))
        if (op, gate, first) not in {("multiply", "map", False), ("add", "vector", True)}
    ),
]


@needs_toolchain
@pytest.mark.parametrize(("op", "gate", "first", "size"), GATED_CASES)
def test_gated_merges_bit_exact_in_clash(tmp_path, op, gate, first, size) -> None:
    """A per-image gate held over a map (squeeze-and-excitation), first or second, (1, 1, C) or
    (C,): the Clash simulation equals the golden model bit for bit, under input gaps and
    output stalls too, in the hardware model's cycles; the 9x9 map waits in block RAM."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    model = build_gated_model(size, op, gate, first, size)
    api.emit(model, "1,7,8", tmp_path / "se", show=False)
    project = load_project(tmp_path / "se")
    x = np.random.default_rng(size).uniform(-0.5, 1.5, size=(5, size, size, 2))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), size)


@needs_toolchain
@pytest.mark.slow
def test_gated_merge_in_verilator(tmp_path) -> None:
    """The Verilog of a 9x9 map gated in block RAM, in Verilator under input gaps: every
    sample equals the golden model."""
    from keras2clash import api

    model = build_gated_model(9, "multiply", "map", False, 9)
    api.emit(model, "1,7,8", tmp_path / "se", show=False)
    x = np.random.default_rng(9).uniform(-0.5, 1.5, size=(6, 9, 9, 2))
    np.savez(tmp_path / "data.npz", x=x, y=np.zeros(len(x), dtype=np.int64))
    rtl = api.rtlsim(tmp_path / "se", tmp_path / "data.npz", "verilator", gap_max=3, seed=9, show=False)
    assert rtl.ok and rtl.passed == len(x)
