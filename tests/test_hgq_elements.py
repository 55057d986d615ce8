"""HGQ2 models built with HGQ2's defaults: heterogeneous (per-element and per-channel) input
quantizers, each element rounded once from the exact value at its own position and saturated
or wrapped to its own range (`kinds.quantize`, K2C.Requant). The golden model equals HGQ2's own
forward pass bit for bit; the Clash simulation equals the golden model, with the hardware
model's cycles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

hgq = pytest.importorskip("hgq")
keras = pytest.importorskip("keras")

from hgq.config import QuantizerConfig  # noqa: E402
from hgq.layers import QConv2D, QDense  # noqa: E402
from test_hgq import assert_golden_equals_hgq2, grid_inputs, randomise_weight_bits  # noqa: E402

from helpers import assert_clash_matches_golden, needs_toolchain  # noqa: E402
from keras2clash.errors import K2CError  # noqa: E402
from keras2clash.frontend import hgq as H  # noqa: E402
from keras2clash.frontend.convert import to_graph  # noqa: E402
from keras2clash.hw.plan import Common  # noqa: E402
from keras2clash.kinds import kind_of  # noqa: E402
from keras2clash.kinds.quantize import Quantize, apply, constants, container, format_text, input_format  # noqa: E402
from keras2clash.network import load_network  # noqa: E402
from keras2clash.quant.formats import make_format, quantize, requantize  # noqa: E402


def randomise_data_bits(layer, seed: int, dead: int = 1) -> None:
    """Per-element input bit-widths that differ (as training leaves them): k in {0, 1}, i in
    -1..3, f in 0..5, and the first `dead` elements of no bits (HGQ2 outputs 0 there)."""
    rng = np.random.default_rng(seed)
    q = layer.iq.quantizer
    shape = tuple(q._f.shape)
    k = rng.integers(0, 2, size=shape)
    i = rng.integers(-1, 4, size=shape)
    f = rng.integers(0, 6, size=shape)
    for a in (k, i, f):
        a.reshape(-1)[:dead] = 0
    for var, a in ((q._k, k), (q._i, i), (q._f, f)):
        var.assign(a.astype("float32"))


def default_cnn(seed: int = 3, conf: QuantizerConfig | None = None):
    """QConv2D -> ReLU -> MaxPooling2D -> QConv2D -> Flatten -> QDense with HGQ2's default
    (per-element, RND, WRAP) input quantizers, or `conf` (heterogeneous too), randomised bits."""
    keras.utils.set_random_seed(seed)
    layers = keras.layers
    kw = {} if conf is None else {"iq_conf": conf}
    inp = keras.Input((8, 8, 2))
    x = QConv2D(4, 3, name="c1", **kw)(inp)
    x = layers.ReLU(name="r1")(x)
    x = layers.MaxPooling2D(2, name="pool")(x)
    x = QConv2D(3, 2, name="c2", **kw)(x)
    x = layers.Flatten(name="flat")(x)
    model = keras.Model(inp, QDense(5, name="d", **kw)(x))
    for n, name in enumerate(("c1", "c2", "d")):
        randomise_data_bits(model.get_layer(name), seed + n)
        randomise_weight_bits(model.get_layer(name), seed + 10 + n)
    return model


def test_default_cnn_has_a_quantize_stage_before_each_layer():
    model = default_cnn()
    graph = to_graph(model)
    assert [(r.name, r.type) for r in graph.layers] == [
        ("c1_iq", "quantize"),
        ("c1", "conv2d"),
        ("pool", "maxpool2d"),
        ("c2_iq", "quantize"),
        ("c2", "conv2d"),
        ("flat", "flatten"),
        ("d_iq", "quantize"),
        ("d", "dense"),
    ]
    config = H.format_config(model, graph)
    c1 = graph["c1_iq"]
    assert isinstance(c1, Quantize) and len(c1.formats) > 10 and (np.asarray(c1.index) == -1).sum() >= 1
    assert config.input == make_format(1, 3, 6, "truncate", "wrap")  # one bit below the finest element, floored
    assert "c1_iq" not in config.layers  # the kind plans its container
    assert config.layers["c1"].output == make_format(1, 10, 14)  # the exact accumulator, for c2_iq to round


@pytest.mark.parametrize(
    "conf",
    [
        None,  # HGQ2's defaults: RND, WRAP, per element
        QuantizerConfig("kif", "datalane", overflow_mode="SAT"),
        QuantizerConfig("kif", "datalane", round_mode="TRN", overflow_mode="SAT"),
        QuantizerConfig("kif", "datalane", heterogeneous_axis=(-1,), overflow_mode="SAT"),  # per channel
    ],
    ids=["default-rnd-wrap", "rnd-sat", "trn-sat", "per-channel"],
)
def test_default_cnn_golden_equals_hgq2(conf):
    """Every element rounded and fitted at its own format, zero-bit elements 0: the golden
    model equals HGQ2 on every output of 128 samples (wide enough inputs that values wrap or
    saturate)."""
    model = default_cnn(conf=conf)
    assert_golden_equals_hgq2(model, grid_inputs((128, 8, 8, 2), seed=3, scale=3.0))
    if conf is not None and conf.config["heterogeneous_axis"] == (-1,):  # constants per channel only
        network = load_network(model, "1,7,8")
        assert [constants(p)[0].shape[:2] for p in network.plans if p.type == "quantize"] == [(1, 2), (1, 4), (1, 12)]


def ties_to_even_mlp():
    """A TRN per-element input quantizer, then an RND_CONV one inside the network."""
    keras.utils.set_random_seed(4)
    inp = keras.Input((12,))
    x = QDense(8, activation="relu", iq_conf=QuantizerConfig("kif", "datalane", round_mode="TRN"), name="a")(inp)
    model = keras.Model(inp, QDense(3, iq_conf=QuantizerConfig("kif", "datalane", round_mode="RND_CONV"), name="b")(x))
    for n, name in enumerate("ab"):
        randomise_data_bits(model.get_layer(name), 20 + n)
        randomise_weight_bits(model.get_layer(name), 30 + n)
    return model


def test_ties_to_even_between_layers_equal_hgq2():
    """RND_CONV per element inside the network (the first layer's quantizer truncates)."""
    assert_golden_equals_hgq2(ties_to_even_mlp(), grid_inputs((256, 12), seed=4, scale=3.0))


def test_default_mlp_golden_equals_hgq2():
    """An MLP with HGQ2's default quantizers (per element, RND, WRAP), trained bit-widths
    stood in for by random ones."""
    keras.utils.set_random_seed(5)
    inp = keras.Input((16,))
    x = QDense(12, activation="relu", name="m1")(inp)
    x = QDense(8, activation="relu", name="m2")(x)
    model = keras.Model(inp, QDense(4, name="m3")(x))
    for n, name in enumerate(("m1", "m2", "m3")):
        randomise_data_bits(model.get_layer(name), 40 + n, dead=2)
        randomise_weight_bits(model.get_layer(name), 50 + n)
    assert_golden_equals_hgq2(model, grid_inputs((256, 16), seed=5, scale=3.0))


def test_default_conv1d_and_einsum_dense_golden_equal_hgq2():
    """QConv1D (a sequence one row high in the IR) and QEinsumDense with default quantizers."""
    from hgq.layers import QConv1D, QEinsumDense

    keras.utils.set_random_seed(8)
    inp = keras.Input((10, 3))
    x = QConv1D(4, 3, activation="relu", name="c")(inp)
    x = keras.layers.Flatten(name="flat")(x)
    model = keras.Model(inp, QEinsumDense("...a,ab->...b", 3, bias_axes="b", name="e")(x))
    for n, name in enumerate("ce"):
        randomise_data_bits(model.get_layer(name), 60 + n)
    randomise_weight_bits(model.get_layer("c"), 70)
    assert [r.type for r in to_graph(model).layers][:2] == ["quantize", "conv2d"]
    assert_golden_equals_hgq2(model, grid_inputs((256, 10, 3), seed=8, scale=3.0))


# --- the arithmetic, against the per-element requantization -------------------------------


element = st.tuples(st.integers(0, 1), st.integers(-2, 4), st.integers(-2, 6)).filter(lambda t: sum(t) >= 1)


@settings(max_examples=60, deadline=None)
@given(
    triples=st.lists(element, min_size=1, max_size=4),
    rounding=st.sampled_from(["nearest", "nearest_even", "truncate"]),
    overflow=st.sampled_from(["saturate", "wrap"]),
    in_frac=st.integers(0, 8),
    seed=st.integers(0, 2**16),
)
def test_stage_equals_each_elements_own_requantization(triples, rounding, overflow, in_frac, seed):
    """K2C.Requant's constants (bias, lsb, keep, lo, hi or span) compute, on raw integers,
    exactly `quant.formats.requantize` of each element at its own format, in the container."""
    formats = tuple(make_format(k, i, f, rounding, overflow) for k, i, f in triples)
    rng = np.random.default_rng(seed)
    index = rng.integers(-1, len(formats), size=12)
    record = Quantize(
        name="q",
        inputs=("input",),
        input_shapes=((3, 4),),
        output_shape=(3, 4),
        formats=tuple(format_text(f) for f in formats),
        index=index.reshape(3, 4).astype(np.float64),
    )
    in_fmt = make_format(1, 8, in_frac)
    plan = kind_of("quantize").plan(Common(record, (in_fmt,)), None, in_fmt)
    raw = rng.integers(-(2**16), 2**16, size=(5, 12))
    got = apply(raw.reshape(5, 3, 4), plan).reshape(5, 12)
    out = container(formats)
    for e, n in enumerate(index):
        want = 0 if n < 0 else requantize(raw[:, e], in_frac, formats[n]) << (out.raw_frac - formats[n].raw_frac)
        np.testing.assert_array_equal(got[:, e], want)


@settings(max_examples=40, deadline=None)
@given(
    triples=st.lists(element, min_size=1, max_size=4),
    rounding=st.sampled_from(["nearest", "truncate"]),
    overflow=st.sampled_from(["saturate", "wrap"]),
    seed=st.integers(0, 2**16),
)
def test_input_truncated_finer_then_rounded_is_rounded_once(triples, rounding, overflow, seed):
    """The network input: floored one bit below the finest element, then each element's own
    rounding and overflow, equals quantizing the float once at the element's format."""
    formats = tuple(make_format(k, i, f, rounding, overflow) for k, i, f in triples)
    host = input_format(formats)
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=400) * 2.0 ** rng.integers(-3, 6, size=400) * 2**12) / 2**12
    raw = quantize(x, host)
    out = container(formats)
    for fmt in formats:
        once = quantize(x, fmt) << (out.raw_frac - fmt.raw_frac)
        twice = requantize(raw, host.raw_frac, fmt) << (out.raw_frac - fmt.raw_frac)
        np.testing.assert_array_equal(twice, once)


