"""Keras Normalization (`kinds.rescaling`: the affine record with its own class) and the pass
that folds a preprocessing affine layer into the next linear layer (`ir.passes.fold_affine_forward`):
the record's constants, where it folds and where it stays, the float function against Keras,
the pass on random layers (hypothesis), refusals, and the Clash simulation of a folded and
an unfolded design."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from keras import layers

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.frontend.convert import to_graph
from keras2clash.ir.graph import Graph
from keras2clash.ir.passes import fold_affine_forward
from keras2clash.kinds.batchnorm import BatchNorm
from keras2clash.kinds.conv import Conv2D
from keras2clash.kinds.dense import Dense
from keras2clash.kinds.depthwise import DepthwiseConv2D
from keras2clash.kinds.flatten import Flatten
from keras2clash.kinds.rescaling import Normalization, Rescaling
from keras2clash.quant.profile import float_forward

EPS = keras.config.epsilon()


def _data(shape: tuple[int, ...], seed: int, n: int = 200) -> np.ndarray:
    """Features on their own scales and offsets, as raw data comes."""
    rng = np.random.default_rng(seed)
    c = shape[-1]
    return (rng.normal(size=(n, *shape)) * rng.uniform(0.5, 3, c) + rng.uniform(-2, 4, c)).astype("float32")


def _norm(shape: tuple[int, ...], seed: int = 0, **options) -> layers.Normalization:
    """A Normalization adapted on `_data` (unless given mean and variance)."""
    norm = layers.Normalization(name="norm", **options)
    if "mean" not in options:
        norm.adapt(_data(shape, seed))
    return norm


def _randomise(model: keras.Model, seed: int) -> keras.Model:
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if layer.get_weights() and not isinstance(layer, layers.Normalization):
            layer.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in layer.get_weights()])
    return model


def _mlp(seed: int = 0, **options) -> keras.Model:
    inp = keras.Input((5,))
    x = _norm((5,), seed, **options)(inp)
    x = layers.Dense(6, activation="relu", name="hidden")(x)
    return _randomise(keras.Model(inp, layers.Dense(3, name="out")(x)), seed)


def _cnn(padding: str, seed: int = 0, depthwise: bool = False, **options) -> keras.Model:
    inp = keras.Input((6, 6, 3))
    x = _norm((6, 6, 3), seed, **options)(inp)
    if depthwise:
        x = layers.DepthwiseConv2D(3, padding=padding, depth_multiplier=2, activation="relu", name="conv")(x)
    else:
        x = layers.Conv2D(4, 3, padding=padding, activation="relu", name="conv")(x)
    x = layers.Flatten(name="flat")(x)
    return _randomise(keras.Model(inp, layers.Dense(3, name="out")(x)), seed)


def _float_matches_keras(model: keras.Model, graph: Graph, seed: int) -> float:
    """The largest difference between the graph in float64 and Keras, relative to Keras' largest
    output, on fresh data."""
    x = _data(model.input_shape[1:], seed + 1, 32)
    want = np.asarray(model(x), dtype=np.float64)
    got = float_forward(graph, x.astype(np.float64))[-1].out
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


# --- the record -----------------------------------------------------------------------


@pytest.mark.parametrize("invert", [False, True])
def test_record_is_keras_formula(invert) -> None:
    """scale = 1 / max(sqrt(var), eps), offset = -mean * scale (inverted: max(sqrt(var), eps),
    mean), the statistics Keras adapted; a zero variance takes epsilon."""
    data = _data((4,), 3)
    data[:, 2] = 1.5  # a constant feature: variance 0
    norm = layers.Normalization(name="norm", invert=invert)
    norm.adapt(data)
    inp = keras.Input((4,))
    x = layers.Activation("tanh", name="tanh")(norm(inp))  # keeps the normalization a stage
    model = keras.Model(inp, layers.Dense(2, name="out")(x))
    record = to_graph(model)["norm"]
    assert isinstance(record, Normalization) and record.keras_class == "Normalization"
    assert record.type == "normalization" and record.activation == "tanh"
    mean, var = np.asarray(norm.mean, dtype=np.float64)[0], np.asarray(norm.variance, dtype=np.float64)[0]
    assert var[2] == 0 and mean[2] == pytest.approx(1.5)
    std = np.maximum(np.sqrt(var), EPS)
    assert std[2] == EPS
    scale, offset = (std, mean) if invert else (1 / std, -mean / std)
    assert np.array_equal(record.scale, scale) and np.allclose(record.offset, offset, rtol=1e-15)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"axis": None},
        {"axis": 3},  # the channels, as a positive index
        {"mean": 2.0, "variance": 9.0},
        {"mean": [1.0, -2.0, 0.5], "variance": [4.0, 0.25, 1.0]},
        {"mean": [1.0, -2.0, 0.5], "variance": [4.0, 0.25, 1.0], "invert": True},
    ],
)
def test_statistics_per_channel(options) -> None:
    """Every way to give the statistics per channel is the same record, and (unfolded, before a
    'same' convolution) the graph's float function is Keras'."""
    model = _cnn("same", **options)
    graph = to_graph(model)
    assert [layer.type for layer in graph.layers] == ["normalization", "conv2d", "flatten", "dense"]
    record = graph["norm"]
    assert record.scale.shape == record.offset.shape == (3,)
    if options.get("axis", -1) is None or ("mean" in options and np.ndim(options["mean"]) == 0):
        assert np.all(record.scale == record.scale[0]) and np.all(record.offset == record.offset[0])
    if "variance" in options:
        std = np.sqrt(np.broadcast_to(options["variance"], 3))
        mean = np.broadcast_to(options["mean"], 3)
        want = (std, mean) if options.get("invert") else (1 / std, -mean / std)
        assert np.allclose(record.scale, want[0]) and np.allclose(record.offset, want[1])
    assert _float_matches_keras(model, graph, 0) < 1e-5


@pytest.mark.parametrize(
    ("axis", "shape", "fragment"),
    [
        ((1, 2), (6, 6, 3), "axis=(1, 2) keeps statistics along another axis"),
        (1, (8, 3), "axis=1 keeps statistics along another axis"),  # a sequence's steps
    ],
)
def test_statistics_along_other_axes_refused(axis, shape, fragment) -> None:
    inp = keras.Input(shape)
    model = keras.Model(inp, layers.Dense(2)(layers.Flatten()(_norm(shape, axis=axis)(inp))))
    with pytest.raises(K2CError) as info:
        to_graph(model)
    message = str(info.value)
    assert message.startswith("Normalization layer 'norm' has a mean that varies along an axis other than the channels")
    assert fragment in message and "\n" not in message


def test_other_axis_with_equal_statistics_is_per_channel() -> None:
    """axis=(1, 2) on an image whose statistics happen to be one per channel (given, equal along
    the rows and columns) is the per-channel map: the check is on the values."""
    inp = keras.Input((2, 2, 3))
    norm = layers.Normalization(axis=(1, 2), mean=np.full((2, 2), 1.5), variance=np.full((2, 2), 4.0), name="norm")
    model = _randomise(keras.Model(inp, layers.Dense(2, name="out")(layers.Flatten(name="flat")(norm(inp)))), 1)
    graph = to_graph(model)
    assert [layer.type for layer in graph.layers] == ["flatten", "dense"]  # folded through the Flatten
    assert np.allclose(graph["out"].kernel, model.get_layer("out").get_weights()[0] / 2)
    assert _float_matches_keras(model, graph, 1) < 1e-5


def test_negative_variance_refused() -> None:
    inp = keras.Input((3,))
    norm = layers.Normalization(mean=[0.0, 0.0, 0.0], variance=[1.0, -1.0, 1.0], name="norm")
    with pytest.raises(K2CError, match=r"^Normalization layer 'norm' has a negative variance"):
        to_graph(keras.Model(inp, layers.Dense(2)(norm(inp))))


# --- where it folds ---------------------------------------------------------------------


@pytest.mark.parametrize("invert", [False, True])
def test_mlp_folds_into_the_first_dense(invert) -> None:
    """At an MLP's input it folds into the first Dense: W' = W * s per input, b' = b + t @ W,
    and the graph is Keras' function."""
    model = _mlp(invert=invert)
    graph = to_graph(model)
    assert [layer.type for layer in graph.layers] == ["dense", "dense"]
    hidden = graph["hidden"]
    assert hidden.fused == ("norm",) and hidden.inputs == (graph.input_name,)
    norm = model.get_layer("norm")
    std = np.maximum(np.sqrt(np.asarray(norm.variance, dtype=np.float64)[0]), EPS)
    mean = np.asarray(norm.mean, dtype=np.float64)[0]
    scale, offset = (std, mean) if invert else (1 / std, -mean / std)
    w, b = (np.asarray(v, dtype=np.float64) for v in model.get_layer("hidden").get_weights())
    assert np.allclose(hidden.kernel, w * scale[:, None], rtol=1e-14)
    assert np.allclose(hidden.bias, b + offset @ w, rtol=1e-12)
    assert _float_matches_keras(model, graph, 0) < 1e-5


