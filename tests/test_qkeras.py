"""QKeras (qkeras-v3) models in, exactly: the quantized Keras model's own outputs == the
golden model == the hardware, bit for bit on every sample and every output (not the argmax),
for inputs on the input format's grid. QKeras rounds half to even (tf.round), so these also
check the convergent rounding mode end to end. Refusals name the layer and the setting.

scripts/install_qkeras.sh makes `import qkeras` give QKeras (hgq2 ships a compatibility
package of that name, without `qkeras.qconvolutional`): elsewhere these tests skip."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qkeras.qconvolutional", reason="QKeras (qkeras-v3) is not importable: run scripts/setup.sh")

import keras  # noqa: E402
from qkeras.qconvolutional import QConv2D  # noqa: E402
from qkeras.qlayers import QActivation, QDense  # noqa: E402
from qkeras.quantizers import binary, quantized_bits, quantized_relu  # noqa: E402

from helpers import assert_clash_matches_golden, needs_toolchain  # noqa: E402
from keras2clash.errors import K2CError  # noqa: E402
from keras2clash.network import load_network  # noqa: E402
from keras2clash.quant import golden  # noqa: E402
from keras2clash.quant.formats import FixedFormat, parse_format  # noqa: E402


def q(bits, integer, **kw):
    return quantized_bits(bits, integer, alpha=1, **kw)


def set_weights(model, seed=2, scale=0.6):
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if hasattr(layer, "kernel_quantizer"):
            layer.kernel.assign(rng.normal(0, scale, layer.kernel.shape))
            layer.bias.assign(rng.normal(0, scale, layer.bias.shape))
    return model


def mlp():
    """Input quantizer, a quantized_relu output, a QActivation fused after a linear layer,
    a kernel with QDense's default per-channel power-of-two scales (alpha=None -> auto_po2)."""
    inp = keras.Input((16,))
    x = QActivation(q(6, 2), name="qin")(inp)
    x = QDense(12, kernel_quantizer=q(4, 0), bias_quantizer=q(6, 2), activation=quantized_relu(5, 2), name="d1")(x)
    x = QDense(8, kernel_quantizer=quantized_bits(4, 0), bias_quantizer=q(6, 2), name="d2")(x)
    x = QActivation(q(6, 3), name="q2")(x)
    out = QDense(3, kernel_quantizer=q(5, 1), bias_quantizer=q(6, 2), activation=q(8, 3), name="d3")(x)
    return set_weights(keras.Model(inp, out))


def grid(shape, frac=4, seed=0, span=5.0):
    rng = np.random.default_rng(seed)
    return (rng.integers(-int(span * 2**frac), int(span * 2**frac), shape) / 2**frac).astype(np.float32)