# --- refusals ------------------------------------------------------------------------------


def test_heterogeneous_output_quantizer_is_refused():
    inp = keras.Input((4,))
    model = keras.Model(inp, QDense(2, enable_oq=True, name="hq")(inp))
    model.get_layer("hq").oq.quantizer._f.assign(np.array([[3, 4]], dtype="float32"))
    with pytest.raises(K2CError, match=r"'hq' \(QDense\), output quantizer is heterogeneous.*enable_oq=False"):
        to_graph(model)


def test_ties_to_even_per_element_at_the_network_input_is_refused():
    inp = keras.Input((4,))
    model = keras.Model(
        inp, QDense(2, iq_conf=QuantizerConfig("kif", "datalane", round_mode="RND_CONV"), name="e")(inp)
    )
    model.get_layer("e").iq.quantizer._f.assign(np.array([[3, 4, 2, 2]], dtype="float32"))
    with pytest.raises(
        K2CError, match=r"'e', input quantizer, quantizes the network input per element with ties to even"
    ):
        H.format_config(model, to_graph(model))


def test_wrapping_per_element_input_quantizer_after_a_maximum_on_the_input_is_refused():
    inp = keras.Input((4, 4, 2))
    x = keras.layers.MaxPooling2D(2, name="mp")(inp)
    model = keras.Model(inp, QConv2D(2, 2, name="w")(x))
    randomise_data_bits(model.get_layer("w"), 0)
    with pytest.raises(K2CError, match=r"passes layer 'mp' \(MaxPooling2D\) before HGQ2 layer 'w''s per-element WRAP"):
        H.format_config(model, to_graph(model))


