"""HGQ2's quantizing layers beyond the compute layers (frontend.hgq_layers): pooling, global
pooling, merges and QBatchNormalization, each in a small model whose golden model (run with
the model's own formats) equals HGQ2's own forward pass bit for bit on 64 samples, the
refusals naming the layer and the reason, and one Clash build of several of them together."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

hgq = pytest.importorskip("hgq")
keras = pytest.importorskip("keras")

from hgq import layers as Q  # noqa: E402
from test_hgq import datalane, grid_inputs, randomise_weight_bits  # noqa: E402

from helpers import assert_clash_matches_golden, needs_toolchain  # noqa: E402
from keras2clash.errors import K2CError  # noqa: E402
from keras2clash.frontend import hgq as H  # noqa: E402
from keras2clash.frontend.convert import to_graph  # noqa: E402
from keras2clash.quant.formats import FixedFormat  # noqa: E402

SAT = dict(overflow_mode="SAT")


def assert_golden_equals_hgq2(model, x) -> None:
    """The golden model run with the model's own formats equals HGQ2's outputs bit for bit
    (an image output as the golden model's flat beats)."""
    from keras2clash.network import load_network
    from keras2clash.quant import golden

    network = load_network(model, "1,7,8")
    raw = golden.run(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    want = np.asarray(model(x), dtype=np.float64).reshape(len(x), -1)
    np.testing.assert_array_equal(network.plans[-1].out_fmt.to_real(raw).reshape(len(x), -1), want)


def sat(**kw):
    return datalane(**SAT, **kw)


def with_stats(bn, seed: int = 0) -> None:
    """Moving statistics and gamma/beta away from the identity, so the scale and offset matter."""
    rng = np.random.default_rng(seed)
    c = bn.moving_mean.shape[0]
    bn.moving_mean.assign(rng.normal(size=c).astype("float32") / 2)
    bn.moving_variance.assign(rng.uniform(0.3, 3.0, size=c).astype("float32"))
    bn.bn_gamma.assign(rng.uniform(0.5, 2.0, size=c).astype("float32"))
    bn.bn_beta.assign(rng.normal(size=c).astype("float32") / 2)


def conv_stack(inp, *layers):
    x = Q.QConv2D(4, 3, activation="relu", iq_conf=sat(i0=1, f0=4), name="c1")(inp)
    for layer in layers:
        x = layer(x)
    return x


def image_model(*layers, shape=(10, 10, 2), head=True, seed=1):
    """QConv2D -> `layers` -> (Flatten) -> QDense, or `layers` at the output (head=False)."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input(shape)
    x = conv_stack(inp, *layers)
    if head:
        if len(x.shape) > 2:
            x = keras.layers.Flatten(name="flat")(x)
        x = Q.QDense(3, iq_conf=sat(i0=2, f0=3), name="d")(x)
    model = keras.Model(inp, x)
    randomise_weight_bits(model.get_layer("c1"))
    return model


POOLS = {
    "max2d": lambda: Q.QMaxPooling2D(2, iq_conf=sat(k0=0, i0=2, f0=3), name="p"),
    "max2d-wrap-trn": lambda: Q.QMaxPooling2D(
        (3, 2), strides=(2, 1), iq_conf=datalane(k0=0, i0=1, f0=3, overflow_mode="WRAP", round_mode="TRN"), name="p"
    ),
    "avg2d": lambda: Q.QAveragePooling2D(2, iq_conf=sat(k0=0, i0=2, f0=3), name="p"),
    "avg2d-4x2-rnd-conv": lambda: Q.QAveragePooling2D(
        (4, 2), strides=(2, 2), iq_conf=sat(k0=0, i0=2, f0=2, round_mode="RND_CONV"), name="p"
    ),
    "global-max2d": lambda: Q.QGlobalMaxPooling2D(iq_conf=sat(k0=0, i0=2, f0=3), name="p"),
    "global-avg2d": lambda: Q.QGlobalAveragePooling2D(iq_conf=sat(k0=0, i0=2, f0=2), name="p"),
    "global-avg2d-keepdims": lambda: Q.QGlobalAveragePooling2D(keepdims=True, iq_conf=sat(k0=0, i0=2, f0=2), name="p"),
}


@pytest.mark.parametrize("pool", POOLS)
def test_pooling_golden_equals_hgq2(pool):
    """Each pooling between a QConv2D (8x8 output) and a QDense; the next layer's input
    quantizer rounds an average again (a mean of 4, 8 or 64 values: exact as 2^-k times the sum)."""
    model = image_model(POOLS[pool]())
    x = grid_inputs((64, 10, 10, 2), seed=2, scale=2.0)
    assert_golden_equals_hgq2(model, x)


quantizers = st.builds(
    lambda k, i, f, rnd, ovf: datalane(k0=k, i0=i, f0=f, round_mode=rnd, overflow_mode=ovf),
    st.integers(0, 1),
    st.integers(-1, 3),
    st.integers(1, 5),  # i + f >= 0, as HGQ2 requires
    st.sampled_from(["RND", "RND_CONV", "TRN"]),
    st.sampled_from(["SAT", "WRAP"]),
)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    average=st.booleans(),
    pool=st.sampled_from([(1, 2), (2, 1), (2, 2), (2, 4), (4, 2), (3, 3)]),
    stride=st.integers(1, 3),
    pool_q=quantizers,
    next_q=quantizers,
    seed=st.integers(0, 1000),
)
def test_random_poolings_golden_equal_hgq2(average, pool, stride, pool_q, next_q, seed):
    """Random pool shapes, strides and quantizer formats and modes: built exactly as HGQ2
    computes, or refused with one error (a count not a power of two, a wrap after a maximum,
    a next quantizer that would round the maximum again)."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((10, 10, 2))
    cls = Q.QAveragePooling2D if average else Q.QMaxPooling2D
    x = keras.layers.Flatten(name="flat")(conv_stack(inp, cls(pool, strides=stride, iq_conf=pool_q, name="p")))
    model = keras.Model(inp, Q.QDense(3, iq_conf=next_q, name="d")(x))
    randomise_weight_bits(model.get_layer("c1"), seed)
    try:
        H.format_config(model, to_graph(model))
    except K2CError as exc:
        assert len(str(exc).splitlines()) == 1 and ("'p'" in str(exc) or "'d'" in str(exc))
        event("refused")
        return
    event("built")
    assert_golden_equals_hgq2(model, grid_inputs((64, 10, 10, 2), seed=seed, scale=2.0))


@pytest.mark.parametrize("pool", ["max2d", "avg2d", "global-avg2d", "global-max2d"])
def test_pooling_at_the_output_golden_equals_hgq2(pool):
    """The last layer: a maximum keeps its input quantizer's values; a mean is exact."""
    model = image_model(POOLS[pool](), head=False)
    assert_golden_equals_hgq2(model, grid_inputs((64, 10, 10, 2), seed=4, scale=2.0))


def test_one_d_pooling_golden_equals_hgq2():
    """QConv1D -> QMaxPooling1D -> QAveragePooling1D -> QGlobalAveragePooling1D -> QDense,
    and the QGlobalMaxPooling1D twin."""
    keras.utils.set_random_seed(2)
    inp = keras.Input((18, 2))
    x = Q.QConv1D(4, 3, activation="relu", iq_conf=sat(i0=1, f0=4), name="c")(inp)
    x = Q.QMaxPooling1D(2, iq_conf=sat(k0=0, i0=2, f0=4), name="mp")(x)
    x = Q.QAveragePooling1D(2, iq_conf=sat(k0=0, i0=2, f0=4), name="ap")(x)
    branch = x
    x = Q.QGlobalAveragePooling1D(iq_conf=sat(k0=0, i0=2, f0=3), name="gap")(x)
    out = Q.QDense(2, iq_conf=sat(i0=2, f0=2), name="d")(x)
    model = keras.Model(inp, out)
    graph = to_graph(model)
    assert [r.type for r in graph.layers] == ["conv2d", "maxpool2d", "depthwise2d", "depthwise2d", "flatten", "dense"]
    assert_golden_equals_hgq2(model, grid_inputs((64, 18, 2), seed=3, scale=2.0))
    model = keras.Model(inp, Q.QGlobalMaxPooling1D(iq_conf=sat(k0=0, i0=2, f0=3), name="gmp")(branch))
    assert_golden_equals_hgq2(model, grid_inputs((64, 18, 2), seed=3, scale=2.0))


MERGES = {
    "add": Q.QAdd,
    "subtract": Q.QSubtract,
    "multiply": Q.QMultiply,
    "maximum": Q.QMaximum,
    "minimum": Q.QMinimum,
}


def merge_model(op, head=True, out_conf=None, seed=3):
    """Two QDense branches of one input merged (each input with its own quantizer), then a QDense."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((8,))
    a = Q.QDense(6, activation="relu", iq_conf=sat(i0=1, f0=4), name="a")(inp)
    b = Q.QDense(6, iq_conf=sat(i0=1, f0=4), name="b")(inp)
    kw = {} if out_conf is None else {"enable_oq": True, "oq_conf": out_conf}
    x = MERGES[op](iq_confs=[sat(k0=0, i0=2, f0=3), sat(i0=1, f0=4, round_mode="TRN")], name="m", **kw)([a, b])
    if head:
        x = Q.QDense(3, iq_conf=datalane(i0=2, f0=3, overflow_mode="WRAP"), name="d")(x)
    model = keras.Model(inp, x)
    for name in ("a", "b"):
        randomise_weight_bits(model.get_layer(name), seed)
    return model


@pytest.mark.parametrize("op", MERGES)
def test_merges_golden_equal_hgq2(op):
    """Inside the network (the next quantizer wraps) and as the output (the exact result)."""
    x = grid_inputs((64, 8), seed=5, scale=2.0)
    for head in (True, False):
        model = merge_model(op, head)
        assert [r.type for r in to_graph(model).layers if r.name == "m"] == [op]
        assert_golden_equals_hgq2(model, x)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    op=st.sampled_from(list(MERGES)),
    first=quantizers,
    second=quantizers,
    after=st.one_of(st.none(), quantizers),
    seed=st.integers(0, 1000),
)
def test_random_merges_golden_equal_hgq2(op, first, second, after, seed):
    """Random input quantizers of a merge, and a next quantizer or none (the exact result):
    exact as HGQ2 computes, or refused in one line naming a layer."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((8,))
    a = Q.QDense(6, activation="relu", iq_conf=sat(i0=1, f0=4), name="a")(inp)
    b = Q.QDense(6, iq_conf=sat(i0=1, f0=4), name="b")(inp)
    x = MERGES[op](iq_confs=[first, second], name="m")([a, b])
    model = keras.Model(inp, x if after is None else Q.QDense(3, iq_conf=after, name="d")(x))
    try:
        H.format_config(model, to_graph(model))
    except K2CError as exc:
        assert len(str(exc).splitlines()) == 1 and ("'m'" in str(exc) or "'d'" in str(exc))
        event("refused")
        return
    event("built")
    assert_golden_equals_hgq2(model, grid_inputs((64, 8), seed=seed, scale=2.0))


def test_merge_output_quantizer_is_its_format():
    model = merge_model("add", head=False, out_conf=sat(i0=2, f0=2))
    config = H.format_config(model, to_graph(model))
    assert config.layers["m"].output == FixedFormat(1, 2, 2)
    assert_golden_equals_hgq2(model, grid_inputs((64, 8), seed=6, scale=2.0))


def test_batch_normalization_golden_equals_hgq2():
    """A QBatchNormalization after a QConv2D stays a stage (its input quantizer acts between
    them), with HGQ2's quantized scale and offset; inside the network and at the output."""
    for head in (True, False):
        model = image_model(Q.QBatchNormalization(iq_conf=sat(i0=2, f0=4), name="bn"), head=head)
        with_stats(model.get_layer("bn"))
        graph = to_graph(model)
        assert [r.type for r in graph.layers][:2] == ["conv2d", "batchnorm"]
        scale, offset = (keras.ops.convert_to_numpy(v) for v in model.get_layer("bn").qscaler_and_qoffset)
        np.testing.assert_array_equal(graph["bn"].scale, scale.reshape(-1))
        np.testing.assert_array_equal(graph["bn"].offset, offset.reshape(-1))
        assert_golden_equals_hgq2(model, grid_inputs((64, 10, 10, 2), seed=7, scale=2.0))


def test_a_quantizer_after_a_maximum_must_keep_its_values():
    """A max pooling passes its input quantizer's values on: the next input quantizer is built
    when it keeps them (here wider), and refused, naming both, when it would round them again."""
    wide = image_model(Q.QMaxPooling2D(2, iq_conf=sat(k0=0, i0=1, f0=2), name="p"))
    assert_golden_equals_hgq2(wide, grid_inputs((64, 10, 10, 2), seed=8, scale=2.0))
    narrow = image_model(Q.QMaxPooling2D(2, iq_conf=sat(k0=0, i0=2, f0=5), name="p"))
    with pytest.raises(
        K2CError, match=r"HGQ2 layer 'd''s input quantizer \(.*\) quantizes values 'p''s input quantizer has quantized"
    ):
        H.format_config(narrow, to_graph(narrow))


@pytest.mark.parametrize(
    "layer,match",
    [
        (
            lambda: Q.QAveragePooling2D(3, iq_conf=sat(), name="p"),
            r"HGQ2 layer 'p' \(QAveragePooling2D\) averages windows of 9 values: HGQ2 divides their sum by 9",
        ),
        (
            lambda: Q.QAveragePooling2D(2, strides=1, padding="same", iq_conf=sat(), name="p"),
            r"HGQ2 layer 'p' \(QAveragePooling2D\) pads its input \('same'\)",
        ),
        (
            lambda: Q.QGlobalAveragePooling2D(iq_conf=sat(), name="p"),
            r"'p' \(QGlobalAveragePooling2D\) averages its whole input of 36 values",
        ),
        (lambda: Q.QMaxPooling2D(2, enable_iq=False, name="p"), r"'p' \(QMaxPooling2D\) has enable_iq=False"),
    ],
    ids=["avg-of-9", "avg-same-pads", "global-avg-of-36", "no-iq"],
)
def test_refusals_name_the_layer_and_the_reason(layer, match):
    model = image_model(layer(), shape=(8, 8, 2))
    with pytest.raises(K2CError, match=match):
        to_graph(model)


def quantizer_model(middle=None):
    """Quantizer at the input -> QDense -> Quantizer -> QDense -> Quantizer (the output's format)."""
    from hgq.quantizer import Quantizer

    keras.utils.set_random_seed(4)
    inp = keras.Input((8,))
    x = Quantizer(sat(i0=1, f0=3), name="qin")(inp)
    x = Q.QDense(6, activation="relu", iq_conf=sat(i0=2, f0=4), name="a")(x)
    x = Quantizer(middle or datalane(k0=0, i0=1, f0=2, overflow_mode="WRAP", round_mode="TRN"), name="qa")(x)
    x = Q.QDense(3, iq_conf=sat(i0=2, f0=3), name="b")(x)
    model = keras.Model(inp, Quantizer(sat(i0=1, f0=2), name="qout")(x))
    for name in ("a", "b"):
        randomise_weight_bits(model.get_layer(name))
    return model


def test_standalone_quantizer_sets_the_format_of_its_tensor():
    """HGQ2's Quantizer layer: the network input's format, a layer's output format (wrapping
    after a fused ReLU), the network output's format; the input quantizers after it keep its values."""
    from keras2clash.network import load_network

    model = quantizer_model()
    network = load_network(model, "1,7,8")
    assert [(p.name, str(p.in_fmt), str(p.out_fmt)) for p in network.plans] == [
        ("a", "1,1,3", "0,1,2,trn,wrap"),
        ("b", "0,1,2,trn,wrap", "1,1,2"),
    ]
    assert_golden_equals_hgq2(model, grid_inputs((64, 8), seed=12, scale=3.0))
    narrow = quantizer_model(sat(i0=1, f0=6))  # b's input quantizer would round its values again
    with pytest.raises(K2CError, match=r"HGQ2 layer 'b''s input quantizer .* quantizes values 'qa''s quantizer"):
        H.format_config(narrow, to_graph(narrow))


def several_layers_model():
    """QConv2D -> QAveragePooling2D -> QBatchNormalization -> (QMaxPooling2D 1x1 | itself) -> QAdd
    -> QGlobalAveragePooling2D -> QDense."""
    keras.utils.set_random_seed(1)
    inp = keras.Input((10, 10, 2))
    x = conv_stack(
        inp,
        Q.QAveragePooling2D(2, iq_conf=sat(k0=0, i0=2, f0=3), name="ap"),
        Q.QBatchNormalization(iq_conf=sat(i0=2, f0=4), name="bn"),
    )
    y = Q.QMaxPooling2D(1, iq_conf=sat(i0=2, f0=4), name="mp")(x)
    x = Q.QAdd(iq_confs=[sat(i0=2, f0=4), sat(i0=2, f0=4)], name="add")([x, y])
    x = Q.QGlobalAveragePooling2D(iq_conf=sat(i0=3, f0=3), name="gap")(x)
    model = keras.Model(inp, Q.QDense(3, iq_conf=sat(i0=2, f0=3), name="d")(x))
    randomise_weight_bits(model.get_layer("c1"))
    with_stats(model.get_layer("bn"))
    return model


def test_several_layers_golden_equals_hgq2():
    model = several_layers_model()
    types = [r.type for r in to_graph(model).layers]
    assert types == ["conv2d", "depthwise2d", "batchnorm", "maxpool2d", "add", "depthwise2d", "flatten", "dense"]
    assert_golden_equals_hgq2(model, grid_inputs((64, 10, 10, 2), seed=9, scale=2.0))


@needs_toolchain
def test_clash_simulation_of_hgq2_pooling_merge_and_batchnorm(tmp_path):
    """Average and max pooling, QBatchNormalization, QAdd and global average pooling together:
    the Clash simulation equals the golden model (= HGQ2) with the hardware model's cycles."""
    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    model = several_layers_model()
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    x = grid_inputs((4, 10, 10, 2), seed=10, scale=2.0)
    want, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=11)
    np.testing.assert_array_equal(project.plans[-1].out_fmt.to_real(want), np.asarray(model(x), dtype=np.float64))


def test_layers_without_a_converter_say_why():
    inp = keras.Input((4,))
    x = Q.QDense(3, iq_conf=sat(), name="d")(inp)
    model = keras.Model(inp, Q.QSoftmax(name="sm")(x))
    with pytest.raises(K2CError, match=r"unsupported layer QSoftmax 'sm' \(HGQ2 computes it through a table"):
        to_graph(model)


def test_saved_model_with_these_layers_predicts_as_hgq2(tmp_path):
    """A .keras file of the model loads (HGQ2's classes registered on load) and `predict` equals HGQ2."""
    import keras2clash as k2c

    model = several_layers_model()
    model.save(tmp_path / "m.keras")
    x = grid_inputs((16, 10, 10, 2), seed=13, scale=2.0)
    np.testing.assert_array_equal(k2c.predict(str(tmp_path / "m.keras"), x).values, np.asarray(model(x)))


@pytest.mark.slow
@needs_toolchain
def test_clash_simulation_of_hgq2_merges_one_d_pooling_and_quantizers(tmp_path):
    """QSubtract, QMultiply, QMaximum and QMinimum; QConv1D with QMaxPooling1D, QAveragePooling1D
    and QGlobalAveragePooling1D; standalone Quantizers at the input and output: Clash == golden
    (== HGQ2) with the hardware model's cycles."""
    from hgq.quantizer import Quantizer

    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    keras.utils.set_random_seed(5)
    inp = keras.Input((18, 2))
    x = Quantizer(sat(i0=1, f0=3), name="qin")(inp)
    x = Q.QConv1D(4, 3, activation="relu", iq_conf=sat(i0=1, f0=4), name="c")(x)
    x = Q.QMaxPooling1D(2, iq_conf=sat(k0=0, i0=2, f0=3), name="mp")(x)
    a = Q.QConv1D(4, 1, iq_conf=sat(k0=0, i0=2, f0=3), name="a")(x)
    b = Q.QAveragePooling1D(1, iq_conf=sat(k0=0, i0=2, f0=3), name="b")(x)
    d = Q.QSubtract(iq_confs=[sat(i0=2, f0=3), sat(k0=0, i0=2, f0=3)], name="sub")([a, b])
    m = Q.QMultiply(iq_confs=[sat(i0=2, f0=3), sat(k0=0, i0=2, f0=3)], name="mul")([d, b])
    hi = Q.QMaximum(iq_confs=[sat(i0=3, f0=2), sat(i0=2, f0=3)], name="max")([m, d])
    lo = Q.QMinimum(iq_confs=[sat(i0=3, f0=2), sat(i0=2, f0=3)], name="min")([m, d])
    x = Q.QAdd(iq_confs=[sat(i0=3, f0=2), sat(i0=3, f0=2)], name="add")([hi, lo])
    x = Q.QAveragePooling1D(2, iq_conf=sat(i0=3, f0=2), name="ap")(x)
    x = Q.QGlobalAveragePooling1D(iq_conf=sat(i0=3, f0=2), name="gap")(x)
    x = Q.QDense(3, iq_conf=sat(i0=3, f0=2), name="d")(x)
    model = keras.Model(inp, Quantizer(sat(i0=3, f0=2), name="qout")(x))
    x = grid_inputs((64, 18, 2), seed=14, scale=2.0)
    assert_golden_equals_hgq2(model, x)
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    want, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x[:4]), seed=15)
    np.testing.assert_array_equal(project.plans[-1].out_fmt.to_real(want), np.asarray(model(x[:4]), dtype=np.float64))
