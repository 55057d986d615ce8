"""TimeDistributed around a per-position layer, and EinsumDense (Keras' and HGQ2's QEinsumDense)
whose equation is a Dense on the last axis.

Each accepted form is checked by its IR records (a Dense record on a vector, a 1x1 Conv2D per
position keeping the Keras layer's name and class) and by the golden model at a wide format
against Keras' own float output (within the rounding the contract allows); the refusals are
one line naming the layer and the setting; an HGQ2 QEinsumDense per position equals HGQ2 bit
for bit; a sequence model of both is bit-exact in the Clash simulation.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from keras import layers as L  # noqa: E402
from test_layers_conv1d import _golden_vs_keras, _randomize  # noqa: E402

from helpers import assert_clash_matches_golden, needs_toolchain  # noqa: E402
from keras2clash.errors import K2CError  # noqa: E402
from keras2clash.frontend.convert import to_graph  # noqa: E402
from keras2clash.quant import golden  # noqa: E402
from keras2clash.quant.formats import parse_format  # noqa: E402


def head(shape: tuple[int, ...], *stack: L.Layer) -> keras.Model:
    """`stack` on an input of `shape`, then Flatten and a Dense head."""
    return keras.Sequential([keras.Input(shape), *stack, L.Flatten(name="flat"), L.Dense(2, name="head")])


def refusal(model: keras.Model) -> str:
    with pytest.raises(K2CError) as info:
        to_graph(model)
    message = str(info.value)
    assert "\n" not in message
    return message


def inputs(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (4, *shape)).astype("float32")


# --- TimeDistributed ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 3), (3, 2, 4)])
def test_time_distributed_dense_is_the_dense_per_position(shape) -> None:
    """TimeDistributed(Dense) on (steps, C) or (steps, W, C): the 1x1 Conv2D of a Dense per
    position, named after the TimeDistributed layer, with the Dense's kernel and activation."""
    model = _randomize(head(shape, L.TimeDistributed(L.Dense(3, activation="relu"), name="td")), seed=1)
    record = to_graph(model)["td"]
    inner = model.get_layer("td").layer
    ir_shape = (1, *shape[:-1], 3) if len(shape) == 2 else (*shape[:-1], 3)
    assert (record.type, record.source_class, record.kernel_size, record.output_shape, record.activation) == (
        "conv2d",
        "Dense",
        (1, 1),
        ir_shape,
        "relu",
    )
    np.testing.assert_array_equal(record.kernel.reshape(shape[-1], 3), inner.kernel.numpy())
    np.testing.assert_array_equal(record.bias, inner.bias.numpy())
    _golden_vs_keras(model, "td", inputs(shape, 2))


def test_time_distributed_pass_through_layers_fold_and_fuse() -> None:
    """TimeDistributed Dropout disappears; TimeDistributed BatchNormalization (its axis given
    on the step's shape) folds and TimeDistributed Activation fuses into the Dense before it."""
    model = _randomize(
        head(
            (6, 4),
            L.TimeDistributed(L.Dense(3), name="td"),
            L.TimeDistributed(L.Dropout(0.3), name="drop"),
            L.TimeDistributed(L.BatchNormalization(axis=1), name="bn"),
            L.TimeDistributed(L.Activation("relu"), name="act"),
        ),
        seed=3,
    )
    variance = model.get_layer("bn").layer.moving_variance
    variance.assign(np.abs(variance.numpy()) + 0.5)
    graph = to_graph(model)
    assert [(r.name, r.type) for r in graph.layers] == [("td", "conv2d"), ("flat", "flatten"), ("head", "dense")]
    assert graph["td"].fused == ("bn", "act") and graph["td"].activation == "relu"
    _golden_vs_keras(model, "td", inputs((6, 4), 4), keras_name="act")


def test_time_distributed_activation_alone() -> None:
    """A TimeDistributed LeakyReLU after a layer it cannot fuse into is an activation record of its name."""
    model = head((4, 3), L.MaxPooling1D(2, name="pool"), L.TimeDistributed(L.LeakyReLU(0.25), name="leaky"))
    graph = to_graph(model)
    record = graph["leaky"]
    assert (record.type, record.activation, record.source_class) == (
        "activation",
        "leaky_relu(negative_slope=0.25)",
        "LeakyReLU",
    )


