"""The 1-D family (Conv1D, MaxPooling1D, AveragePooling1D), dilated convolutions (Conv2D and
Conv1D) and Dense applied to a tensor.

Each layer is checked three ways: its IR record (the 2-D record one row high, the dilation,
the pads, the Keras class kept), the golden model at a wide format against Keras' own float
output of that layer (within the rounding the contract allows), and, for a few random
models that combine them, golden == Clash simulation with the hardware model's cycles, also
under input gaps and output stalls.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.hw.resources import layer_resources
from keras2clash.kinds.window import padded_input_shape
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat

WIDE = FixedFormat(1, 9, 14)
"""A format wide enough that the golden model is Keras' float output up to rounding."""


def _randomize(model, seed: int, scale: float = 0.5):
    """Random weights; BatchNormalization variances made positive (else they fold to NaN)."""
    import keras

    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, scale, w.shape).astype("float32") for w in model.get_weights()])
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_variance.assign(np.abs(layer.moving_variance.numpy()) + 0.5)
    return model


def _layer_error_bound(network, name: str, x: np.ndarray) -> float:
    """How far the golden output of compute layer `name` may be from Keras at WIDE when its
    input is exact up to one rounding: input and weight rounding (half an LSB each, times
    the other operand's magnitude per product), the output rounding, and float32 slack."""
    plan = next(p for p in network.plans if p.name == name)
    lsb = 2.0**-WIDE.frac
    kernel = np.abs(np.asarray(plan.layer.kernel))
    x_max = float(np.max(np.abs(x))) + lsb
    return lsb * (0.5 * kernel.sum(axis=tuple(range(kernel.ndim - 1))).max() + 0.5 * plan.window * x_max + 1) + 1e-4


def _golden_vs_keras(model, name: str, x: np.ndarray, keras_name: str | None = None) -> None:
    """The golden output of layer `name` (raw, at WIDE) against Keras' output of that layer
    (or of `keras_name`, the last Keras layer fused into it)."""
    import keras

    from keras2clash.network import load_network

    network = load_network(model, WIDE, fifos=False)
    x_raw = golden.quantize_inputs(network.plans, x.reshape(len(x), *network.plans[0].input_shape))
    values = golden.run_all(network.plans, network.params, x_raw)
    got = WIDE.to_real(values[name]).reshape(len(x), -1)
    want = keras.Model(model.inputs, model.get_layer(keras_name or name).output).predict(x, verbose=0)
    want = want.reshape(len(x), -1)
    bound = _layer_error_bound(network, name, x) if name in network.params else 2.0**-WIDE.frac
    assert np.max(np.abs(got - want)) <= bound, (np.max(np.abs(got - want)), bound)


def _sequence(steps: int, channels: int, *stack):
    import keras

    return keras.Sequential(
        [keras.Input((steps, channels)), *stack, keras.layers.Flatten(), keras.layers.Dense(2, name="head")]
    )


# --- Conv1D ----------------------------------------------------------------------------------


@st.composite
def conv1d_options(draw):
    """Options Keras accepts: dilation > 1 only with stride 1; 'valid' needs the dilated
    extent to fit."""
    steps = draw(st.integers(2, 12))
    kernel = draw(st.integers(1, 4))
    dilation = draw(st.integers(1, 3))
    strides = draw(st.integers(1, 3)) if dilation == 1 else 1
    padding = draw(st.sampled_from(["valid", "same", "causal"]))
    assume(padding != "valid" or (kernel - 1) * dilation + 1 <= steps)
    return dict(
        steps=steps,
        channels=draw(st.integers(1, 3)),
        filters=draw(st.integers(1, 4)),
        kernel=kernel,
        strides=strides,
        padding=padding,
        dilation=dilation,
        use_bias=draw(st.booleans()),
        activation=draw(st.sampled_from(["linear", "relu"])),
    )


