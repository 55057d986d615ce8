"""Shape layers: ZeroPadding1D/2D, Cropping1D/2D, UpSampling1D/2D,
Reshape and Permute.

They move values and compute nothing, so the golden model must equal Keras exactly on a
quantized input: every layer's raw output == Keras' own output of the dequantized input,
quantized again (exact: the values are representable and only moved). Then random models
that combine them go through the Clash simulation: golden == simulation on every sample,
the hardware model's accept and output cycles == the simulation's, and bit-exact under
random input gaps and output stalls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from keras import layers

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.frontend.convert import to_graph
from keras2clash.frontend.registry import image_shape
from keras2clash.hw import hwmodel
from keras2clash.hw.resources import layer_resources
from keras2clash.network import load_network
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat
from keras2clash.quant.profile import float_forward

WIDE = "1,9,14"
WIDE_FMT = FixedFormat(1, 9, 14)


def _randomize(model: keras.Model, seed: int) -> keras.Model:
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_weights()])
    return model


def _with_head(input_shape: tuple[int, ...], *stack: layers.Layer) -> keras.Model:
    """Input -> stack -> Flatten -> Dense: the smallest network the hardware builds."""
    return _randomize(
        keras.Sequential([keras.Input(input_shape), *stack, layers.Flatten(name="flat"), layers.Dense(3, name="head")]),
        0,
    )


def _reader(rank: int) -> list[layers.Layer]:
    """A layer that reads a rank-`rank` tensor without folding a Reshape into itself (as the
    Flatten of `_with_head` would, `ir.shape_passes.fold_reshapes`): an upsampling by 1."""
    return (
        [layers.UpSampling2D(1, name="keep")]
        if rank == 3
        else [layers.UpSampling1D(1, name="keep")]
        if rank == 2
        else []
    )


def assert_golden_equals_keras(model: keras.Model, names: list[str], seed: int = 0) -> None:
    """Each named layer's golden raw output == the Keras layer applied to the golden model's
    input of that layer (dequantized), quantized again: shape layers move values, so
    exactly, with no tolerance. And the float model of the IR (`profile.float_forward`, the
    calibration path) equals Keras on the whole network."""
    planned = load_network(model, WIDE, fifos=False)
    plans = {plan.name: plan for plan in planned.plans}
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, size=(4, *model.inputs[0].shape[1:]))
    x_raw = golden.quantize_inputs(planned.plans, x.reshape(len(x), *planned.plans[0].input_shape))
    values = golden.run_all(planned.plans, golden.quantize_params(planned.plans), x_raw)
    scale = float(1 << WIDE_FMT.frac)
    for name in names:
        chain = [*plans[name].layer.fused, name]  # paddings folded into this one come first
        source = values[plans[name].inputs[0]]
        out = (source / scale).astype(np.float32)
        for step in chain:  # (removed identities between them: only the shape changes)
            layer = model.get_layer(step)
            out = layer(np.reshape(out, (len(source), *layer.input.shape[1:])))
        want = golden.quantize_inputs(planned.plans, np.asarray(out, dtype=np.float64))
        got = values[name]
        assert got.shape[1:] == image_shape(want.shape[1:])
        assert np.array_equal(got.reshape(len(got), -1), want.reshape(len(want), -1)), name
    traces = float_forward(planned.graph, x.reshape(len(x), *planned.plans[0].input_shape))
    keras_out = np.asarray(model(x.astype(np.float32)), dtype=np.float64)
    np.testing.assert_allclose(traces[-1].out, keras_out, rtol=1e-4, atol=1e-4)


def _types(model: keras.Model) -> list[str]:
    return [layer.type for layer in to_graph(model)]


# --- golden == Keras, per layer and option ------------------------------------------------

sides = st.integers(0, 2)


@settings(max_examples=12, deadline=None)
@given(h=st.integers(1, 4), w=st.integers(1, 4), c=st.integers(1, 3), pads=st.tuples(sides, sides, sides, sides))
def test_zero_padding_2d_standalone(h, w, c, pads) -> None:
    """Before a Flatten (nothing to fold into) a ZeroPadding2D is a padding layer of its own."""
    top, bottom, left, right = pads
    model = _with_head((h, w, c), layers.ZeroPadding2D(((top, bottom), (left, right)), name="zp"))
    assert _types(model) == (["zeropad2d", "flatten", "dense"] if any(pads) else ["flatten", "dense"])
    if any(pads):
        assert_golden_equals_keras(model, ["zp"])


@settings(max_examples=8, deadline=None)
@given(steps=st.integers(1, 6), c=st.integers(1, 3), left=sides, right=sides)
def test_zero_padding_1d(steps, c, left, right) -> None:
    model = _with_head((steps, c), layers.ZeroPadding1D((left, right), name="zp"))
    if left or right:
        (pad, *_) = to_graph(model).layers
        assert pad.type == "zeropad2d" and pad.pads == (0, 0, left, right)
        assert pad.output_shape == (1, steps + left + right, c)
        assert_golden_equals_keras(model, ["zp"])


@settings(max_examples=12, deadline=None)
@given(h=st.integers(1, 6), w=st.integers(1, 6), c=st.integers(1, 3), data=st.data())
def test_cropping_2d(h, w, c, data) -> None:
    top = data.draw(st.integers(0, h - 1))
    bottom = data.draw(st.integers(0, h - 1 - top))
    left = data.draw(st.integers(0, w - 1))
    right = data.draw(st.integers(0, w - 1 - left))
    model = _with_head((h, w, c), layers.Cropping2D(((top, bottom), (left, right)), name="crop"))
    assert_golden_equals_keras(model, ["crop"])


@settings(max_examples=8, deadline=None)
@given(steps=st.integers(1, 8), c=st.integers(1, 3), data=st.data())
def test_cropping_1d(steps, c, data) -> None:
    left = data.draw(st.integers(0, steps - 1))
    right = data.draw(st.integers(0, steps - 1 - left))
    model = _with_head((steps, c), layers.Cropping1D((left, right), name="crop"))
    assert to_graph(model).layers[0].crops == (0, 0, left, right)
    assert_golden_equals_keras(model, ["crop"])


@settings(max_examples=12, deadline=None)
@given(h=st.integers(1, 4), w=st.integers(1, 4), c=st.integers(1, 3), sh=st.integers(1, 3), sw=st.integers(1, 3))
def test_upsampling_2d(h, w, c, sh, sw) -> None:
    model = _with_head((h, w, c), layers.UpSampling2D((sh, sw), name="up"))
    assert_golden_equals_keras(model, ["up"])


@settings(max_examples=8, deadline=None)
@given(steps=st.integers(1, 5), c=st.integers(1, 3), size=st.integers(1, 4))
def test_upsampling_1d(steps, c, size) -> None:
    model = _with_head((steps, c), layers.UpSampling1D(size, name="up"))
    assert to_graph(model).layers[0].size == (1, size)
    assert_golden_equals_keras(model, ["up"])


def _factorisations(n: int) -> list[tuple[int, ...]]:
    """Shapes of rank 1 to 3 with n elements."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    shapes = [(n,)] + [(d, n // d) for d in divisors]
    shapes += [(a, b, n // (a * b)) for a in divisors for b in divisors if (n // a) % b == 0]
    return shapes


@settings(max_examples=20, deadline=None)
@given(source=st.sampled_from([(12,), (2, 6), (3, 4), (2, 3, 2), (4, 1, 3), (6, 4)]), data=st.data())
def test_reshape_any_order_keeping_target(source, data) -> None:
    """Reshape keeps the row-major order: relabelling, Collect, Scatter or both."""
    target = data.draw(st.sampled_from(_factorisations(math.prod(source))))
    spelled = list(target)
    if data.draw(st.booleans()):
        spelled[data.draw(st.integers(0, len(target) - 1))] = -1  # Keras resolves -1
    model = _with_head(source, layers.Reshape(tuple(spelled), name="rs"), *_reader(len(target)))
    graph = to_graph(model)
    if image_shape(target) == image_shape(source):
        assert "rs" not in [layer.name for layer in graph]
    else:
        assert_golden_equals_keras(model, ["rs"])
        assert graph["rs"].type == ("flatten" if len(target) == 1 else "reshape")


def test_reshapes_fold_into_the_next_reshape_or_flatten() -> None:
    """Reshape -> Reshape is one Reshape (none when it undoes the first); Reshape -> Flatten
    is one Flatten."""
    model = _with_head(
        (4, 6),
        layers.Reshape((2, 2, 6), name="r1"),
        layers.Reshape((8, 3), name="r2"),
        layers.UpSampling1D(1, name="keep"),
    )
    graph = to_graph(model)
    assert [(layer.name, layer.type, layer.input_shape) for layer in graph][:2] == [
        ("r2", "reshape", (1, 4, 6)),
        ("keep", "upsample2d", (1, 8, 3)),
    ]
    assert graph["r2"].fused == ("r1",)
    assert_golden_equals_keras(model, ["r2"])
    undone = _with_head((4, 6), layers.Reshape((8, 3), name="r1"), layers.Reshape((4, 6), name="r2"))
    assert _types(undone) == ["flatten", "dense"]
    flat = to_graph(_with_head((4, 6), layers.Reshape((8, 3), name="r1")))
    assert flat["flat"].input_shape == (1, 4, 6) and flat["flat"].fused == ("r1",)


@pytest.mark.parametrize(
    ("source", "dims", "kind"),
    [
        ((3, 1, 4), (2, 1, 3), "reshape"),  # (1, 3, 4): a relabelling
        ((1, 5), (2, 1), "reshape"),  # (5, 1): five beats of one value
        ((4, 1), (2, 1), "reshape"),  # (1, 4): one beat of four
        ((2, 3), (1, 2), None),  # the identity permutation
    ],
)
def test_permute_of_size_one_axes(source, dims, kind) -> None:
    model = _with_head(source, layers.Permute(dims, name="perm"), *_reader(len(source)))
    names = {layer.name: layer.type for layer in to_graph(model)}
    assert names.get("perm") == kind
    if kind:
        assert_golden_equals_keras(model, ["perm"])


def test_reshape_from_a_vector_is_a_scatter() -> None:
    model = _randomize(
        keras.Sequential(
            [
                keras.Input((5,)),
                layers.Dense(12, name="d0"),
                layers.Reshape((2, 2, 3), name="rs"),
                layers.Conv2D(2, 2, name="c"),
                layers.Flatten(),
                layers.Dense(2, name="d1"),
            ]
        ),
        1,
    )
    assert _types(model) == ["dense", "reshape", "conv2d", "flatten", "dense"]
    assert_golden_equals_keras(model, ["rs"])
    plans = load_network(model, "1,7,8", fifos=False).plans
    res = layer_resources(plans[1])
    assert (res.line_buffer_bits, res.register_bits, res.multipliers) == (0, 12 * 16, 0)


# --- folding and standalone padding -------------------------------------------------------


def test_padding_folds_into_convolution_and_next_padding() -> None:
    model = _with_head(
        (5, 5, 1),
        layers.ZeroPadding2D(1, name="zp1"),
        layers.ZeroPadding2D(((0, 1), (2, 0)), name="zp2"),
        layers.Conv2D(2, 3, name="c"),
    )
    (conv, *_) = to_graph(model).layers
    assert conv.type == "conv2d" and conv.pads == (1, 2, 3, 1) and conv.fused == ("zp1", "zp2")
    assert conv.input_shape == (5, 5, 1)
    assert_golden_equals_keras(model, [])


def test_padding_before_max_pooling_stays_zero_padding() -> None:
    """Max pooling pads with -infinity itself: zeros can win a border window, so no fold."""
    model = _with_head((4, 4, 1), layers.ZeroPadding2D(1, name="zp"), layers.MaxPooling2D(3, name="mp"))
    assert _types(model) == ["zeropad2d", "maxpool2d", "flatten", "dense"]
    assert_golden_equals_keras(model, ["zp", "mp"])


def test_padding_with_two_readers_stays() -> None:
    inp = keras.Input((4, 4, 2))
    zp = layers.ZeroPadding2D(1, name="zp")(inp)
    a = layers.Conv2D(2, 3, name="a")(zp)
    b = layers.Conv2D(2, 3, name="b")(zp)
    out = layers.Dense(2, name="d")(layers.Flatten()(layers.Add(name="add")([a, b])))
    model = _randomize(keras.Model(inp, out), 2)
    assert _types(model)[0] == "zeropad2d"
    assert_golden_equals_keras(model, ["zp"])


# --- refusals: one K2CError naming the layer, its class and the reason --------------------


@pytest.mark.parametrize(
    ("build", "fragments"),
    [
        (
            lambda: _with_head((4, 4, 1), layers.UpSampling2D(2, interpolation="bilinear", name="bil")),
            ["UpSampling2D layer 'bil'", "interpolation='bilinear'", "only 'nearest'"],
        ),
        (
            lambda: _with_head((4, 6), layers.Permute((2, 1), name="tr")),
            ["Permute layer 'tr'", "dims=(2, 1)", "a transpose needs a frame buffer"],
        ),
        (
            lambda: _with_head((2, 3, 4), layers.Permute((3, 1, 2), name="tr3")),
            ["Permute layer 'tr3'", "a transpose needs a frame buffer"],
        ),
        (
            lambda: _with_head((8,), layers.Reshape((2, 2, 1, 2), name="r4")),
            ["Reshape layer 'r4'", "only vectors, sequences"],
        ),
        (
            lambda: _with_head((4, 4, 1), layers.ZeroPadding2D(1, data_format="channels_first", name="zcf")),
            ["ZeroPadding2D layer 'zcf'", "channels_last"],
        ),
    ],
)
def test_refusals(build, fragments) -> None:
    with pytest.raises(K2CError) as info:
        to_graph(build())
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


# --- random models through the Clash simulation -------------------------------------------


def _image_ops(draw, shape: tuple[int, int, int], stack: list[Callable[[], layers.Layer]]) -> tuple[int, int, int]:
    """Two to four image layers (shape layers, convolutions, pooling) appended to `stack`
    (as constructors: Keras layers are built outside the strategy)."""
    for k in range(draw(st.integers(2, 4))):
        h, w, ch = shape
        ops = ["pad", "conv", "relabel"] + ["crop"] * (h * w > 1) + ["up"] * (h * w <= 12) + ["pool"] * (min(h, w) >= 2)
        op = draw(st.sampled_from(ops))
        if op == "pad":
            t, b, left, r = draw(st.tuples(sides, sides, sides, sides))
            stack.append(partial(layers.ZeroPadding2D, ((t, b), (left, r)), name=f"zp_{k}"))
            shape = (h + t + b, w + left + r, ch)
        elif op == "crop":
            top = draw(st.integers(0, h - 1))
            bottom = draw(st.integers(0, h - 1 - top))
            left = draw(st.integers(0, w - 1))
            right = draw(st.integers(0, w - 1 - left))
            stack.append(partial(layers.Cropping2D, ((top, bottom), (left, right)), name=f"cr_{k}"))
            shape = (h - top - bottom, w - left - right, ch)
        elif op == "up":
            sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 3))
            stack.append(partial(layers.UpSampling2D, (sh, sw), name=f"up_{k}"))
            shape = (h * sh, w * sw, ch)
        elif op == "conv":
            f = draw(st.integers(1, 3))
            stack.append(partial(layers.Conv2D, f, draw(st.sampled_from([1, 3])), padding="same", name=f"conv_{k}"))
            shape = (h, w, f)
        elif op == "pool":
            stack.append(partial(layers.MaxPooling2D, 2, name=f"mp_{k}"))
            shape = (h // 2, w // 2, ch)
        else:
            stack.append(partial(layers.Reshape, (1, h * w, ch), name=f"rl_{k}"))
            shape = (1, h * w, ch)
    return shape


def _sequence_ops(draw, steps: int, c: int, stack: list[Callable[[], layers.Layer]]) -> int:
    """One to three 1-D shape layers appended to `stack`; the steps after them."""
    for k in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["pad", "crop", "up"]))
        if op == "pad":
            left, right = draw(sides), draw(sides)
            stack.append(partial(layers.ZeroPadding1D, (left, right), name=f"zp1_{k}"))
            steps += left + right
        elif op == "crop" and steps > 1:
            left = draw(st.integers(0, steps - 1))
            right = draw(st.integers(0, steps - 1 - left))
            stack.append(partial(layers.Cropping1D, (left, right), name=f"cr1_{k}"))
            steps -= left + right
        elif op == "up" and steps <= 6:
            size = draw(st.integers(1, 3))
            stack.append(partial(layers.UpSampling1D, size, name=f"up1_{k}"))
            steps *= size
    return steps