# --- the hardware -----------------------------------------------------------------------------


@needs_toolchain
def test_default_cnn_clash_simulation_equals_golden(tmp_path):
    """The emitted network (three K2C.Requant stages) equals the golden model, which equals
    HGQ2, bit for bit, with the hardware model's cycles, under input gaps and output stalls."""
    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    model = default_cnn()
    x = grid_inputs((6, 8, 8, 2), seed=3, scale=3.0)
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    want, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=5)
    np.testing.assert_array_equal(project.plans[-1].out_fmt.to_real(want), np.asarray(model(x), dtype=np.float64))


@needs_toolchain
@pytest.mark.slow
@pytest.mark.parametrize(
    "conf",
    [
        QuantizerConfig("kif", "datalane", overflow_mode="SAT"),
        QuantizerConfig("kif", "datalane", round_mode="TRN", overflow_mode="SAT"),
        QuantizerConfig("kif", "datalane", heterogeneous_axis=(-1,), overflow_mode="SAT"),
    ],
    ids=["rnd-sat", "trn-sat", "per-channel"],
)
def test_cnn_variants_clash_simulation_equals_golden(tmp_path, conf):
    """Saturating, truncating and per-channel (one position of constants) quantizers in Clash."""
    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    model = default_cnn(conf=conf)
    x = grid_inputs((8, 8, 8, 2), seed=6, scale=3.0)
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    want, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=6)
    np.testing.assert_array_equal(project.plans[-1].out_fmt.to_real(want), np.asarray(model(x), dtype=np.float64))