def _expected_pads(steps: int, kernel: int, strides: int, dilation: int, padding: str) -> tuple[int, int, int, int]:
    extent = (kernel - 1) * dilation + 1
    if padding == "causal":
        return (0, 0, extent - 1, 0)
    if padding == "valid":
        return (0, 0, 0, 0)
    out = -(-steps // strides)
    total = max((out - 1) * strides + extent - steps, 0)
    return (0, 0, total // 2, total - total // 2)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options=conv1d_options(), seed=st.integers(0, 10_000))
def test_conv1d_record_and_golden_match_keras(options, seed) -> None:
    """Conv1D is a Conv2D record one row high (kernel (1, k, C, F), strides (1, s), dilation
    (1, d), pads (0, 0, l, r) with 'causal' = left (k-1)*d), and the golden model at a wide
    format equals Keras' float output of the layer within rounding."""
    import keras

    from keras2clash.frontend.convert import to_graph

    o = options
    conv = keras.layers.Conv1D(
        o["filters"],
        o["kernel"],
        strides=o["strides"],
        padding=o["padding"],
        dilation_rate=o["dilation"],
        use_bias=o["use_bias"],
        activation=o["activation"],
        name="conv",
    )
    model = _randomize(_sequence(o["steps"], o["channels"], conv), seed)
    record = to_graph(model)["conv"]
    assert (record.type, record.source_class) == ("conv2d", "Conv1D")
    assert (record.kernel_size, record.strides, record.dilation) == (
        (1, o["kernel"]),
        (1, o["strides"]),
        (1, o["dilation"]),
    )
    assert record.pads == _expected_pads(o["steps"], o["kernel"], o["strides"], o["dilation"], o["padding"])
    assert record.kernel.shape == (1, o["kernel"], o["channels"], o["filters"])
    x = np.random.default_rng(seed).uniform(-1, 1, (4, o["steps"], o["channels"]))
    _golden_vs_keras(model, "conv", x)


# --- Conv2D dilation -------------------------------------------------------------------------


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    h=st.integers(3, 9),
    w=st.integers(3, 9),
    c=st.integers(1, 2),
    f=st.integers(1, 3),
    kh=st.integers(1, 3),
    kw=st.integers(1, 3),
    dh=st.integers(1, 3),
    dw=st.integers(1, 3),
    padding=st.sampled_from(["valid", "same"]),
    seed=st.integers(0, 10_000),
)
def test_dilated_conv2d_golden_matches_keras(h, w, c, f, kh, kw, dh, dw, padding, seed) -> None:
    """A dilated Conv2D: 'same' pads follow TF's rule on the dilated extent; the golden
    model equals Keras within rounding; the window generator spans the extent (its storage
    grows), the engine does not (multipliers and ROM as without dilation)."""
    import keras

    from keras2clash.network import load_network

    eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    assume(padding == "same" or (eh <= h and ew <= w))
    conv = keras.layers.Conv2D(f, (kh, kw), dilation_rate=(dh, dw), padding=padding, activation="relu", name="conv")
    model = _randomize(
        keras.Sequential([keras.Input((h, w, c)), conv, keras.layers.Flatten(), keras.layers.Dense(2)]), seed
    )
    x = np.random.default_rng(seed).uniform(-1, 1, (3, h, w, c))
    _golden_vs_keras(model, "conv", x)
    plan = next(p for p in load_network(model, "1,7,8", fifos=False).plans if p.name == "conv")
    assert plan.params.extent == (eh, ew) and plan.window == kh * kw * c and plan.multipliers == kh * kw * c
    wide = padded_input_shape(plan)[1]
    assert layer_resources(plan).line_buffer_bits == wide * (eh - 1) * c * 16


# --- Dense on a tensor ----------------------------------------------------------------------


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.sampled_from([(5, 3), (4, 1), (3, 4, 2), (2, 2, 3)]),
    units=st.integers(1, 4),
    bn=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_dense_on_tensor_is_a_1x1_conv(shape, units, bn, seed) -> None:
    """Dense on (steps, C) or (H, W, C) applies per position: a 1x1 Conv2D record keeping
    the Dense name and class; a BatchNormalization and ReLU after it fold and fuse into it."""
    import keras

    from keras2clash.frontend.convert import to_graph

    stack = [keras.layers.Dense(units, name="per_pos")]
    if bn:
        stack += [keras.layers.BatchNormalization(name="bn"), keras.layers.ReLU(name="r")]
    model = keras.Sequential([keras.Input(shape), *stack, keras.layers.Flatten(), keras.layers.Dense(2, name="head")])
    _randomize(model, seed)
    record = to_graph(model)["per_pos"]
    assert (record.type, record.source_class, record.kernel_size) == ("conv2d", "Dense", (1, 1))
    assert record.kernel.shape == (1, 1, shape[-1], units)
    assert record.fused == (("bn", "r") if bn else ())
    assert record.activation == ("relu" if bn else "linear")
    x = np.random.default_rng(seed).uniform(-1, 1, (3, *shape))
    _golden_vs_keras(model, "per_pos", x, keras_name="r" if bn else None)


# --- 1-D pooling ------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["MaxPooling1D", "AveragePooling1D"]),
    steps=st.integers(2, 10),
    channels=st.integers(1, 3),
    pool=st.integers(1, 3),
    strides=st.one_of(st.none(), st.integers(1, 3)),
    padding=st.sampled_from(["valid", "same"]),
    seed=st.integers(0, 10_000),
)
def test_pool1d_record_and_golden_match_keras(kind, steps, channels, pool, strides, padding, seed) -> None:
    """1-D pooling is the 2-D pooling record with pool (1, p), strides (1, s); the golden
    model equals Keras (max: exactly; average: within one rounding). Average 'same' with
    real padding takes the 2-D path's refusal (Keras' border divisor)."""
    import keras

    from keras2clash.frontend.convert import to_graph

    assume(padding == "same" or pool <= steps)
    layer = getattr(keras.layers, kind)(pool, strides=strides, padding=padding, name="pool")
    model = _randomize(_sequence(steps, channels, layer), seed)
    s = strides or pool
    record = to_graph(model)["pool"]
    assert (record.pool_size, record.strides, record.source_class) == ((1, pool), (1, s), kind)
    x = np.random.default_rng(seed).uniform(-1, 1, (4, steps, channels))
    _golden_vs_keras(model, "pool", x)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    left=st.integers(0, 3),
    right=st.integers(0, 3),
    padding=st.sampled_from(["valid", "same", "causal"]),
    seed=st.integers(0, 10_000),
)
def test_zero_padding1d_folds_into_conv1d(left, right, padding, seed) -> None:
    """ZeroPadding1D((l, r)) before a Conv1D adds (0, 0, l, r) to its pads (pass
    fold_padding); the golden model equals Keras."""
    import keras

    from keras2clash.frontend.convert import to_graph

    L = keras.layers
    model = _randomize(
        _sequence(6, 2, L.ZeroPadding1D((left, right), name="zp"), L.Conv1D(3, 3, padding=padding, name="conv")), seed
    )
    record = to_graph(model)["conv"]
    base = _expected_pads(6 + left + right, 3, 1, 1, padding)
    assert record.pads == (0, 0, base[2] + left, base[3] + right)
    assert record.fused == (("zp",) if left or right else ())  # a padding of nothing is removed
    _golden_vs_keras(model, "conv", np.random.default_rng(seed).uniform(-1, 1, (3, 6, 2)))


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "fragments"),
    [
        (
            lambda L: _sequence(8, 4, L.Conv1D(4, 3, groups=2, name="grp")),
            ["Conv1D layer 'grp'", "groups=2", "grouped"],
        ),
        (
            lambda L: _sequence(4, 8, L.Conv1D(2, 3, data_format="channels_first", name="cf")),
            ["Conv1D layer 'cf'", "channels_first"],
        ),
        (
            lambda L: _sequence(8, 2, L.MaxPooling1D(2, data_format="channels_first", name="pcf")),
            ["MaxPooling1D layer 'pcf'", "channels_first"],
        ),
    ],
)
def test_conv1d_refusals(build, fragments) -> None:
    import keras

    from keras2clash.frontend.convert import to_graph

    with pytest.raises(K2CError) as info:
        to_graph(build(keras.layers))
    for fragment in fragments:
        assert fragment in str(info.value)