def golden_outputs(network, x):
    raw = golden.run(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    return network.plans[-1].out_fmt.to_real(raw)


def test_formats_come_from_the_quantizers():
    network = load_network(mlp(), "1,7,8")
    plans = {p.name: p for p in network.plans}
    assert network.plans[0].in_fmt == parse_format("1,2,3,rnd_conv,sat")  # qin: 6 bits, 2 integer
    assert plans["d1"].out_fmt == FixedFormat(0, 2, 3, "nearest_even")  # quantized_relu(5, 2): unsigned
    assert plans["d2"].out_fmt == FixedFormat(1, 3, 2, "nearest_even")  # the QActivation after it
    assert plans["d3"].out_fmt == FixedFormat(1, 3, 4, "nearest_even")
    assert network.formats.layers["d3"].weight == FixedFormat(1, 1, 3)  # quantized_bits(5, 1) values


def test_golden_model_equals_qkeras_on_every_output():
    """Inputs on a 2^-4 grid (ties at the 2^-3 input format) up to 5 in magnitude: every
    quantizer saturates somewhere and rounds ties; all 6,000 outputs equal QKeras'."""
    model = mlp()
    network = load_network(model, "1,7,8")
    x = grid((2000, 16))
    want = np.asarray(model(x), dtype=np.float64)
    np.testing.assert_array_equal(golden_outputs(network, x), want)
    values = golden.run_all(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    assert values["d1"].max() == 31 and values["d3"].min() == -128  # saturated somewhere
    # the test can fail: rounding ties up (the default mode) instead of to even differs
    from dataclasses import replace

    ties_up = [
        replace(p, in_fmt=p.in_fmt.with_modes("nearest"), out_fmt=p.out_fmt.with_modes("nearest"))
        for p in network.plans
    ]
    raw = golden.run(ties_up, network.params, golden.quantize_inputs(ties_up, x))
    assert np.any(ties_up[-1].out_fmt.to_real(raw) != want)


def test_conv2d_model_equals_qkeras():
    keras.utils.set_random_seed(0)
    inp = keras.Input((6, 6, 2))
    x = QActivation(quantized_relu(4, 1), name="qin")(inp)  # unsigned input: negatives -> 0
    x = QConv2D(
        3,
        (3, 3),
        kernel_quantizer=q(4, 0),
        bias_quantizer=q(5, 1),
        activation=quantized_relu(6, 3),
        padding="same",
        name="c1",
    )(x)
    x = keras.layers.MaxPooling2D(2, name="p")(x)  # keeps its input's format
    x = keras.layers.Flatten(name="f")(x)
    out = QDense(4, kernel_quantizer=q(4, 0), bias_quantizer=q(5, 1), name="d")(x)  # the exact accumulator
    model = set_weights(keras.Model(inp, out), scale=0.5)
    network = load_network(model, "1,7,8")
    assert network.plans[0].in_fmt == FixedFormat(0, 1, 3, "nearest_even")
    assert {p.name: p.in_fmt for p in network.plans}["p"] == FixedFormat(0, 3, 3, "nearest_even")
    x = grid((300, 6, 6, 2), span=3.0)
    np.testing.assert_array_equal(golden_outputs(network, x), np.asarray(model(x), dtype=np.float64))


def test_layers_that_move_values_keep_their_input_format():
    """Padding, pooling, upsampling and cropping between QKeras layers (`Kind.selects_values`)
    output some of their input's values, in QKeras' float32 too: each keeps its input's format
    and the golden model equals QKeras."""
    keras.utils.set_random_seed(1)
    inp = keras.Input((5, 5, 2))
    x = QActivation(q(5, 2), name="qin")(inp)
    x = QConv2D(
        3, (3, 3), kernel_quantizer=q(4, 0), bias_quantizer=q(5, 1), activation=quantized_relu(6, 3), name="c1"
    )(x)
    x = keras.layers.ZeroPadding2D(1, name="zp")(x)  # a max pooling reads it: it stays a padding
    x = keras.layers.MaxPooling2D(2, name="p")(x)
    x = keras.layers.UpSampling2D(2, name="up")(x)
    x = keras.layers.Cropping2D(1, name="crop")(x)
    out = QDense(4, kernel_quantizer=q(4, 0), bias_quantizer=q(5, 1), name="d")(keras.layers.Flatten(name="f")(x))
    model = set_weights(keras.Model(inp, out), scale=0.5)
    network = load_network(model, "1,7,8")
    fmts = {p.name: p.in_fmt for p in network.plans}
    assert {p.type for p in network.plans} >= {"zeropad2d", "maxpool2d", "upsample2d", "crop2d"}
    assert fmts["zp"] == fmts["p"] == fmts["up"] == fmts["crop"] == fmts["d"] == FixedFormat(0, 3, 3, "nearest_even")
    x = grid((300, 5, 5, 2), span=3.0)
    np.testing.assert_array_equal(golden_outputs(network, x), np.asarray(model(x), dtype=np.float64))


def test_input_format_when_the_model_does_not_quantize_its_input():
    inp = keras.Input((8,))
    out = QDense(3, kernel_quantizer=q(4, 1), bias_quantizer=q(4, 1), activation=q(6, 2), name="d")(inp)
    model = set_weights(keras.Model(inp, out))
    with pytest.raises(K2CError, match=r"does not quantize its input .*QActivation\(quantized_bits.*--input-format"):
        load_network(model, "1,7,8")
    network = load_network(model, "1,7,8", input_format="1,3,4")
    x = grid((500, 8))  # on the 1,3,4 grid: QKeras multiplies these very values
    np.testing.assert_array_equal(golden_outputs(network, x), np.asarray(model(x), dtype=np.float64))
    with pytest.raises(K2CError, match="brings its own formats"):
        load_network(model, "1,7,8", layer_formats={"d": {"o": "1,3,4"}})


def one_layer(**kw):
    inp = keras.Input((4,))
    x = QActivation(kw.pop("iq", q(6, 2)), name="qin")(inp)
    base = dict(kernel_quantizer=q(4, 0), bias_quantizer=q(4, 0), activation=q(6, 2))
    return keras.Model(inp, QDense(2, name="bad", **{**base, **kw})(x))


@pytest.mark.parametrize(
    "kw,match",
    [
        (
            dict(activation=quantized_bits(6, 2, alpha=1, use_stochastic_rounding=True)),
            r"'bad' \(QDense\), activation quantized_bits\(6,2,0,alpha=1,use_stochastic_rounding=1\): "
            r"use_stochastic_rounding=True is a stochastic quantizer",
        ),
        (
            dict(kernel_quantizer=quantized_bits(4, 0, alpha="auto")),
            r"'bad' \(QDense\), kernel_quantizer .*alpha='auto' scales each channel by a float",
        ),
        (
            dict(activation=quantized_bits(6, 2, alpha="auto_po2")),
            r"'bad' \(QDense\), activation .*alpha='auto_po2' scales the activations",
        ),
        (
            dict(activation=quantized_bits(6, 2, 1, alpha=1)),
            r"'bad' \(QDense\), activation .*symmetric=1 on a signed quantizer",
        ),
        (dict(activation=binary()), r"'bad' \(QDense\), activation .*the quantizer binary has no fixed-point format"),
        (dict(activation=quantized_relu(4, 1, negative_slope=0.25)), r"negative_slope=0.25"),
        (dict(activation="sigmoid"), r"'bad' \(QDense\) applies activation 'sigmoid' in float32"),
        (dict(kernel_quantizer=None), r"'bad' \(QDense\): kernel_quantizer=None multiplies by the float kernel"),
        (dict(iq=quantized_bits(6, 2, alpha=1, qnoise_factor=0.5)), r"'qin' \(QActivation\).*qnoise_factor=0.5"),
    ],
    ids=[
        "stochastic",
        "alpha-auto",
        "alpha-auto-po2-activation",
        "symmetric",
        "binary",
        "leaky",
        "sigmoid",
        "float-kernel",
        "qnoise",
    ],
)
def test_unbuildable_settings_are_refused_naming_layer_and_setting(kw, match):
    with pytest.raises(K2CError, match=match):
        load_network(one_layer(**kw), "1,7,8")


def test_standalone_qactivation_is_refused():
    inp = keras.Input((4,))
    x = QActivation(q(6, 2), name="qin")(inp)
    x = QDense(3, kernel_quantizer=q(4, 0), bias_quantizer=q(4, 0), activation=q(6, 2), name="d1")(x)
    out = QActivation(q(4, 1), name="again")(x)
    with pytest.raises(
        K2CError,
        match=r"QActivation 'again' is a standalone requantization.*'d1' quantizes its "
        r"output already",
    ):
        load_network(keras.Model(inp, out), "1,7,8")


def test_saved_qkeras_model_loads_and_converts(tmp_path):
    """A .keras file of a QKeras model loads without the user importing qkeras first."""
    from keras2clash.network import load_model

    model = mlp()
    path = tmp_path / "qk.keras"
    model.save(path)
    loaded, _ = load_model(str(path))
    assert [type(layer).__name__ for layer in loaded.layers[1:]] == [
        "QActivation",
        "QDense",
        "QDense",
        "QActivation",
        "QDense",
    ]
    x = grid((200, 16))
    np.testing.assert_array_equal(
        golden_outputs(load_network(str(path), "1,7,8"), x), np.asarray(model(x), dtype=np.float64)
    )


@needs_toolchain
def test_clash_simulation_equals_qkeras(tmp_path):
    """End to end: the emitted Clash network of a QKeras model (ties to even everywhere,
    an unsigned quantized_relu, saturation) equals the golden model, which equals QKeras'
    own outputs, bit for bit on every sample."""
    import keras2clash as k2c
    from keras2clash.backend.project import load_project

    inp = keras.Input((4,))
    x = QActivation(q(5, 1), name="qin")(inp)
    x = QDense(3, kernel_quantizer=q(4, 0), bias_quantizer=q(4, 1), activation=quantized_relu(4, 1), name="h1")(x)
    out = QDense(2, kernel_quantizer=q(4, 0), bias_quantizer=q(4, 1), activation=q(5, 1), name="h2")(x)
    model = set_weights(keras.Model(inp, out), seed=4, scale=0.8)
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    x = grid((40, 4), span=2.5)
    want, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=3)
    np.testing.assert_array_equal(project.plans[-1].out_fmt.to_real(want), np.asarray(model(x), dtype=np.float64))
    # the hardware's requantizations meet ties: rounding them up would give other outputs
    from dataclasses import replace

    ties_up = [replace(p, out_fmt=p.out_fmt.with_modes("nearest")) for p in project.plans]
    ties_up = [replace(p, in_fmt=ties_up[i - 1].out_fmt) if i else p for i, p in enumerate(ties_up)]
    assert np.any(golden.run(ties_up, project.params, golden.quantize_inputs(project.plans, x)) != want)


def test_cli_emit_takes_the_model_formats_and_an_input_format(tmp_path, capsys):
    """`keras2clash emit` on a saved QKeras model: no --format needed; a model that does not
    quantize its input takes --input-format, and without it fails with one error."""
    import json

    from test_cli import run_cli

    inp = keras.Input((8,))
    out = QDense(3, kernel_quantizer=q(4, 1), bias_quantizer=q(4, 1), activation=quantized_relu(6, 2), name="d")(inp)
    set_weights(keras.Model(inp, out)).save(tmp_path / "m.keras")
    code, text = run_cli(["emit", str(tmp_path / "m.keras"), "--out", str(tmp_path / "no")], capsys)
    assert code != 0 and not (tmp_path / "no").exists()
    assert "does not quantize its input" in " ".join(text.split())
    code, text = run_cli(
        ["emit", str(tmp_path / "m.keras"), "--out", str(tmp_path / "net"), "--input-format", "1,3,4"], capsys
    )
    assert code == 0, text
    (layer,) = json.loads((tmp_path / "net" / "manifest.json").read_text())["layers"]
    assert layer["in_fmt"] == [1, 3, 4] and layer["out_fmt"] == [0, 2, 4, "nearest_even", "saturate"]


@needs_toolchain
def test_clash_simulation_of_a_conv_pool_model_equals_qkeras(tmp_path):
    """QConv2D ('same', unsigned quantized_relu output), MaxPooling2D ('same': the padding must
    lose against unsigned values in a signed container), QDense: hardware == golden == QKeras."""
    import keras2clash as k2c
    from keras2clash.backend.project import load_project

    inp = keras.Input((5, 5, 2))
    x = QActivation(quantized_relu(4, 1), name="qin")(inp)
    x = QConv2D(
        3,
        (3, 3),
        kernel_quantizer=q(4, 0),
        bias_quantizer=q(5, 1),
        activation=quantized_relu(6, 3),
        padding="same",
        name="c1",
    )(x)
    x = keras.layers.MaxPooling2D(2, padding="same", name="p")(x)
    x = keras.layers.Flatten(name="f")(x)
    out = QDense(3, kernel_quantizer=q(4, 0), bias_quantizer=q(5, 1), activation=q(8, 3), name="d")(x)
    model = set_weights(keras.Model(inp, out), scale=0.5)
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    x = grid((30, 5, 5, 2), span=3.0)
    want, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=3)
    np.testing.assert_array_equal(project.plans[-1].out_fmt.to_real(want), np.asarray(model(x), dtype=np.float64))