@st.composite
def shape_models(draw) -> Callable[[], keras.Model]:
    """A chain mixing the shape layers with convolution and pooling, small enough to simulate
    quickly: an image, a sequence or a vector (scattered into an image) at the input, and a
    beat-width conversion before the head."""
    start = draw(st.sampled_from(["image", "sequence", "vector"]))
    c = draw(st.integers(1, 3))
    stack: list[Callable[[], layers.Layer]] = []
    if start == "vector":
        input_shape: tuple[int, ...] = (draw(st.integers(2, 6)),)
        h, w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        stack += [partial(layers.Dense, h * w * c, name="d_in"), partial(layers.Reshape, (h, w, c), name="to_image")]
        shape = (h, w, c)
    elif start == "sequence":
        input_shape = (draw(st.integers(2, 6)), c)
        steps = _sequence_ops(draw, input_shape[0], c, stack)
        rows = draw(st.sampled_from([d for d in range(1, steps + 1) if steps % d == 0]))
        stack.append(partial(layers.Reshape, (rows, steps // rows, c), name="to_image"))
        shape = (rows, steps // rows, c)
    else:
        input_shape = shape = (draw(st.integers(2, 5)), draw(st.integers(2, 5)), c)
    shape = _image_ops(draw, shape, stack)
    total = math.prod(shape)
    width = draw(st.sampled_from([d for d in range(1, total + 1) if total % d == 0 and d <= 12]))
    if width != shape[-1]:  # a beat-width conversion, kept by a 1-D zero padding after it
        stack.append(partial(layers.Reshape, (total // width, width), name="rebeat"))
        stack.append(partial(layers.ZeroPadding1D, (draw(sides), 1), name="zp_rebeat"))
    stack += [partial(layers.Flatten, name="flat"), partial(layers.Dense, 3, name="head")]
    seed = draw(st.integers(0, 99))
    return lambda: _randomize(keras.Sequential([keras.Input(input_shape), *(make() for make in stack)]), seed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(build=shape_models())
def test_random_shape_models_golden_equals_keras(build) -> None:
    """Every shape layer of a random chain equals Keras on the quantized input."""
    model = build()
    graph_names = {layer.name for layer in to_graph(model)}
    names = [
        layer.name
        for layer in model.layers
        if layer.name in graph_names
        and type(layer).__name__
        in ("ZeroPadding1D", "ZeroPadding2D", "Cropping1D", "Cropping2D", "UpSampling1D", "UpSampling2D", "Reshape")
    ]
    assert_golden_equals_keras(model, names)
    hwmodel.timing(load_network(model, "1,7,8", fifos=False).plans, 2)  # the model runs


def _branch_model() -> keras.Model:
    """A ZeroPadding2D read by two branches (so it stays a Pad block), cropping in one, an
    upsampling after the merge, a relabelling and a beat-width conversion before the head."""
    inp = keras.Input((4, 3, 2))
    zp = layers.ZeroPadding2D(1, name="zp")(inp)
    a = layers.Conv2D(3, 1, name="a")(layers.Cropping2D(1, name="crop")(zp))
    b = layers.Conv2D(3, 3, name="b")(zp)
    up = layers.UpSampling2D((2, 1), name="up")(layers.Add(name="add")([a, b]))
    rl = layers.Cropping1D((1, 2), name="crop1")(layers.Reshape((-1, 3), name="relabel")(up))  # (21, 3)
    rb = layers.ZeroPadding1D((0, 1), name="zp1")(layers.Reshape((9, 7), name="rebeat")(rl))  # 7 in, 3 out
    return _randomize(keras.Model(inp, layers.Dense(4, name="head")(layers.Flatten(name="flat")(rb))), 5)


def _sequence_model() -> keras.Model:
    """1-D layers, a Permute of a size-1 axis, a scatter from a dense vector into a sequence."""
    return _randomize(
        keras.Sequential(
            [
                keras.Input((5, 2)),
                layers.ZeroPadding1D((2, 1), name="zp1"),
                layers.UpSampling1D(2, name="up1"),
                layers.Cropping1D((1, 3), name="crop1"),
                layers.Reshape((1, 12, 2), name="to_image"),
                layers.Permute((2, 1, 3), name="perm"),
                layers.Reshape((24,), name="flat"),
                layers.Dense(6, name="d"),
                layers.Reshape((3, 2), name="scatter"),
                layers.UpSampling1D(1, name="up_one"),
                layers.Flatten(name="f2"),
                layers.Dense(3, name="head"),
            ]
        ),
        6,
    )


def test_vectorised_model_equals_one_configuration_at_a_time() -> None:
    """The hardware model over many knob configurations at once (numpy arrays, as `options`
    uses it) gives each configuration's own latency and II."""
    plans = load_network(_sequence_model(), "1,7,8", fifos=False).plans
    configs = [
        [p.with_knobs(min(k, p.filters), min(b, p.window)) if p.is_compute else p for p in plans]
        for k in (1, 2, 3)
        for b in (1, 2)
    ]
    expected = [(hwmodel.timing(c, 1).first_latency, hwmodel.steady_state(c)[0]) for c in configs]
    assert hwmodel.timings(configs) == expected


@needs_toolchain
@settings(
    max_examples=3,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(build=shape_models(), seed=st.integers(0, 1000))
@example(build=_branch_model, seed=1)
@example(build=_sequence_model, seed=2)
def test_shape_models_bit_exact_in_clash(tmp_path_factory, build, seed) -> None:
    """Golden == Clash simulation, back to back and under random gaps and stalls; the
    hardware model's accept and output cycle of every image == the simulation's."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    model = build()
    out = tmp_path_factory.mktemp("shapes") / "net"
    api.emit(model, "1,7,8", out, None, show=False)
    project = load_project(out)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, size=(5, *project.plans[0].input_shape))
    x_raw = golden.quantize_inputs(project.plans, x)
    want, exe = assert_clash_matches_golden(project, x_raw, seed)


@needs_toolchain
@pytest.mark.slow
@pytest.mark.parametrize("build", [_branch_model, _sequence_model])
def test_shape_models_in_verilog(tmp_path, build) -> None:
    """The new blocks through Clash's Verilog: Verilator lint clean (no constant comparisons
    on unpadded or uncropped sides) and bit-exact in Verilator under gaps and stalls."""
    from keras2clash import api

    model = build()
    out = tmp_path / "net"
    api.emit(model, "1,7,8", out, None, show=False)
    rng = np.random.default_rng(3)
    data = tmp_path / "data.npz"
    np.savez(
        data,
        x=rng.uniform(-1.5, 1.5, size=(12, *model.inputs[0].shape[1:])).astype(np.float32),
        y=rng.integers(0, int(model.outputs[0].shape[-1]), 12),
    )
    api.hdl(out, ["verilog"])
    result = api.rtlsim(out, data, "verilator", gap_max=3, seed=5, show=False)
    assert result.ok and result.passed == len(result.samples) == 12