def test_time_distributed_formats_and_knobs_reach_it() -> None:
    """Formats and parallelism given by the TimeDistributed layer's name apply to its record."""
    from keras2clash.network import load_network

    model = _randomize(head((5, 3), L.TimeDistributed(L.Dense(4), name="td")), seed=5)
    network = load_network(model, "1,7,8", fifos=False, layer_formats={"td": {"o": "1,3,6"}}, parallelism=[2, 1])
    plan = next(p for p in network.plans if p.name == "td")
    assert plan.out_fmt == parse_format("1,3,6") and plan.engine_knobs.pe == 2


@pytest.mark.parametrize(
    ("build", "fragments"),
    [
        (
            lambda: head((4, 6, 2), L.TimeDistributed(L.Conv1D(2, 3), name="tconv")),
            ["TimeDistributed layer 'tconv' wraps a Conv1D", "Dense, Activation"],
        ),
        (
            lambda: head((4, 5), L.TimeDistributed(L.EinsumDense("ab,bc->ac", 3), name="tein")),
            ["TimeDistributed layer 'tein' wraps a EinsumDense"],
        ),
        (
            lambda: head((2, 3, 3, 2), L.TimeDistributed(L.Dense(2), name="t4")),
            ["TimeDistributed layer 't4' gets an input of shape (2, 3, 3, 2) (rank 4)", "add a Reshape"],
        ),
        (
            lambda: head((4, 3, 2), L.TimeDistributed(L.BatchNormalization(axis=1), name="tbn")),
            ["BatchNormalization layer 'tbn' normalises axis 1", "only the last (channels) axis"],
        ),
    ],
)
def test_time_distributed_refusals(build, fragments) -> None:
    message = refusal(build())
    for fragment in fragments:
        assert fragment in message, (fragment, message)


# --- EinsumDense ------------------------------------------------------------------------------

EINSUM_CASES = [
    # equation, input shape, output_shape, bias_axes, record type, IR output shape
    ("ab,bc->ac", (5,), 3, "c", "dense", (3,)),
    ("ab,bc->ac", (5,), 3, None, "dense", (3,)),
    ("...b,bc->...c", (5,), 3, "c", "dense", (3,)),
    ("abc,cd->abd", (4, 5), (4, 3), "d", "conv2d", (1, 4, 3)),
    ("abc,cd->abd", (4, 5), (4, 3), None, "conv2d", (1, 4, 3)),
    ("...c,cd->...d", (4, 5), 3, "d", "conv2d", (1, 4, 3)),
    ("xyz,zw->xyw", (4, 5), (4, 2), "w", "conv2d", (1, 4, 2)),
    ("abcd,de->abce", (3, 2, 5), (3, 2, 3), "e", "conv2d", (3, 2, 3)),
]


@pytest.mark.parametrize(("equation", "shape", "out", "bias_axes", "kind", "ir_shape"), EINSUM_CASES)
def test_einsum_dense_is_a_dense(equation, shape, out, bias_axes, kind, ir_shape) -> None:
    """Each equation that is a Dense on the last axis: the Dense record on a vector, the 1x1
    Conv2D per position of a sequence or an image; the golden model matches Keras."""
    layer = L.EinsumDense(equation, out, bias_axes=bias_axes, activation="relu", name="ein")
    model = _randomize(head(shape, layer), seed=7)
    record = to_graph(model)["ein"]
    assert (record.type, record.output_shape, record.activation, record.use_bias) == (
        kind,
        ir_shape,
        "relu",
        bias_axes is not None,
    )
    if kind == "conv2d":
        assert (record.source_class, record.kernel_size) == ("EinsumDense", (1, 1))
    np.testing.assert_array_equal(record.kernel.reshape(shape[-1], -1), layer.kernel.numpy())
    bias = layer.bias.numpy() if bias_axes else np.zeros(ir_shape[-1])
    np.testing.assert_array_equal(record.bias, bias)
    _golden_vs_keras(model, "ein", inputs(shape, 8))