@pytest.mark.parametrize("depthwise", [False, True])
def test_valid_convolution_folds_same_stays(depthwise) -> None:
    """Before a 'valid' convolution (every tap a real input) it folds; before a 'same' one it
    stays its own stage: a padded zero is not a normalized value."""
    kind = "depthwise2d" if depthwise else "conv2d"
    valid, same = _cnn("valid", depthwise=depthwise), _cnn("same", depthwise=depthwise)
    folded, kept = to_graph(valid), to_graph(same)
    assert [layer.type for layer in folded.layers] == [kind, "flatten", "dense"]
    assert folded["conv"].fused == ("norm",)
    assert [layer.type for layer in kept.layers] == ["normalization", kind, "flatten", "dense"]
    assert _float_matches_keras(valid, folded, 0) < 1e-5 and _float_matches_keras(same, kept, 0) < 1e-5


def test_folds_through_a_flatten_and_stays_elsewhere() -> None:
    """Through a Flatten into a Dense (value i is channel i mod C); a BatchNormalization on the
    input folds with it; before a pooling, after an activation, with two readers, or a
    BatchNormalization inside the network (after an activation), it stays."""
    inp = keras.Input((3, 4, 2))
    x = layers.BatchNormalization(name="bn_in")(_norm((3, 4, 2))(inp))
    model = keras.Model(inp, layers.Dense(3, name="out")(layers.Flatten(name="flat")(x)))
    bn = model.get_layer("bn_in")
    rng = np.random.default_rng(5)
    bn.set_weights([rng.uniform(0.5, 2, w.shape).astype("float32") for w in bn.get_weights()])  # variances > 0
    graph = to_graph(model)
    assert [layer.type for layer in graph.layers] == ["flatten", "dense"]
    assert set(graph["out"].fused) == {"norm", "bn_in"} and graph["flat"].inputs == (graph.input_name,)
    assert _float_matches_keras(model, graph, 2) < 1e-5

    inp = keras.Input((4, 4, 2))
    pooled = layers.MaxPooling2D(name="pool")(_norm((4, 4, 2))(inp))
    model = keras.Model(inp, layers.Dense(2, name="out")(layers.Flatten(name="flat")(pooled)))
    assert to_graph(model).layers[0].type == "normalization"

    inp = keras.Input((5,))
    x = layers.Dense(4, activation="tanh", name="d1")(_norm((5,))(inp))
    x = layers.BatchNormalization(name="bn")(x)  # inside the network: a stage
    model = keras.Model(inp, layers.Dense(2, name="out")(x))
    assert [layer.type for layer in to_graph(model).layers] == ["dense", "batchnorm", "dense"]

    inp = keras.Input((5,))
    x = _norm((5,))(inp)
    model = keras.Model(inp, layers.Add(name="add")([layers.Dense(5, name="d1")(x), x]))
    model = keras.Model(inp, layers.Dense(2, name="out")(model.output))
    graph = to_graph(model)
    assert graph.layers[0].type == "normalization" and len(graph.consumers("norm")) == 2