# --- golden == Clash simulation, cycles == hardware model -----------------------------------


def _model_1d(rng):
    """ZeroPadding1D -> Conv1D -> MaxPooling1D -> Dense per step -> Conv1D (dilated, causal)
    -> AveragePooling1D -> Flatten -> Dense."""
    import keras

    L = keras.layers
    steps = int(rng.integers(8, 14))
    pool = int(rng.integers(1, 3))
    return keras.Sequential(
        [
            keras.Input((steps, int(rng.integers(1, 3)))),
            L.ZeroPadding1D((int(rng.integers(0, 3)), int(rng.integers(0, 3))), name="pad_a"),
            L.Conv1D(
                int(rng.integers(1, 4)),
                int(rng.integers(1, 4)),
                strides=int(rng.integers(1, 3)),
                padding=str(rng.choice(["valid", "same"])),
                activation="relu",
                name="conv_a",
            ),
            L.MaxPooling1D(pool, padding="same", name="pool_a"),
            L.Dense(int(rng.integers(1, 4)), activation="relu", name="per_step"),
            L.Conv1D(
                int(rng.integers(1, 3)),
                int(rng.integers(2, 4)),
                dilation_rate=int(rng.integers(1, 3)),
                padding="causal",
                name="conv_b",
            ),
            L.AveragePooling1D(int(rng.integers(1, 3)), name="avg_b"),
            L.Flatten(name="flat"),
            L.Dense(3, name="head"),
        ]
    )