@pytest.mark.parametrize(
    ("equation", "shape", "out", "bias_axes"),
    [
        ("abc,cde->abde", (4, 5), (4, 3, 2), None),  # two new axes
        ("abc,cd->abd", (4, 5), (4, 3), "bd"),  # a bias per position
        ("abc,cd->acd", (4, 5), (5, 3), None),  # contracts the steps
        ("abc,bd->acd", (4, 5), (5, 3), None),  # a Dense on the steps
        ("ab,cb->ac", (5,), 3, None),  # a transposed kernel
        ("...c,cd->...d", (3, 2, 5), 3, "d"),  # '...' on an image
    ],
)
def test_einsum_dense_refusals(equation, shape, out, bias_axes) -> None:
    model = head(shape, L.EinsumDense(equation, out, bias_axes=bias_axes, name="bad"))
    message = refusal(model)
    assert message.startswith(f"EinsumDense layer 'bad' computes '{equation}' (bias_axes {bias_axes!r}) on an input")
    assert f"of shape {shape}" in message
    assert "only a Dense on the last axis is converted: 'ab,bc->ac' or '...b,bc->...c' on a vector" in message
    assert "'abc,cd->abd' or '...c,cd->...d' per step of a sequence" in message


def test_qeinsum_dense_per_position_equals_hgq2() -> None:
    """HGQ2's QEinsumDense per step of a sequence and per pixel of an image: a 1x1 Conv2D with
    HGQ2's quantized kernel and bias; the golden model with the model's formats equals HGQ2."""
    pytest.importorskip("hgq")
    from hgq import layers as Q
    from test_hgq import datalane, grid_inputs, randomise_weight_bits
    from test_hgq_layers import assert_golden_equals_hgq2

    from keras2clash.frontend import hgq as H

    for equation, shape, out, bias_axes in [
        ("abc,cd->abd", (5, 4), (5, 3), "d"),
        ("...c,cd->...d", (5, 4), 3, None),
        ("abcd,de->abce", (3, 2, 4), (3, 2, 3), "e"),
    ]:
        keras.utils.set_random_seed(3)
        inp = keras.Input(shape)
        x = Q.QEinsumDense(
            equation,
            out,
            bias_axes=bias_axes,
            activation="relu",
            iq_conf=datalane(i0=1, f0=4, overflow_mode="SAT"),
            name="qe",
        )(inp)
        x = keras.layers.Flatten(name="flat")(x)
        model = keras.Model(inp, Q.QDense(2, iq_conf=datalane(k0=0, i0=2, f0=3, overflow_mode="SAT"), name="d")(x))
        layer = model.get_layer("qe")
        randomise_weight_bits(layer)
        if bias_axes:
            layer.bias.assign(np.linspace(-0.5, 0.5, layer.bias.shape[0]).astype("float32"))
        record = to_graph(model)["qe"]
        assert (record.type, record.source_class, record.kernel_size) == ("conv2d", "QEinsumDense", (1, 1))
        kernel, bias = H.quantized_weights(layer)
        np.testing.assert_array_equal(record.kernel.reshape(kernel.shape), kernel)
        assert_golden_equals_hgq2(model, grid_inputs((64, *shape), seed=2, scale=2.0))


# --- the Clash simulation ---------------------------------------------------------------------


@needs_toolchain
def test_sequence_model_bit_exact_in_clash(tmp_path) -> None:
    """Input(T, C) -> TimeDistributed(Dense) -> EinsumDense('abc,cd->abd') -> Flatten -> Dense:
    golden == Clash simulation on every sample (back to back, and under gaps and stalls), with
    the hardware model's cycles; the generated Haskell says what each layer came from."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    model = _randomize(
        keras.Sequential(
            [
                keras.Input((6, 3)),
                L.TimeDistributed(L.Dense(4, activation="relu"), name="td"),
                L.EinsumDense("abc,cd->abd", (6, 2), bias_axes="d", name="ein"),
                L.Flatten(name="flat"),
                L.Dense(3, name="head"),
            ]
        ),
        seed=11,
    )
    out = tmp_path / "net"
    api.emit(model, "1,7,8", out, [2, 1, 3], cycles=[1, 2, 2], show=False)
    project = load_project(out)
    assert [(p.name, p.type) for p in project.plans] == [
        ("td", "conv2d"),
        ("ein", "conv2d"),
        ("flat", "flatten"),
        ("head", "dense"),
    ]
    network_hs = (out / "Network.hs").read_text()
    assert "Dense applied per position" in network_hs and "EinsumDense applied per position" in network_hs
    x = np.random.default_rng(11).uniform(-1, 1.5, size=(6, 6, 3))
    x_raw = golden.quantize_inputs(project.plans, x.reshape(len(x), *project.input_shape))
    assert_clash_matches_golden(project, x_raw, seed=11)
