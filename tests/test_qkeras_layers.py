"""QKeras' (qkeras-v3) layers beyond QDense/QConv (frontend.qkeras_layers): QDepthwiseConv2D,
QSeparableConv1D/2D, QAveragePooling2D, QGlobalAveragePooling2D and QBatchNormalization,
each in a small model whose golden model equals QKeras' own forward pass bit for bit on 64
samples; the refusals name the layer and the reason."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qkeras.qconvolutional", reason="QKeras (qkeras-v3) is not importable: run scripts/setup.sh")

import keras  # noqa: E402
from qkeras.qconvolutional import QConv1D, QConv2D, QDepthwiseConv2D, QSeparableConv1D, QSeparableConv2D  # noqa: E402
from qkeras.qlayers import QActivation, QDense  # noqa: E402
from qkeras.qnormalization import QBatchNormalization  # noqa: E402
from qkeras.qpooling import QAveragePooling2D, QGlobalAveragePooling2D  # noqa: E402
from qkeras.quantizers import quantized_bits, quantized_relu  # noqa: E402

from helpers import assert_clash_matches_golden, needs_toolchain  # noqa: E402
from keras2clash.errors import K2CError  # noqa: E402
from keras2clash.frontend.convert import to_graph  # noqa: E402
from keras2clash.network import load_network  # noqa: E402
from keras2clash.quant import golden  # noqa: E402


def q(bits, integer, **kw):
    return quantized_bits(bits, integer, alpha=1, **kw)


def grid(shape, frac=4, seed=0, span=3.0):
    rng = np.random.default_rng(seed)
    return (rng.integers(-int(span * 2**frac), int(span * 2**frac), shape) / 2**frac).astype(np.float32)


def set_weights(model, seed=0):
    """Random weights; batch-normalization statistics away from the identity."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        for w in layer.weights:
            if "moving_variance" in w.path:
                w.assign(rng.uniform(0.3, 3.0, w.shape))
            elif "gamma" in w.path:
                w.assign(rng.uniform(0.5, 2.0, w.shape))
            else:
                w.assign(rng.normal(0, 0.6, w.shape))
    return model