@needs_toolchain
@pytest.mark.slow
def test_ties_to_even_mlp_clash_simulation_equals_golden(tmp_path):
    """K2C.Requant's tie-to-even bit (lsb) in Clash."""
    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    model = ties_to_even_mlp()
    x = grid_inputs((64, 12), seed=4, scale=3.0)
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    want, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=2)
    np.testing.assert_array_equal(project.plans[-1].out_fmt.to_real(want), np.asarray(model(x), dtype=np.float64))


# --- the example ---------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "digits_hgq2"


def test_digits_hgq2_example_equals_hgq2_on_its_whole_test_set():
    """examples/digits_hgq2, trained with HGQ2's default quantizers: three per-element
    quantizers of several formats each, zero-bit elements among them; the golden model
    equals HGQ2 on every output of its 360 test images (its Clash simulation and Verilator
    on the whole set: tests/test_examples.py, slow)."""
    model = keras.models.load_model(EXAMPLE / "digits_hgq2.keras")
    x = np.load(EXAMPLE / "test.npz")["x"]
    assert len(x) == 360
    quantizers = [r for r in to_graph(model).layers if isinstance(r, Quantize)]
    assert [r.name for r in quantizers] == ["conv1_iq", "conv2_iq", "dense_iq"]
    assert all(len(r.formats) > 1 for r in quantizers)
    assert any((np.asarray(r.index) == -1).any() for r in quantizers)
    assert_golden_equals_hgq2(model, x)
