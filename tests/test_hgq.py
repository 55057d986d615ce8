"""HGQ2 (quantization-aware Keras 3 models, `hgq` package) in the frontend: the formats read
from the quantizers, the refusals, and the exactness proof of our reading of HGQ2's
semantics (docs/guide/quantization-aware.md): an independent integer re-computation from those formats alone
equals the HGQ2 model's own forward pass on every output, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

hgq = pytest.importorskip("hgq")
keras = pytest.importorskip("keras")

from hgq.config import QuantizerConfig, QuantizerConfigScope  # noqa: E402
from hgq.layers import QConv2D, QDense, QEinsumDense  # noqa: E402
from hgq.utils import trace_minmax  # noqa: E402

from helpers import assert_clash_matches_golden, needs_toolchain  # noqa: E402
from keras2clash.errors import K2CError  # noqa: E402
from keras2clash.frontend import hgq as H  # noqa: E402
from keras2clash.frontend.convert import to_graph  # noqa: E402
from keras2clash.quant.formats import FixedFormat  # noqa: E402

IN_FRAC = 10  # test inputs are multiples of 2^-10: HGQ2's float32 x*2^f + 1/2 is then exact


def datalane(**kw) -> QuantizerConfig:
    """A per-tensor activation quantizer (HGQ2's default is per element)."""
    return QuantizerConfig("kif", "datalane", heterogeneous_axis=(), **kw)


def grid_inputs(shape, seed=0, scale=1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (np.round(rng.normal(size=shape) * scale * 2**IN_FRAC) / 2**IN_FRAC).astype(np.float32)


def randomise_weight_bits(layer, seed=0) -> None:
    """Per-weight bit-widths that differ (as training leaves them): b in 2..8, i in -1..2."""
    rng = np.random.default_rng(seed)
    q = layer.kq.quantizer
    q._b.assign(rng.integers(2, 9, size=q._b.shape).astype("float32"))
    q._i.assign(rng.integers(-1, 3, size=q._i.shape).astype("float32"))


# --- an independent integer model of HGQ2's quantizer and layers -------------------------


def requantize(raw: np.ndarray, frac: int, t: H.TensorFormat) -> np.ndarray:
    """Exact value raw * 2^-frac quantized to `t`: raw integers with t.frac_bits fraction bits."""
    raw = raw.astype(object)
    s = frac - t.frac_bits
    if s <= 0:
        r = raw * (1 << -s)
    elif t.round_mode == "RND":
        r = (raw + (1 << (s - 1))) >> s
    elif t.round_mode == "TRN":
        r = raw >> s
    elif t.round_mode == "RND_CONV":
        q, rem = raw >> s, raw - ((raw >> s) << s)
        half = 1 << (s - 1)
        r = q + ((rem > half) | ((rem == half) & (q % 2 == 1)))
    else:  # pragma: no cover
        raise AssertionError(t.round_mode)
    k, n = int(t.keep_negative), t.int_bits + t.frac_bits  # raw magnitude bits
    if t.overflow_mode == "WRAP":
        width, bias = k + n, k * (1 << (k + n - 1)) if k + n > 0 else 0
        return (r + bias) % (1 << width) - bias
    high = (1 << n) - 1
    low = -k * (high if t.overflow_mode == "SAT_SYM" else (1 << n))
    return np.clip(r, low, high)


def constant_raw(values: np.ndarray, t: H.TensorFormat) -> np.ndarray:
    """HGQ2's quantized constants as raw integers of their format (checks they fit it)."""
    scaled = np.ldexp(np.asarray(values, dtype=np.float64), t.frac_bits)
    assert np.all(scaled == np.round(scaled)), "a value is not on the format's grid"
    raw = scaled.astype(np.int64)
    n = t.int_bits + t.frac_bits
    assert raw.max(initial=0) <= (1 << n) - 1 and raw.min(initial=0) >= -int(t.keep_negative) * (1 << n)
    return raw


def dense_acc(x_raw, fx, layer, q: H.LayerQuant):
    """The exact accumulator of an HGQ2 dense layer from the raw input (frac fx)."""
    xq = requantize(x_raw, fx, q.input)
    kernel, bias = H.quantized_weights(layer)
    w = constant_raw(kernel, q.kernel).astype(object)
    acc = xq.astype(object) @ w
    frac = q.input.frac_bits + q.kernel.frac_bits
    if bias is not None:
        b = constant_raw(bias, q.bias).astype(object)
        top = max(frac, q.bias.frac_bits)
        acc = acc * (1 << (top - frac)) + b * (1 << (top - q.bias.frac_bits))
        frac = top
    return acc, frac


def conv_acc(x_raw, fx, layer, q: H.LayerQuant):
    """The exact accumulator of a valid, stride-1 HGQ2 Conv2D."""
    xq = requantize(x_raw, fx, q.input)
    kernel, bias = H.quantized_weights(layer)
    w = constant_raw(kernel, q.kernel).astype(object)
    kh, kw, c, f = w.shape
    windows = np.lib.stride_tricks.sliding_window_view(xq, (kh, kw), axis=(1, 2))  # N,H',W',C,kh,kw
    acc = np.einsum("nhwcij,ijcf->nhwf", windows, w)
    frac = q.input.frac_bits + q.kernel.frac_bits
    b = constant_raw(bias, q.bias).astype(object)
    top = max(frac, q.bias.frac_bits)
    return acc * (1 << (top - frac)) + b * (1 << (top - q.bias.frac_bits)), top


def relu(acc):
    return np.where(acc > 0, acc, 0)


def assert_exact(keras_out: np.ndarray, acc: np.ndarray, frac: int) -> None:
    """HGQ2's float32 outputs are exactly the integer model's values."""
    got = np.ldexp(keras_out.astype(np.float64), frac)
    assert np.all(got == np.round(got)), "HGQ2 output is off the accumulator grid"
    np.testing.assert_array_equal(got.astype(np.int64), acc.astype(np.int64))


# --- models ------------------------------------------------------------------------------


def mlp(iq1, iq2, act="relu", seed=1):
    keras.utils.set_random_seed(seed)
    inp = keras.Input((16,))
    x = QDense(8, activation=act, iq_conf=iq1, name="d1")(inp)
    x = QDense(4, iq_conf=iq2, name="d2")(x)
    model = keras.Model(inp, x)
    for layer in model.layers[1:]:
        randomise_weight_bits(layer, seed)
        layer.bias.assign(np.random.default_rng(seed).normal(size=layer.bias.shape).astype("float32") / 4)
    return model


def mlp_reference(model, x):
    quant = H.model_quant(model)
    d1, d2 = model.get_layer("d1"), model.get_layer("d2")
    x_raw = np.ldexp(x.astype(np.float64), IN_FRAC).astype(np.int64)
    acc, frac = dense_acc(x_raw, IN_FRAC, d1, quant["d1"])
    return dense_acc(relu(acc), frac, d2, quant["d2"])


SAT_MLP = dict(iq1=datalane(i0=2, f0=5, overflow_mode="SAT"), iq2=datalane(i0=2, f0=4, overflow_mode="SAT"))


def test_formats_read_from_the_quantizers():
    model = mlp(**SAT_MLP)
    quant = H.model_quant(model)
    assert list(quant) == ["d1", "d2"]
    d1 = quant["d1"]
    assert d1.input == H.TensorFormat("d1", "input", True, 2, 5, "RND", "SAT", "tensor")
    assert quant["d2"].input.frac_bits == 4 and d1.output is None and d1.activation == "relu"
    # per-weight bit-widths (b, i) -> f = b - i; the constant's format holds every value and
    # is never wider than the widest element
    kq = model.get_layer("d1").kq.quantizer
    k, i, f = (np.asarray(keras.ops.convert_to_numpy(v)) for v in kq.kif)
    assert d1.kernel.granularity == "element" and d1.kernel.widened
    assert d1.kernel.frac_bits <= int(f.max()) and d1.kernel.int_bits <= int(i.max())
    assert d1.kernel.round_mode == "RND" and d1.kernel.overflow_mode == "SAT_SYM"
    constant_raw(H.quantized_weights(model.get_layer("d1"))[0], d1.kernel)
    # the compiler's formats: weights widened to int >= 0 (exact for constants)
    assert H.to_fixed_format(d1.input) == FixedFormat(1, 2, 5)
    assert H.to_fixed_format(d1.kernel) == FixedFormat(1, max(d1.kernel.int_bits, 0), d1.kernel.frac_bits)


@pytest.mark.parametrize(
    "iq1,iq2",
    [
        (SAT_MLP["iq1"], SAT_MLP["iq2"]),
        (
            datalane(i0=1, f0=3, overflow_mode="WRAP", round_mode="TRN"),
            datalane(k0=0, i0=1, f0=3, overflow_mode="WRAP", round_mode="TRN"),
        ),
        (
            datalane(i0=1, f0=4, overflow_mode="SAT_SYM", round_mode="RND_CONV"),
            datalane(k0=0, i0=-1, f0=6, overflow_mode="SAT", round_mode="S_RND"),
        ),
    ],
    ids=["rnd-sat", "trn-wrap-unsigned", "conv-satsym-negint-stochastic"],
)
def test_integer_model_equals_hgq2_forward_pass(iq1, iq2):
    """Inputs up to 4x beyond the formats' ranges, so saturation and wrapping happen."""
    model = mlp(iq1, iq2)
    x = grid_inputs((256, 16), scale=4.0)
    acc, frac = mlp_reference(model, x)
    assert_exact(np.asarray(model(x)), acc, frac)


def test_traced_default_datalane_unsigned_after_relu():
    """HGQ2's defaults with per-tensor activations: WRAP, integer bits from trace_minmax, and
    the quantizer after a ReLU becomes unsigned (k=0)."""
    keras.utils.set_random_seed(3)
    with QuantizerConfigScope(place="datalane", heterogeneous_axis=()):
        inp = keras.Input((16,))
        x = QDense(8, activation="relu", name="d1")(inp)
        model = keras.Model(inp, QDense(4, name="d2")(x))
    trace_minmax(model, grid_inputs((64, 16)))
    quant = H.model_quant(model)
    assert quant["d1"].input.keep_negative and quant["d1"].input.overflow_mode == "WRAP"
    assert not quant["d2"].input.keep_negative
    x = grid_inputs((256, 16), seed=5, scale=3.0)  # beyond the traced range: wraps
    acc, frac = mlp_reference(model, x)
    assert_exact(np.asarray(model(x)), acc, frac)
    config = H.format_config(model, to_graph(model))
    assert config.layers["d1"].output.sign == 0 and config.layers["d1"].output.overflow == "wrap"
    assert_golden_equals_hgq2(model, x)


def test_conv2d_and_einsum_dense_exact():
    keras.utils.set_random_seed(4)
    inp = keras.Input((6, 6, 2))
    x = QConv2D(3, 3, activation="relu", iq_conf=datalane(i0=1, f0=4, overflow_mode="SAT"), name="c")(inp)
    x = keras.layers.Flatten(name="flatten")(x)  # named: Keras counts Flattens per session
    out = QEinsumDense(
        "ba,ac->bc", 4, bias_axes="c", iq_conf=datalane(k0=0, i0=2, f0=3, overflow_mode="SAT"), name="e"
    )(x)
    model = keras.Model(inp, out)
    randomise_weight_bits(model.get_layer("c"))
    model.get_layer("c").bias.assign(np.array([0.3, -0.2, 0.1], dtype="float32"))
    graph = to_graph(model)
    assert [(r.name, r.type) for r in graph.layers] == [("c", "conv2d"), ("flatten", "flatten"), ("e", "dense")]
    quant = H.model_quant(model)
    x = grid_inputs((32, 6, 6, 2), scale=2.0)
    acc, frac = conv_acc(
        np.ldexp(x.astype(np.float64), IN_FRAC).astype(np.int64), IN_FRAC, model.get_layer("c"), quant["c"]
    )
    acc, frac = dense_acc(relu(acc).reshape(len(x), -1), frac, model.get_layer("e"), quant["e"])
    assert_exact(np.asarray(model(x)), acc, frac)
    np.testing.assert_array_equal(graph["c"].kernel, H.quantized_weights(model.get_layer("c"))[0])


def assert_golden_equals_hgq2(model, x) -> None:
    """The golden model run with the model's own formats equals HGQ2's outputs bit for bit."""
    from keras2clash.network import load_network
    from keras2clash.quant import golden

    network = load_network(model, "1,7,8")
    raw = golden.run(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    np.testing.assert_array_equal(network.plans[-1].out_fmt.to_real(raw), np.asarray(model(x), dtype=np.float64))


@pytest.mark.parametrize(
    "iq1,iq2",
    [
        (
            datalane(i0=1, f0=3, overflow_mode="WRAP", round_mode="TRN"),
            datalane(k0=0, i0=1, f0=3, overflow_mode="WRAP", round_mode="TRN"),
        ),
        (
            datalane(k0=0, i0=2, f0=-1, overflow_mode="WRAP"),  # unsigned input: negative inputs wrap
            datalane(i0=0, f0=3, overflow_mode="WRAP"),
        ),  # signed: relu(x) >= 1 wraps negative
        (
            datalane(i0=-1, f0=6, overflow_mode="SAT", round_mode="TRN"),
            datalane(k0=0, i0=3, f0=-1, overflow_mode="SAT_SYM", round_mode="S_RND"),
        ),
        (
            datalane(i0=1, f0=2, overflow_mode="WRAP", round_mode="RND_CONV"),
            datalane(k0=0, i0=1, f0=2, overflow_mode="SAT", round_mode="S_RND_CONV"),
        ),
    ],
    ids=["trn-wrap-unsigned", "neg-frac-signed-wrap-after-relu", "neg-int-trn-unsigned-satsym", "conv-ties-to-even"],
)
def test_golden_model_equals_hgq2_any_homogeneous_format(iq1, iq2):
    """Every k/i/f with RND/TRN and SAT/WRAP (SAT_SYM unsigned) is built as stated; a relu
    fused into a layer acts before the next layer's wrapping quantizer (HGQ2's order)."""
    model = mlp(iq1, iq2)
    x = grid_inputs((256, 16), scale=4.0)
    acc, frac = mlp_reference(model, x)
    assert_exact(np.asarray(model(x)), acc, frac)  # our reading of HGQ2, independently
    assert_golden_equals_hgq2(model, x)
    if iq2.config["overflow_mode"] == "WRAP" and iq2.config.get("k0", 1):
        from keras2clash.network import load_network
        from keras2clash.quant import golden

        network = load_network(model, "1,7,8")
        values = golden.run_all(network.plans, network.params, golden.quantize_inputs(network.plans, x))
        assert values["d1"].min() < 0  # relu(x) wrapped negative: the order matters here


def test_golden_model_equals_hgq2_when_the_formats_fit():
    """Signed, RND, SAT activations: today's FixedFormat holds them, and the golden model run
    with the model's own formats (not --format) equals HGQ2's outputs bit for bit."""
    from keras2clash.network import plan_network
    from keras2clash.quant import golden

    model = mlp(**SAT_MLP)
    graph = to_graph(model)
    config = H.format_config(model, graph)
    assert config.input == FixedFormat(1, 2, 5)
    assert config.layers["d1"].output == FixedFormat(1, 2, 4)  # d2's input quantizer
    network = plan_network(graph, "1,7,8", layer_formats=config)
    x = grid_inputs((256, 16), scale=4.0)
    raw = golden.run(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    out = network.plans[-1].out_fmt
    np.testing.assert_array_equal(out.to_real(raw), np.asarray(model(x), dtype=np.float64))


# --- refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "conf,match",
    [
        (QuantizerConfig("dummy", "datalane"), "q_type 'dummy' is not a fixed-point quantizer"),
        (datalane(overflow_mode="WRAP_SM"), "overflow_mode 'WRAP_SM' cannot be built"),
        (datalane(scaler=2.0), "scaler=2.0"),
    ],
)
def test_bad_quantizer_settings_are_refused(conf, match):
    inp = keras.Input((4,))
    model = keras.Model(inp, QDense(2, iq_conf=conf, name="bad")(inp))
    with pytest.raises(K2CError, match=r"'bad' \(QDense\), input quantizer: " + match):
        to_graph(model)


def test_float_activation_and_layout_refusals():
    inp = keras.Input((4,))
    model = keras.Model(inp, QDense(2, activation="sigmoid", iq_conf=datalane(), name="s")(inp))
    with pytest.raises(K2CError, match="'s' .*activation 'sigmoid' in float32"):
        to_graph(model)
    inp = keras.Input((3, 4))
    model = keras.Model(inp, QEinsumDense("abc,cde->abde", (3, 2, 2), iq_conf=datalane(), name="ein")(inp))
    with pytest.raises(K2CError, match="QEinsumDense layer 'ein' computes 'abc,cde->abde'"):
        to_graph(model)
    inp = keras.Input((4,))
    model = keras.Model(inp, QDense(2, enable_iq=False, name="noiq")(inp))
    with pytest.raises(K2CError, match="'noiq' .*enable_iq=False"):
        to_graph(model)


def test_to_fixed_format_builds_homogeneous_formats_and_refuses_the_rest():
    from keras2clash.quant.formats import parse_format

    t = H.TensorFormat("L", "input", False, -1, 6, "TRN", "WRAP")
    assert H.to_fixed_format(t) == parse_format("0,-1,6,trn,wrap")
    assert H.to_fixed_format(H.TensorFormat("L", "output", True, 3, -2, "RND", "SAT")) == parse_format("1,3,-2")
    # SAT_SYM is SAT when unsigned; signed it drops the most negative code: refused
    assert H.to_fixed_format(H.TensorFormat("L", "input", False, 2, 2, "RND", "SAT_SYM")) == parse_format("0,2,2")
    with pytest.raises(
        K2CError,
        match=r"HGQ2 layer 'L', input quantizer \(signed, 2 integer and 2 fraction bits, "
        r"RND, SAT_SYM\): cannot be built exactly: overflow_mode SAT_SYM on a signed",
    ):
        H.to_fixed_format(H.TensorFormat("L", "input", True, 2, 2, "RND", "SAT_SYM"))
    with pytest.raises(K2CError, match=r"'L', output quantizer .*round_mode RND_INF \(built: RND, RND_CONV, TRN\)"):
        H.to_fixed_format(H.TensorFormat("L", "output", True, 2, 2, "RND_INF", "WRAP"))
    # ties to even (and its stochastic name, deterministic at inference) is built
    assert H.to_fixed_format(H.TensorFormat("L", "output", True, 2, 2, "RND_CONV", "WRAP")) == parse_format(
        "1,2,2,rnd_conv,wrap"
    )
    # a constant only needs a container: widened exactly
    assert H.to_fixed_format(H.TensorFormat("L", "kernel", True, -3, 7, "RND", "SAT_SYM")) == FixedFormat(1, 0, 7)
    assert H.to_fixed_format(H.TensorFormat("L", "bias", False, 0, 0, "RND", "WRAP")) == FixedFormat(1, 0, 1)


@pytest.mark.parametrize(
    "conf,match",
    [
        (datalane(round_mode="RND_INF"), "round_mode RND_INF"),
        (datalane(round_mode="RND_ZERO"), "round_mode RND_ZERO"),
        (datalane(overflow_mode="SAT_SYM"), "overflow_mode SAT_SYM on a signed format"),
        (datalane(round_mode="TRN_ZERO"), "round_mode TRN_ZERO"),
    ],
)
def test_unbuildable_activation_modes_are_refused_with_layer_and_setting(conf, match):
    """One K2CError naming the layer, the quantizer and the setting, when the network is loaded."""
    from keras2clash.network import load_network

    inp = keras.Input((4,))
    model = keras.Model(inp, QDense(2, iq_conf=conf, name="bad")(inp))
    with pytest.raises(K2CError, match=r"HGQ2 layer 'bad', input quantizer \(.*\): cannot be built exactly: " + match):
        load_network(model, "1,7,8")


def test_cli_emit_refuses_an_unbuildable_quantizer_with_one_error(tmp_path, capsys):
    """`keras2clash emit` on a saved HGQ2 model with a ties-to-even activation quantizer: a
    non-zero exit and one error naming the layer, the quantizer and the setting."""
    from test_cli import run_cli

    inp = keras.Input((4,))
    x = QDense(3, activation="relu", iq_conf=datalane(overflow_mode="SAT"), name="ok")(inp)
    model = keras.Model(inp, QDense(2, iq_conf=datalane(k0=0, round_mode="RND_MIN_INF"), name="conv")(x))
    model.save(tmp_path / "m.keras")
    code, text = run_cli(["emit", str(tmp_path / "m.keras"), "--out", str(tmp_path / "net")], capsys)
    assert code != 0 and not (tmp_path / "net").exists()
    text = " ".join(text.split())
    assert "HGQ2 layer 'conv', input quantizer (unsigned, 2 integer and 6 fraction bits, RND_MIN_INF, WRAP)" in text
    assert "round_mode RND_MIN_INF (built: RND, RND_CONV, TRN)" in text


def test_standalone_relu_before_a_wrapping_quantizer_is_refused():
    """A ReLU the passes cannot fuse into a layer (at the input; after a layer that has an
    activation already) would act after the wrap in hardware."""
    wrap = datalane(k0=0, i0=1, f0=3, overflow_mode="WRAP")
    inp = keras.Input((4,))
    model = keras.Model(inp, QDense(2, iq_conf=wrap, name="a")(keras.layers.ReLU(name="r")(inp)))
    with pytest.raises(
        K2CError,
        match=r"the network input passes a standalone ReLU layer before HGQ2 layer 'a''s WRAP "
        r"input quantizer",
    ):
        H.format_config(model, to_graph(model))
    h = QDense(3, activation="relu", iq_conf=datalane(overflow_mode="SAT"), name="h")(inp)
    model = keras.Model(inp, QDense(2, iq_conf=wrap, name="b")(keras.layers.ReLU(name="r2")(h)))
    with pytest.raises(K2CError, match=r"output of 'h' passes a standalone ReLU layer before HGQ2 layer 'b''s WRAP"):
        H.format_config(model, to_graph(model))
    sat = keras.Model(
        inp, QDense(2, iq_conf=datalane(k0=0, i0=1, f0=3, overflow_mode="SAT"), name="c")(keras.layers.ReLU()(h))
    )
    assert H.format_config(sat, to_graph(sat)).layers["h"].output.overflow == "saturate"  # commutes: built


def test_saved_hgq2_model_loads_and_converts(tmp_path):
    """A .keras file of an HGQ2 model loads without the user importing hgq first."""
    from keras2clash.network import load_model

    model = mlp(**SAT_MLP)
    path = tmp_path / "hgq.keras"
    model.save(path)
    loaded, graph = load_model(str(path))
    assert [type(layer).__name__ for layer in loaded.layers[1:]] == ["QDense", "QDense"]
    np.testing.assert_array_equal(graph["d1"].kernel, H.quantized_weights(model.get_layer("d1"))[0])
    assert H.format_config(loaded, graph) == H.format_config(model, to_graph(model))


def test_load_network_takes_the_formats_from_the_model(tmp_path):
    """`load_network` (what emit uses) plans an HGQ2 model with its own formats; formats
    given as well are refused rather than mixed in."""
    from keras2clash.network import load_network
    from keras2clash.quant import golden

    model = mlp(**SAT_MLP)
    network = load_network(model, "1,7,8")
    assert network.plans[0].in_fmt == FixedFormat(1, 2, 5) and network.plans[0].out_fmt == FixedFormat(1, 2, 4)
    x = grid_inputs((64, 16), scale=4.0)
    raw = golden.run(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    np.testing.assert_array_equal(network.plans[-1].out_fmt.to_real(raw), np.asarray(model(x), dtype=np.float64))
    with pytest.raises(K2CError, match="HGQ2 model brings its own formats"):
        load_network(model, "1,7,8", input_format="1,3,4")


@needs_toolchain
def test_clash_simulation_equals_hgq2(tmp_path):
    """End to end: the emitted Clash network of an HGQ2 model equals the golden model, which
    equals HGQ2's own outputs, bit for bit on every sample."""
    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    keras.utils.set_random_seed(7)
    inp = keras.Input((4,))
    x = QDense(3, activation="relu", iq_conf=datalane(i0=1, f0=3, overflow_mode="SAT"), name="h1")(inp)
    model = keras.Model(inp, QDense(2, iq_conf=datalane(i0=1, f0=2, overflow_mode="SAT"), name="h2")(x))
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    x = grid_inputs((24, 4), scale=2.0)
    want, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=3)
    np.testing.assert_array_equal(project.plans[-1].out_fmt.to_real(want), np.asarray(model(x), dtype=np.float64))


def pooled_cnn(overflow: str = "SAT"):
    """QConv2D -> MaxPooling2D -> ZeroPadding2D -> QConv2D -> UpSampling2D -> Cropping2D
    -> GlobalMaxPooling2D -> QDense: plain Keras layers that only select or move values
    between HGQ2 layers."""
    keras.utils.set_random_seed(6)
    layers = keras.layers
    inp = keras.Input((8, 8, 2))
    x = QConv2D(4, 3, activation="relu", iq_conf=datalane(i0=1, f0=4, overflow_mode="SAT"), name="c1")(inp)
    x = layers.MaxPooling2D(2, name="pool")(x)
    x = layers.ZeroPadding2D(1, name="pad")(x)
    x = QConv2D(3, 2, iq_conf=datalane(k0=0, i0=2, f0=3, overflow_mode="SAT", round_mode="TRN"), name="c2")(x)
    x = layers.UpSampling2D(2, name="up")(x)
    x = layers.Cropping2D(1, name="crop")(x)
    x = layers.GlobalMaxPooling2D(name="gmp")(x)
    out = QDense(3, iq_conf=datalane(i0=2, f0=3, overflow_mode=overflow), name="d")(x)
    model = keras.Model(inp, out)
    randomise_weight_bits(model.get_layer("c1"))
    randomise_weight_bits(model.get_layer("c2"), seed=1)
    return model


@needs_toolchain
def test_pooling_and_moves_between_hgq2_layers_equal_hgq2(tmp_path):
    """Max pooling (local and global), zero padding, upsampling and cropping between HGQ2
    layers: the producer requantizes to the next layer's input quantizer before them, which
    commutes with a saturating quantizer: the golden model equals HGQ2 bit for bit, and the
    Clash simulation equals the golden model."""
    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    model = pooled_cnn()
    graph = to_graph(model)
    assert [r.type for r in graph.layers if r.name in ("pool", "gmp")] == ["maxpool2d", "globalmaxpool"]
    x = grid_inputs((64, 8, 8, 2), seed=3, scale=2.0)
    assert_golden_equals_hgq2(model, x)
    project = load_project(k2c.emit(model, "1,7,8", tmp_path / "net", show=False))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x[:6]), seed=5)


def test_max_pooling_before_a_wrapping_quantizer_is_refused():
    """A maximum of wrapped values is not the wrapped maximum: refused with the layer's name."""
    with pytest.raises(K2CError, match=r"passes layer 'gmp' \(GlobalMaxPooling2D\) before HGQ2 layer 'd''s WRAP"):
        H.format_config(pooled_cnn("WRAP"), to_graph(pooled_cnn("WRAP")))
