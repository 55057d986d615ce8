"""Transposed convolutions (Conv2DTranspose, Conv1DTranspose): the stride-phase Conv2D
`<name>_phases` and the interleave `<name>` (`kinds.transpose`).

The golden model is the contract's arithmetic (one exact sum of products and the bias per
output value, one rounding): at a wide format, with the Keras layer given the weights the
golden model rounded, its output equals Keras' float output of the same layer within half
an LSB (plus float32 slack), over strides 1-3, kernels 1-4, 'valid'/'same' and
`output_padding`, and over random configurations (hypothesis). The float model of the IR
equals Keras on the whole network. A few networks then run through the Clash simulation:
golden == simulation bit for bit, back to back and under input gaps and output stalls, and
the hardware model's accept and output cycles == the simulation's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from keras import layers

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.frontend.convert import to_graph
from keras2clash.hw import hwmodel
from keras2clash.hw.resources import layer_resources
from keras2clash.network import load_network, plan_network
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat, quantize
from keras2clash.quant.profile import float_forward

WIDE = FixedFormat(1, 9, 14)


def _randomize(model: keras.Model, seed: int, scale: float = 0.5) -> keras.Model:
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, scale, w.shape).astype("float32") for w in model.get_weights()])
    return model


def _image_model(shape: tuple[int, int, int], transposed: layers.Layer, seed: int = 0) -> keras.Model:
    """Input -> the transposed convolution -> Flatten -> Dense (the network ends in a vector)."""
    return _randomize(
        keras.Sequential([keras.Input(shape), transposed, layers.Flatten(name="flat"), layers.Dense(3, name="head")]),
        seed,
    )


def assert_golden_equals_keras(model: keras.Model, name: str, seed: int = 0) -> None:
    """Layer `name`'s golden output at WIDE == the Keras layer on the golden input with the
    golden model's rounded weights, within half an LSB; the IR's float model == Keras."""
    planned = load_network(model, WIDE, fifos=False)
    plans = {plan.name: plan for plan in planned.plans}
    phases, interleave = plans[f"{name}_phases"], plans[name]
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(3, *model.inputs[0].shape[1:]))
    x_raw = golden.quantize_inputs(planned.plans, x.reshape(len(x), *planned.plans[0].input_shape))
    values = golden.run_all(planned.plans, golden.quantize_params(planned.plans), x_raw)
    layer = model.get_layer(name)
    kernel, *bias = layer.get_weights()
    assert phases.w_fmt is not None and phases.b_fmt is not None
    rounded = [quantize(kernel, phases.w_fmt) / 2.0**phases.w_fmt.frac]
    rounded += [quantize(b, phases.b_fmt) / 2.0**phases.b_fmt.frac for b in bias]
    source = values[phases.inputs[0]] / 2.0**phases.in_fmt.frac
    original = layer.get_weights()
    layer.set_weights([w.astype(np.float32) for w in rounded])
    try:
        want = np.asarray(layer(source.reshape(len(x), *layer.input.shape[1:]).astype(np.float32)), dtype=np.float64)
    finally:
        layer.set_weights(original)
    got = values[name] / 2.0**interleave.out_fmt.frac
    assert got.reshape(want.shape).shape == want.shape and got.size == want.size
    lsb = 2.0**-interleave.out_fmt.frac
    assert np.max(np.abs(got.reshape(want.shape) - want)) <= lsb / 2 + 1e-4
    traces = float_forward(planned.graph, x.reshape(len(x), *planned.plans[0].input_shape))
    keras_out = np.asarray(model(x.astype(np.float32)), dtype=np.float64)
    np.testing.assert_allclose(traces[-1].out, keras_out, rtol=1e-4, atol=1e-4)


# --- the records -----------------------------------------------------------------------


def test_records_and_multiplications() -> None:
    """A 3x3 stride-2 'same' Conv2DTranspose: a 2x2 phase Conv2D of 4*F filters (no inserted
    zeros: 4*4*C*F products per input pixel, against 9*C*F for the transposed convolution
    and 4*9*C*F over the zero-inserted input), then the interleave and its crop."""
    model = _image_model((4, 5, 2), layers.Conv2DTranspose(3, 3, strides=2, padding="same", name="up"))
    phases, up, *_ = to_graph(model).layers
    assert (phases.name, phases.type, up.name, up.type) == ("up_phases", "conv2d", "up", "interleave2d")
    assert phases.kernel_size == (2, 2) and phases.strides == (1, 1) and phases.output_shape[-1] == 4 * 3
    assert phases.source_class == "Conv2DTranspose" and up.source_class == "Conv2DTranspose"
    assert up.phases == (2, 2) and up.output_shape == (8, 10, 3)
    plan = next(p for p in load_network(model, "1,7,8", fifos=False).plans if p.name == "up_phases")
    assert plan.window * plan.filters == 4 * (2 * 2 * 2 * 3)  # s*s * m*m*C*F per input pixel


def test_conv1d_transpose_is_one_row_high() -> None:
    model = _randomize(
        keras.Sequential(
            [
                keras.Input((6, 2)),
                layers.Conv1DTranspose(3, 4, strides=3, padding="valid", output_padding=2, name="up"),
                layers.Flatten(name="flat"),
                layers.Dense(3, name="head"),
            ]
        ),
        1,
    )
    phases, up, *_ = to_graph(model).layers
    assert phases.kernel_size == (1, 2) and up.phases == (1, 3) and up.output_shape == (1, 5 * 3 + 4 + 2, 3)
    assert_golden_equals_keras(model, "up")


# --- golden == Keras --------------------------------------------------------------------


SWEEP = [
    (s, k, padding, op)
    for s, k, padding, op in itertools.product((1, 2, 3), (1, 2, 3, 4), ("valid", "same"), (None, "last"))
    if not (op == "last" and s == 1)
]


@pytest.mark.parametrize(("s", "k", "padding", "op"), SWEEP)
def test_conv2d_transpose_golden_equals_keras(s, k, padding, op) -> None:
    """Strides 1-3, kernels 1-4, 'valid'/'same', output_padding none or stride - 1."""
    output_padding = None if op is None else s - 1
    model = _image_model(
        (3, 4, 2),
        layers.Conv2DTranspose(
            2, k, strides=s, padding=padding, output_padding=output_padding, activation="relu", name="up"
        ),
        seed=s * 10 + k,
    )
    assert_golden_equals_keras(model, "up")


def _keras_runs(model: keras.Model) -> bool:
    """Whether Keras runs the model and its transposed convolution's output is not empty."""
    if 0 in model.get_layer("up").output.shape[1:]:
        return False
    try:
        model(np.zeros((1, *model.inputs[0].shape[1:]), dtype=np.float32))
    except Exception:  # noqa: BLE001 - TF refuses some geometries at call time only
        return False
    return True