def assert_golden_equals_qkeras(model, x):
    network = load_network(model, "1,7,8")
    raw = golden.run(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    got = network.plans[-1].out_fmt.to_real(raw).reshape(len(x), -1)
    np.testing.assert_array_equal(got, np.asarray(model(x), dtype=np.float64).reshape(len(x), -1))
    return network


def image_model(*layers, shape=(10, 10, 2), head=True, seed=1):
    """QActivation -> QConv2D -> `layers` -> (Flatten -> QDense)."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input(shape)
    x = QActivation(q(6, 2), name="qin")(inp)
    x = QConv2D(4, 3, kernel_quantizer=q(4, 0), bias_quantizer=q(6, 2), activation=quantized_relu(6, 2), name="c")(x)
    for layer in layers:
        x = layer(x)
    if head:
        if len(x.shape) > 2:
            x = keras.layers.Flatten(name="flat")(x)
        x = QDense(3, kernel_quantizer=q(5, 1), bias_quantizer=q(6, 2), name="d")(x)
    return set_weights(keras.Model(inp, x), seed)


def inverse_bn(name="bn"):
    """A QBatchNormalization whose constants are all quantized: inv, beta and mean."""
    return QBatchNormalization(
        inverse_quantizer=q(6, 2),
        gamma_quantizer=None,
        variance_quantizer=None,
        beta_quantizer=q(6, 2),
        mean_quantizer=q(6, 2),
        name=name,
    )


LAYERS = {
    "depthwise": lambda: QDepthwiseConv2D(
        3, depth_multiplier=2, depthwise_quantizer=q(4, 0), bias_quantizer=q(6, 2), activation=q(8, 3), name="x"
    ),
    "depthwise-same-strided-exact-output": lambda: QDepthwiseConv2D(
        3, strides=2, padding="same", depthwise_quantizer=q(4, 0), bias_quantizer=q(6, 2), name="x"
    ),
    "separable": lambda: QSeparableConv2D(
        4,
        2,
        depthwise_quantizer=q(4, 0),
        pointwise_quantizer=q(4, 0),
        bias_quantizer=q(6, 2),
        activation=quantized_relu(6, 2),
        name="x",
    ),
    "avg-3x3-quantized-ninth": lambda: QAveragePooling2D(3, average_quantizer=q(8, 0), activation=q(8, 3), name="x"),
    "avg-2x2-keras-mean": lambda: QAveragePooling2D(2, name="x"),
    "global-avg-quantized": lambda: QGlobalAveragePooling2D(average_quantizer=q(8, 0), name="x"),
    "global-avg-keepdims": lambda: QGlobalAveragePooling2D(keepdims=True, average_quantizer=q(6, 0), name="x"),
    "batchnorm": inverse_bn,
}


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_golden_equals_qkeras(layer):
    """Inside a model (before a QDense) and as its output."""
    x = grid((64, 10, 10, 2), seed=2)
    for head in (True, False):
        assert_golden_equals_qkeras(image_model(LAYERS[layer](), head=head), x)


def test_separable_1d_golden_equals_qkeras():
    keras.utils.set_random_seed(3)
    inp = keras.Input((12, 2))
    x = QActivation(q(6, 2), name="qin")(inp)
    x = QConv1D(3, 3, kernel_quantizer=q(4, 0), bias_quantizer=q(6, 2), activation=quantized_relu(6, 2), name="c")(x)
    x = QSeparableConv1D(
        4, 3, depthwise_quantizer=q(4, 0), pointwise_quantizer=q(4, 1), bias_quantizer=q(6, 2), name="s"
    )(x)
    model = set_weights(keras.Model(inp, x), 3)
    assert [r.type for r in to_graph(model).layers] == ["conv2d", "depthwise2d", "conv2d"]
    assert_golden_equals_qkeras(model, grid((64, 12, 2), seed=3))


def test_batch_normalization_stays_a_stage_and_a_qactivation_sets_its_format():
    model = image_model(inverse_bn(), QActivation(q(8, 3), name="qbn"))
    network = assert_golden_equals_qkeras(model, grid((64, 10, 10, 2), seed=4))
    plans = {p.name: p for p in network.plans}
    assert plans["bn"].type == "batchnorm" and str(plans["bn"].out_fmt) == "1,3,4,rnd_conv,sat"


@pytest.mark.parametrize(
    "layer,match",
    [
        (
            lambda: QAveragePooling2D(3, name="x"),
            r"QKeras layer 'x' \(QAveragePooling2D\) averages 9 values without an average_quantizer",
        ),
        (
            lambda: QAveragePooling2D(2, strides=1, padding="same", average_quantizer=q(8, 0), name="x"),
            r"'x' \(QAveragePooling2D\) pads its input \('same'\)",
        ),
        (
            lambda: QDepthwiseConv2D(3, depthwise_quantizer=None, bias_quantizer=q(6, 2), name="x"),
            r"'x' \(QDepthwiseConv2D\): depthwise_quantizer=None multiplies by the float depthwise kernel",
        ),
        (
            lambda: QBatchNormalization(name="x"),  # QKeras' defaults: inv = gamma / sqrt(variance + eps)
            r"'x' \(QBatchNormalization\): x \* inv \+ offset needs up to \d+ bits .* more than float32's 24",
        ),
    ],
    ids=["avg-of-9-unquantized", "avg-same-pads", "float-depthwise-kernel", "batchnorm-float-inv"],
)
def test_refusals_name_the_layer_and_the_reason(layer, match):
    with pytest.raises(K2CError, match=match):
        load_network(image_model(layer()), "1,7,8")


@pytest.mark.slow
@needs_toolchain
def test_clash_simulation_of_qkeras_depthwise_separable_pooling_batchnorm(tmp_path):
    """QDepthwiseConv2D, QSeparableConv2D, QAveragePooling2D (a quantized 1/9), QBatchNormalization
    and QGlobalAveragePooling2D: Clash == golden (== QKeras) with the hardware model's cycles."""
    import keras2clash as k2c
    from keras2clash.backend.project import load_project

    model = image_model(
        LAYERS["depthwise"](),
        QSeparableConv2D(
            4,
            2,
            depthwise_quantizer=q(4, 0),
            pointwise_quantizer=q(4, 0),
            bias_quantizer=q(6, 2),
            activation=quantized_relu(6, 2),
            name="s",
        ),
        inverse_bn(),
        QActivation(q(8, 3), name="qbn"),
        QGlobalAveragePooling2D(average_quantizer=q(8, 0), name="gap"),
        shape=(12, 12, 2),
    )
    x = grid((4, 12, 12, 2), seed=5)
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    want, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=6)
    np.testing.assert_array_equal(project.plans[-1].out_fmt.to_real(want), np.asarray(model(x), dtype=np.float64))


def test_saved_model_with_these_layers_predicts_as_qkeras(tmp_path):
    import keras2clash as k2c

    sep = QSeparableConv2D(
        4, 2, depthwise_quantizer=q(4, 0), pointwise_quantizer=q(4, 0), bias_quantizer=q(6, 2), name="s"
    )
    model = image_model(
        sep, QAveragePooling2D(3, average_quantizer=q(8, 0), activation=q(8, 3), name="ap"), inverse_bn()
    )
    model.save(tmp_path / "m.keras")
    x = grid((16, 10, 10, 2), seed=7)
    np.testing.assert_array_equal(k2c.predict(str(tmp_path / "m.keras"), x).values, np.asarray(model(x)))