# --- the pass on random layers ------------------------------------------------------------


def _affine(rng: np.random.Generator, kind: str, shape: tuple[int, ...]):
    c = shape[-1]
    common = {"name": "affine", "inputs": ("input",), "input_shapes": (shape,), "output_shape": shape}
    scale, offset = rng.uniform(-3, 3, c), rng.uniform(-2, 2, c)
    if kind == "batchnorm":
        return BatchNorm(**common, scale=scale, shift=offset, mean=rng.uniform(-1, 1, c))
    return (Rescaling if kind == "rescaling" else Normalization)(**common, scale=scale, offset=offset)


def _target(rng, kind: str, shape: tuple[int, ...], k: tuple[int, int], stride: int, dilation: int, pad: int):
    """A Dense (through a Flatten for an image), Conv2D or DepthwiseConv2D reading `affine`."""
    if kind == "dense":
        n = int(np.prod(shape))
        flat = [] if len(shape) == 1 else [Flatten("flat", ("affine",), (shape,), (n,))]
        source = flat[0].name if flat else "affine"
        units = int(rng.integers(1, 5))
        dense = Dense(
            "target", (source,), ((n,),), (units,), kernel=rng.normal(size=(n, units)), bias=rng.normal(size=units)
        )
        return [*flat, dense]
    h, w, c = shape
    extent = ((k[0] - 1) * dilation + 1, (k[1] - 1) * dilation + 1)
    out_hw = ((h + 2 * pad - extent[0]) // stride + 1, (w + 2 * pad - extent[1]) // stride + 1)
    window = {"kernel_size": k, "strides": (stride, stride), "pads": (pad,) * 4}
    common = {"name": "target", "inputs": ("affine",), "input_shapes": (shape,)}
    if kind == "depthwise":
        m = int(rng.integers(1, 3))
        return [
            DepthwiseConv2D(
                **common,
                output_shape=(*out_hw, c * m),
                kernel=rng.normal(size=(*k, c * m)),
                bias=rng.normal(size=c * m),
                depth_multiplier=m,
                **window,
            )
        ]
    f = int(rng.integers(1, 4))
    return [
        Conv2D(
            **common,
            output_shape=(*out_hw, f),
            kernel=rng.normal(size=(*k, c, f)),
            bias=rng.normal(size=f),
            dilation=(dilation, dilation),
            **window,
        )
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    affine=st.sampled_from(["rescaling", "normalization", "batchnorm"]),
    target=st.sampled_from(["dense", "conv", "depthwise"]),
    image=st.booleans(),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.integers(1, 2),
    dilation=st.integers(1, 2),
    pad=st.sampled_from([0, 0, 1]),
    seed=st.integers(0, 2**16),
)
def test_fold_keeps_the_float_function(affine, target, image, k, stride, dilation, pad, seed) -> None:
    """On random shapes, kernels, strides, dilations and constants: a Dense or an unpadded
    convolution takes the affine layer in (the graph one record shorter, its float function
    the same to float64 rounding); a padded convolution leaves the graph as it is."""
    rng = np.random.default_rng(seed)
    if target == "dense" and not image:
        shape: tuple[int, ...] = (int(rng.integers(1, 7)),)
    else:
        extent = max(k) * 2 + 1
        shape = (int(rng.integers(extent, extent + 3)), int(rng.integers(extent, extent + 3)), int(rng.integers(1, 4)))
    if target == "depthwise":
        dilation = 1  # not built for depthwise convolutions
    records = [_affine(rng, affine, shape), *_target(rng, target, shape, k, stride, dilation, pad)]
    graph = Graph("g", "input", shape, tuple(records), records[-1].name)
    folded = fold_affine_forward(graph)
    if target != "dense" and pad:
        assert folded == graph
        return
    assert [r.name for r in folded.layers] == [r.name for r in records[1:]]
    assert folded["target"].fused == ("affine",)
    x = rng.uniform(-4, 4, (5, *shape))
    want = float_forward(graph, x)[-1].out
    got = float_forward(folded, x)[-1].out
    assert np.allclose(got, want, rtol=1e-9, atol=1e-9 * max(1.0, float(np.max(np.abs(want)))))


# --- reports name the class -----------------------------------------------------------------


def test_trace_names_the_folded_normalization() -> None:
    """Folded through a Flatten, the Flatten moves unnormalized values Keras never has: the
    trace compares the Dense with Keras' Dense and says the Flatten has no Keras tensor."""
    import keras2clash as k2c

    inp = keras.Input((3, 4, 2))
    model = keras.Model(inp, layers.Dense(2, name="out")(layers.Flatten(name="flat")(_norm((3, 4, 2))(inp))))
    tr = k2c.trace(_randomise(model, 4), _data((3, 4, 2), 9, 8), "1,9,10")
    assert [r.name for r in tr.layers] == ["input", "flat", "out"]
    assert tr["flat"].keras is None and tr["flat"].note == (
        "no Keras tensor: Normalization 'norm' before it is folded into 'out' after it"
    )
    assert tr["out"].note == "Normalization 'norm' folded in" and tr["out"].stats.max_lsb < 4


def test_quantization_aware_model_refuses_a_folded_normalization() -> None:
    hgq_layers = pytest.importorskip("hgq.layers")
    from keras2clash.network import load_network

    inp = keras.Input((5,))
    model = keras.Model(inp, hgq_layers.QDense(2, name="q")(_norm((5,))(inp)))
    with pytest.raises(K2CError, match=r"^Normalization layer 'norm' is not an HGQ2 layer; folded into 'q'"):
        load_network(model, "1,7,8")


# --- the Clash simulation -------------------------------------------------------------------


@needs_toolchain
@pytest.mark.parametrize(
    ("case", "types"),
    [
        ("mlp", ["dense", "dense"]),  # folded into the first Dense
        ("valid", ["conv2d", "flatten", "dense"]),  # folded into the convolution
        ("same", ["normalization", "conv2d", "flatten", "dense"]),  # its own stage
    ],
)
def test_bit_exact_in_clash(tmp_path, case, types) -> None:
    """Folded or not, the Clash simulation equals the golden model, back to back and under
    stalls, with the hardware model's cycles; the unfolded one is K2C.BatchNorm named after
    its class."""
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    model = _mlp(seed=6) if case == "mlp" else _cnn(case, seed=6)
    out = tmp_path / "net"
    api.emit(model, "1,7,8", out, show=False)
    project = load_project(out)
    assert [p.type for p in project.plans] == types
    network = (out / "Network.hs").read_text()
    assert ("BatchNorm.batchNorm W.norm_scale W.norm_offset" in network) == (case == "same")
    if case == "same":
        assert "Normalization per channel" in network
        assert "norm (Normalization): the scale of each of its 3 channel(s)" in (out / "Weights.hs").read_text()
    shape = model.input_shape[1:]
    x_raw = golden.quantize_inputs(project.plans, _data(shape, 7, 6))
    assert_clash_matches_golden(project, x_raw, 5)