@st.composite
def transposed_models(draw) -> Callable[[], keras.Model]:
    """A builder of Input -> a random Conv2DTranspose or Conv1DTranspose -> Flatten -> Dense."""
    one_d = draw(st.booleans())
    s = (1, draw(st.integers(1, 3))) if one_d else (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    k = (1, draw(st.integers(1, 4))) if one_d else (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    op = draw(st.none() | st.tuples(st.integers(0, s[0] - 1), st.integers(0, s[1] - 1)))
    shape = (1, draw(st.integers(1, 5))) if one_d else (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    c, f, seed = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(0, 99))
    options = {
        "padding": draw(st.sampled_from(["valid", "same"])),
        "use_bias": draw(st.booleans()),
        "activation": draw(st.sampled_from(["linear", "relu"])),
        "name": "up",
    }

    def build() -> keras.Model:
        if one_d:
            return _image_model(
                (shape[1], c),
                layers.Conv1DTranspose(f, k[1], strides=s[1], output_padding=None if op is None else op[1], **options),
                seed,
            )
        return _image_model((*shape, c), layers.Conv2DTranspose(f, k, strides=s, output_padding=op, **options), seed)

    return build


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(build=transposed_models())
def test_random_transposed_convolutions_golden_equals_keras(build) -> None:
    """Random small configurations (1-D and 2-D, strides, kernels, padding, output_padding,
    bias, activation): golden == Keras within half an LSB; the hardware model runs."""
    model = build()
    assume(_keras_runs(model))
    assert_golden_equals_keras(model, "up")
    hwmodel.timing(load_network(model, "1,7,8", fifos=False).plans, 2)


# --- refusals ----------------------------------------------------------------------------


def test_refusals() -> None:
    """One error each, naming the layer and the option."""

    def refused(model: keras.Model, *fragments: str) -> None:
        with pytest.raises(K2CError) as err:
            to_graph(model)
        for fragment in fragments:
            assert fragment in str(err.value)

    dilated = keras.Sequential([keras.Input((4, 4, 2)), layers.Conv2DTranspose(2, 3, dilation_rate=2, name="dil")])
    refused(dilated, "Conv2DTranspose layer 'dil'", "dilation_rate=(2, 2)", "dilation 1 only")
    first = keras.Sequential(
        [keras.Input((2, 4, 4)), layers.Conv2DTranspose(2, 3, data_format="channels_first", name="cf")]
    )
    refused(first, "Conv2DTranspose layer 'cf'", "channels_first")
    grouped = _image_model((4, 4, 2), layers.Conv2DTranspose(2, 3, name="grp"))
    grouped.get_layer("grp").groups = 2  # Keras' transposed layers take no groups; a subclass might
    refused(grouped, "Conv2DTranspose layer 'grp'", "groups=2")
    odd = keras.Sequential(
        [keras.Input((3, 4, 2)), layers.Conv2DTranspose(2, 2, strides=3, padding="same", output_padding=0, name="odd")]
    )
    refused(odd, "Conv2DTranspose layer 'odd'", "Keras cannot run it either")
    empty = keras.Sequential(
        [keras.Input((1, 1, 2)), layers.Conv2DTranspose(2, 2, padding="same", output_padding=0, name="empty")]
    )
    refused(empty, "Conv2DTranspose layer 'empty'", "no output positions")
    one_d = keras.Sequential([keras.Input((5, 2)), layers.Conv1DTranspose(2, 3, dilation_rate=2, name="dil1")])
    refused(one_d, "Conv1DTranspose layer 'dil1'", "dilation_rate=(2,)")


def test_batchnorm_and_activation_fold_through_the_interleave() -> None:
    """Conv2DTranspose -> BatchNormalization -> ReLU: the interleave moves whole channels, so
    the BatchNormalization folds into the phase convolution (its statistics tiled over the
    phases) and the ReLU fuses into it; the interleave lists both (its output is their Keras
    tensor). With a second reader of the transposed convolution both stay."""

    def build(second_reader: bool) -> keras.Model:
        inp = keras.Input((3, 4, 2))
        up = layers.Conv2DTranspose(2, 3, strides=2, padding="same", name="up")(layers.Conv2D(3, 2, name="c1")(inp))
        act = layers.ReLU(name="act")(layers.BatchNormalization(name="bn")(up))
        out = layers.Conv2D(2, 2, name="c2")(act)
        if second_reader:
            out = layers.Add(name="add")([out, layers.Conv2D(2, 2, name="c3")(up)])
        model = keras.Model(inp, layers.Dense(3, name="head")(layers.Flatten(name="flat")(out)))
        _randomize(model, 7)
        bn = model.get_layer("bn")
        bn.moving_variance.assign(np.abs(bn.moving_variance.numpy()) + 0.5)
        return model

    model = build(False)
    graph = {layer.name: layer for layer in to_graph(model)}
    assert "bn" not in graph and "act" not in graph and graph["up"].fused == ("bn", "act")
    assert graph["up_phases"].activation == "relu"
    planned = load_network(model, WIDE, fifos=False)
    x = np.random.default_rng(0).uniform(-1, 1, size=(4, 3, 4, 2))
    keras_out = np.asarray(model(x.astype(np.float32)), dtype=np.float64)
    np.testing.assert_allclose(float_forward(planned.graph, x)[-1].out, keras_out, rtol=1e-4, atol=1e-4)
    raw = golden.run(planned.plans, golden.quantize_params(planned.plans), golden.quantize_inputs(planned.plans, x))
    assert np.max(np.abs(raw / 2.0 ** planned.plans[-1].out_fmt.frac - keras_out)) < 0.01
    kept = {layer.name: layer.type for layer in to_graph(build(True))}
    assert kept["bn"] == "batchnorm" and kept["up"] == "interleave2d"


def test_formats_go_to_the_phase_convolution() -> None:
    """The interleave keeps its input's format: a format for the Keras layer's name says where
    it belongs."""
    from keras2clash.design import DesignOptions

    model = _image_model((3, 3, 2), layers.Conv2DTranspose(2, 3, strides=2, name="up"))
    with pytest.raises(K2CError, match="give the layer's formats to 'up_phases'"):
        load_network(model, DesignOptions.of("1,7,8", layer_formats={"up": {"o": "1,5,6"}}), fifos=False)
    plans = load_network(
        model, DesignOptions.of("1,7,8", layer_formats={"up_phases": {"o": "1,5,6"}}), fifos=False
    ).plans
    assert [p.out_fmt for p in plans if p.name in ("up_phases", "up")] == [FixedFormat(1, 5, 6)] * 2


def test_an_hls4ml_config_of_the_keras_layer_sets_its_phase_convolution() -> None:
    """An hls4ml config names Keras layers: the transposed convolution's precision and reuse
    factor go to `up_phases`, its weights, formats and knobs; naming both is refused."""
    model = _image_model((3, 3, 2), layers.Conv2DTranspose(2, 3, strides=2, name="up"))
    graph = to_graph(model)
    config = {
        "Model": {"Precision": "ap_fixed<16,8>", "ReuseFactor": 1},
        "LayerName": {"up": {"Precision": {"weight": "ap_fixed<8,2>", "result": "ap_fixed<12,6>"}, "ReuseFactor": 4}},
    }
    plans = {p.name: p for p in plan_network(graph, "1,7,8", hls4ml_config=config, fifos=False).plans}
    phases = plans["up_phases"]
    widths = [(f.sign, f.int, f.frac) for f in (phases.w_fmt, phases.out_fmt, plans["up"].out_fmt)]
    assert widths == [(1, 1, 6), (1, 5, 6), (1, 5, 6)]  # ap_fixed<8,2>, ap_fixed<12,6>
    assert phases.knobs is not None and (phases.knobs.pe, phases.knobs.cycles) == (phases.filters, 4)
    config["LayerName"]["up_phases"] = {"ReuseFactor": 2}
    with pytest.raises(K2CError, match="'up' and 'up_phases' are one Keras layer"):
        plan_network(graph, "1,7,8", hls4ml_config=config, fifos=False)


# --- the hardware ------------------------------------------------------------------------


def _middle_model() -> keras.Model:
    """Conv2D -> Conv2DTranspose (3x3, stride 2, 'same', relu) -> Conv2D -> Flatten -> Dense."""
    return _randomize(
        keras.Sequential(
            [
                keras.Input((5, 4, 2)),
                layers.Conv2D(3, 2, name="c1"),
                layers.Conv2DTranspose(2, 3, strides=2, padding="same", activation="relu", name="up"),
                layers.Conv2D(2, 2, name="c2"),
                layers.Flatten(name="flat"),
                layers.Dense(3, name="head"),
            ]
        ),
        0,
    )


def _same_model() -> keras.Model:
    """Conv2D -> Conv2DTranspose (4x4, stride 2, 'same', relu: one phase row and column
    cropped on every side) -> Conv2D -> Flatten -> Dense."""
    return _randomize(
        keras.Sequential(
            [
                keras.Input((5, 4, 2)),
                layers.Conv2D(3, 2, name="c1"),
                layers.Conv2DTranspose(2, 4, strides=2, padding="same", activation="relu", name="up"),
                layers.Conv2D(2, 2, strides=2, name="c2"),
                layers.Flatten(name="flat"),
                layers.Dense(3, name="head"),
            ]
        ),
        3,
    )


def _cropped_model() -> keras.Model:
    """Strides (3, 2), a 4x3 kernel, 'valid' with output_padding (1, 1) (a crop after the
    interleave, and a one-pixel-wide row: the interleave's register word)."""
    return _randomize(
        keras.Sequential(
            [
                keras.Input((3, 1, 2)),
                layers.Conv2DTranspose(2, (4, 3), strides=(3, 2), output_padding=(1, 1), name="up"),
                layers.Conv2D(2, 3, strides=2, name="c2"),
                layers.Flatten(name="flat"),
                layers.Dense(3, name="head"),
            ]
        ),
        2,
    )


def _sequence_model() -> keras.Model:
    """Conv1D -> Conv1DTranspose (kernel 3, stride 2, 'same', output_padding 1) -> Conv1D."""
    return _randomize(
        keras.Sequential(
            [
                keras.Input((5, 2)),
                layers.Conv1D(3, 2, name="c1"),
                layers.Conv1DTranspose(2, 3, strides=2, padding="same", output_padding=1, activation="relu", name="up"),
                layers.Conv1D(2, 2, name="c2"),
                layers.Flatten(name="flat"),
                layers.Dense(3, name="head"),
            ]
        ),
        1,
    )


def test_interleave_resources_and_model() -> None:
    """The interleave stores the later phase rows of one input row (block RAM) and one output
    row's phases of a pixel; it multiplies nothing. Its output pace is one beat a cycle: a
    2x2 interleave of a 4x3 phase image keeps the network's interval at or above 4*3*4 beats,
    reached when the phase convolution keeps up."""
    plans = load_network(_middle_model(), "1,7,8", fifos=False).plans
    up = layer_resources(next(p for p in plans if p.name == "up"))
    assert up.multipliers == 0 and up.line_buffer_bits == 3 * (1 * 2 * 2 * 16) and up.register_bits == 2 * 2 * 16
    assert hwmodel.steady_state(plans)[0] >= 4 * 3 * 4

    def interval(pe: int) -> float:
        """The II with the phase convolution at `pe` and every other engine fully parallel."""
        knobs = {p.name: pe if p.name == "up_phases" else p.filters for p in plans if p.is_compute}
        return hwmodel.steady_state([p.with_knobs(knobs[p.name], 1) if p.is_compute else p for p in plans])[0]

    # The 4x3 phase image's 12 windows at S = 8 / pe steps against the interleave's 48 beats:
    # the slower sets the pace; stalling the input while the later rows leave costs at most 3.
    assert [interval(pe) for pe in (1, 2, 4, 8)] == [96, 51, 48, 48]


@needs_toolchain
def test_transposed_bit_exact_in_clash(tmp_path_factory) -> None:
    """Golden == Clash simulation (back to back, and under random gaps and stalls); the
    hardware model's accept and output cycles == the simulation's: a 2x2 interleave from its
    block RAM, cropped on every side (more configurations: `test_transposed_in_verilog`)."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    out = tmp_path_factory.mktemp("transpose") / "net"
    model = _same_model()
    assert to_graph(model).by_name()["up"].crops == (1, 1, 1, 1)
    api.emit(model, "1,7,8", out, None, show=False)
    project = load_project(out)
    x = np.random.default_rng(3).uniform(-1.5, 1.5, size=(4, *project.plans[0].input_shape))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), 3)


@needs_toolchain
@pytest.mark.slow
@pytest.mark.parametrize("build", [_middle_model, _cropped_model, _sequence_model])
def test_transposed_in_verilog(tmp_path, build) -> None:
    """Golden == Clash simulation and the hardware model's cycles (as above), and through
    Clash's Verilog bit-exact in Verilator under gaps and stalls: no crop, a crop with a
    one-pixel-wide row (the interleave's register word), and Conv1DTranspose."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    model = build()
    out = tmp_path / "net"
    api.emit(model, "1,7,8", out, None, show=False)
    project = load_project(out)
    x = np.random.default_rng(4).uniform(-1.5, 1.5, size=(12, *model.inputs[0].shape[1:]))
    assert_clash_matches_golden(
        project, golden.quantize_inputs(project.plans, x.reshape(12, *project.plans[0].input_shape)), 4
    )
    data = tmp_path / "data.npz"
    np.savez(data, x=x.astype(np.float32), y=np.random.default_rng(5).integers(0, 3, 12))
    api.hdl(out, ["verilog"])
    result = api.rtlsim(out, data, "verilator", gap_max=3, seed=5, show=False)
    assert result.ok and result.passed == len(result.samples) == 12