def _model_2d(rng):
    """Conv2D (dilated) -> Dense per pixel -> BatchNormalization, ReLU (folded, fused) ->
    MaxPooling2D -> Flatten -> Dense."""
    import keras

    L = keras.layers
    h, w = int(rng.integers(5, 8)), int(rng.integers(5, 8))
    return keras.Sequential(
        [
            keras.Input((h, w, int(rng.integers(1, 3)))),
            L.Conv2D(
                int(rng.integers(1, 4)),
                (int(rng.integers(1, 3)), int(rng.integers(2, 4))),
                dilation_rate=(int(rng.integers(1, 3)), int(rng.integers(2, 4))),
                padding=str(rng.choice(["valid", "same"])),
                activation="relu",
                name="conv_dil",
            ),
            L.Dense(int(rng.integers(1, 4)), name="per_pixel"),
            L.BatchNormalization(name="bn"),
            L.ReLU(name="relu"),
            L.MaxPooling2D(2, padding="same", name="pool"),
            L.Flatten(name="flat"),
            L.Dense(3, name="head"),
        ]
    )


@needs_toolchain
@pytest.mark.parametrize("kind", ["1d", "2d"])
@settings(
    max_examples=2, deadline=None, phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck)
)
@given(seed=st.integers(0, 10_000))
def test_random_models_bit_exact_in_clash(tmp_path_factory, kind, seed) -> None:
    """Random models combining the new layers, random knobs: golden == Clash simulation on
    every sample, back to back and with random gaps and stalls, and the hardware model's
    accept and output cycles equal the simulation's."""
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.network import load_network

    rng = np.random.default_rng(seed)
    try:
        model = _randomize((_model_1d if kind == "1d" else _model_2d)(rng), seed)
    except ValueError:  # Keras refuses a geometry (a window larger than its input)
        assume(False)
    planned = load_network(model, "1,7,8", fifos=False)
    compute = [p for p in planned.plans if p.is_compute]
    pes = [int(rng.integers(1, p.filters + 1)) for p in compute]
    cyc = [int(rng.integers(1, min(p.window, 4) + 1)) for p in compute]
    out = tmp_path_factory.mktemp("conv1d") / "net"
    api.emit(model, "1,7,8", out, pes, cycles=cyc, show=False)
    project = load_project(out)
    network_hs = (out / "Network.hs").read_text()
    assert ("Conv1D (one row high)" in network_hs) == (kind == "1d")
    assert "Dense applied per position" in network_hs
    dilated = any(p.params.dilation != (1, 1) for p in project.plans if p.type == "conv2d")
    assert ("Dilated.conv2dDilated" in network_hs) == dilated
    x = rng.uniform(-1, 1.5, size=(5, *model.inputs[0].shape[1:]))
    x_raw = golden.quantize_inputs(project.plans, x.reshape(len(x), *project.input_shape))
    want, exe = assert_clash_matches_golden(project, x_raw, seed)
    data = out.parent / "data.npz"  # the Keras-shaped data, (N, steps, C) for a sequence
    np.savez(data, x=x.astype("float32"), y=np.argmax(model.predict(x, verbose=0), axis=1))
    comparison = api.simulate(out, data, show=False)
    assert comparison.bit_exact == len(x) and comparison.keras_float_accuracy == 1.0


@pytest.mark.slow
@needs_toolchain
def test_conv1d_model_through_cli_run_rtlsim_and_sweep(tmp_path, capsys) -> None:
    """A saved Conv1D model and (N, steps, C) data through `keras2clash run` (Verilog),
    `rtlsim` (Verilator) and `sweep` with a confirmed format: all bit-exact."""
    import json

    from helpers import run_cli

    rng = np.random.default_rng(3)
    model = _randomize(_model_1d(rng), 3)
    x = rng.uniform(-1, 1, (12, *model.inputs[0].shape[1:])).astype("float32")
    model.save(tmp_path / "m.keras")
    np.savez(tmp_path / "test.npz", x=x, y=np.argmax(model.predict(x, verbose=0), axis=1))
    out = tmp_path / "out"
    code, text = run_cli(
        [
            "run",
            str(tmp_path / "m.keras"),
            "--data",
            str(tmp_path / "test.npz"),
            "--out",
            str(out),
            "--verilog",
            "--json",
            str(tmp_path / "run.json"),
        ],
        capsys,
    )
    assert code == 0, text
    assert json.loads((tmp_path / "run.json").read_text())["bit_exact"] == len(x)
    assert "Conv1D" in (out / "Network.hs").read_text()
    code, text = run_cli(["rtlsim", str(out), "--data", str(tmp_path / "test.npz"), "-n", "4"], capsys)
    assert code == 0 and "BIT-EXACT" in text, text
    code, text = run_cli(
        [
            "sweep",
            str(tmp_path / "m.keras"),
            "--data",
            str(tmp_path / "test.npz"),
            "-f",
            "1,3,4;1,7,8",
            "--confirm",
            "1,7,8",
            "-o",
            str(tmp_path / "sw"),
        ],
        capsys,
    )
    assert code == 0, text
