"""HGQ2's QMultiHeadAttention (frontend.hgq_attention): a small HGQ2 model (a QEinsumDense
embedding per step, the attention, a QDense head) converted into the attention kind's
records with the quantizers' formats; the projections bit for bit equal to HGQ2's; the
attention's output within a bound derived from the two softmaxes (HGQ2's tables are filled
in float32, keras2clash's softmax is its own); the rest of the network bit for bit wherever
the attention agrees; the refusals; and one Clash simulation bit for bit with the golden model
(docs/guide/quantization-aware.md, "QMultiHeadAttention")."""

from __future__ import annotations

import math

import numpy as np
import pytest

hgq = pytest.importorskip("hgq")
keras = pytest.importorskip("keras")

from hgq import layers as Q  # noqa: E402
from hgq.quantizer import QuantizerConfig  # noqa: E402
from test_hgq import datalane, randomise_weight_bits  # noqa: E402

from helpers import assert_clash_matches_golden, needs_toolchain  # noqa: E402
from keras2clash.errors import K2CError  # noqa: E402
from keras2clash.frontend import hgq as H  # noqa: E402
from keras2clash.network import load_network  # noqa: E402
from keras2clash.quant import activations, golden  # noqa: E402
from keras2clash.quant.formats import FixedFormat  # noqa: E402

STEPS, FEATURES, HEADS, KEY_DIM = 5, 3, 2, 3
SAT = dict(overflow_mode="SAT")


def table(**kw) -> QuantizerConfig:
    return QuantizerConfig("kif", "table", **kw)


# The softmax's own quantizers, wide enough that HGQ2's softmax is close to the exact one
# (its reciprocal's input saturates beyond 2^4, more than the row's sum of 5 exponentials).
SOFTMAX = dict(
    softmax_oq_conf=datalane(k0=0, i0=1, f0=7),
    softmax_exp_iq_conf=datalane(k0=0, i0=4, f0=6, **SAT),
    softmax_exp_oq_conf=table(k0=0, i0=1, f0=12),
    softmax_inv_iq_conf=datalane(k0=0, i0=4, f0=8, **SAT),
    softmax_inv_oq_conf=table(k0=0, i0=1, f0=12),
)


def attention(name: str = "mha", **kw):
    settings = dict(
        qkvo_iq_conf=datalane(i0=2, f0=4, **SAT),
        qkvo_oq_conf=datalane(i0=2, f0=4),  # HGQ2's default overflow, WRAP
        fuse="qkv",
        **SOFTMAX,
    )
    settings.update(kw)
    return Q.QMultiHeadAttention(HEADS, KEY_DIM, name=name, **settings)


def model(mha=None, causal: bool = False, seed: int = 1):
    """Input sequence -> QEinsumDense per step -> QMultiHeadAttention -> Flatten -> QDense."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((STEPS, FEATURES))
    x = Q.QEinsumDense("abc,cd->abd", (STEPS, 4), bias_axes="d", iq_conf=datalane(i0=1, f0=4, **SAT), name="embed")(inp)
    mha = mha or attention()
    h = mha(x, x, use_causal_mask=causal)
    h = keras.layers.Flatten(name="flat")(h)
    out = Q.QDense(3, iq_conf=datalane(i0=2, f0=4, **SAT), name="head")(h)
    net = keras.Model(inp, out)
    for part in (mha._query_dense, mha._key_dense, mha._value_dense, mha._output_dense):
        randomise_weight_bits(part, seed)
    return net


def inputs(n: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, (n, STEPS, FEATURES)).astype(np.float32)


def fixed(layer, role: str, quantizer) -> FixedFormat:
    return H.to_fixed_format(H.data_format(layer, role, quantizer))


def test_the_records_take_the_quantizers_formats() -> None:
    net = model()
    mha = net.get_layer("mha")
    plans = {p.name: p for p in load_network(net, "1,7,8", fifos=False).plans}
    assert [n for n in plans][:7] == ["embed", "mha_query", "mha_key", "mha_value", "mha_qkv", "mha_attention", "mha"]
    for part in ("query", "key", "value"):
        dense, plan = getattr(mha, f"_{part}_dense"), plans[f"mha_{part}"]
        assert plan.in_fmt == fixed(dense, "input", dense.iq) == FixedFormat(1, 2, 4)
        assert plan.out_fmt == fixed(dense, "output", dense.oq) == FixedFormat(1, 2, 4, "nearest", "wrap")
        assert np.array_equal(plan.layer.kernel.reshape(-1), np.asarray(dense.qkernel).reshape(-1))  # unscaled
    assert plans["mha_key"].layer.use_bias is False
    att = plans["mha_attention"]
    assert att.in_fmt == FixedFormat(1, 2, 4)  # the container of q, k and v
    assert att.out_fmt == fixed(mha._output_dense, "input", mha._output_dense.iq) == FixedFormat(1, 2, 4)
    p = att.params
    assert p.score_fmt == FixedFormat(1, 2 * 2 + 1 + 2, 8)  # every q . k exactly: 2 * 4 fraction bits
    assert p.prob_fmt == FixedFormat(1, 1, 7)  # QSoftmax's output quantizer (unsigned 1, 7), signed
    assert p.scale == pytest.approx(1 / math.sqrt(KEY_DIM))
    assert plans["mha"].in_fmt == att.out_fmt and plans["mha"].out_fmt == FixedFormat(1, 2, 4, "nearest", "saturate")


def _hgq_softmax_bound(mha, steps: int) -> float:
    """|HGQ2's probability - the exact softmax| per probability, from its quantizers: the
    difference `d = max - s` rounded to the exponential table's input (fraction bits fe, half
    an LSB: a relative error rho of the exponential; a saturated d adds at most the table's
    value there), the table rounded (fx), the row's sum rounded (fi), its reciprocal rounded
    (fy), the product rounded to the probability (fp); float32 adds a relative 2^-23 or so,
    covered by 1e-6. As keras2clash's softmax bound (docs/guide/contract.md), with the sum's
    and the reciprocal's roundings on top."""
    sm = mha._softmax
    c = float(sm.input_scaler)
    (ke, ie, fe), (_, _, fx), (_, _, fi), (_, _, fy), (_, _, fp) = (
        (int(np.max(v)) for v in q.quantizer.kif)
        for q in (sm.exp_table.iq, sm.exp_table.oq, sm.inv_table.iq, sm.inv_table.oq, sm.oq)
    )
    rho = math.exp(c * 2.0 ** -(fe + 1)) - 1
    eta = 2.0 ** -(fx + 1) + math.exp(-c * (2.0**ie - 2.0**-fe))
    exact_sum = (2 * rho + (steps + 1) * eta) / (1 - rho - steps * eta)
    eta_sum, eta_inv = 2.0 ** -(fi + 1), 2.0 ** -(fy + 1) + 1e-6
    return exact_sum + eta_sum / (1 - rho - eta - eta_sum) + (1 + rho + eta) * eta_inv + 2.0 ** -(fp + 1)


def _compare(net, x: np.ndarray) -> None:
    """The projections equal HGQ2's bit for bit; the attention's output is HGQ2's (its mix
    quantized by the output projection's input quantizer) within `max|v| (n (B + B')) + LSB`
    (the two softmaxes' bounds B, B' on the same exact scores; each output rounded once); and
    every sample whose attention output equals HGQ2's has the network output HGQ2 gives."""
    mha = net.get_layer("mha")
    network = load_network(net, "1,7,8", fifos=False)
    plans = {p.name: p for p in network.plans}
    values = golden.run_all(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    n = len(x)
    e = net.get_layer("embed")(x)
    q, k, v = mha._query_dense(e), mha._key_dense(e), mha._value_dense(e)
    for name, want in (("mha_query", q), ("mha_key", k), ("mha_value", v)):
        got = plans[name].out_fmt.to_real(values[name]).reshape(n, STEPS, -1)
        np.testing.assert_array_equal(got, np.asarray(want, dtype=np.float64).reshape(n, STEPS, -1))
    causal = plans["mha_attention"].layer.causal
    mask = np.tril(np.ones((STEPS, STEPS), dtype=bool))[None] if causal else None
    mixed, _ = mha._compute_attention(q, k, v, mask)
    want = np.asarray(mha._output_dense.iq(mixed), dtype=np.float64).reshape(n, STEPS, -1)
    att = plans["mha_attention"]
    got = att.out_fmt.to_real(values["mha_attention"]).reshape(n, STEPS, -1)
    p = att.params
    ours = activations.softmax_table(p.score_fmt, p.prob_fmt, STEPS, p.scale).error_bound
    bound = np.abs(np.asarray(v)).max() * STEPS * (ours + _hgq_softmax_bound(mha, STEPS)) + att.out_fmt.lsb
    assert np.abs(got - want).max() <= bound
    same = np.all(got == want, axis=(1, 2))
    assert same.sum() >= n // 4  # the comparison below sees samples
    out = network.plans[-1].out_fmt.to_real(values["head"]).reshape(n, -1)
    np.testing.assert_array_equal(out[same], np.asarray(net(x), dtype=np.float64)[same])


def test_projections_exact_and_attention_within_the_softmaxes_bounds() -> None:
    _compare(model(), inputs())


def test_a_causal_attention_within_the_bounds_and_step_zero_its_own_value() -> None:
    """A masked key's probability is 0, as HGQ2's: step 0 attends to itself alone (its
    probability rounds to 1 exactly), so its output is its own value rounded to the output."""
    net = model(causal=True, seed=2)
    x = inputs(seed=2)
    _compare(net, x)
    network = load_network(net, "1,7,8", fifos=False)
    values = golden.run_all(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    first = values["mha_qkv"].reshape(len(x), STEPS, -1)[:, 0, 2 * HEADS * KEY_DIM :]
    assert np.array_equal(values["mha_attention"].reshape(len(x), STEPS, -1)[:, 0], first)


def _refused(net) -> str:
    with pytest.raises(K2CError) as err:
        load_network(net, "1,7,8", fifos=False)
    message = str(err.value)
    assert len(message.splitlines()) == 1
    return message


def _vary(quantizer) -> None:
    """Fraction bits that differ per element (as training leaves a per-element quantizer)."""
    f = quantizer.quantizer._f
    f.assign(np.random.default_rng(0).integers(3, 7, size=f.shape).astype("float32"))


@pytest.mark.parametrize(
    ("settings", "heterogeneous", "words"),
    [
        (dict(qkvo_oq_conf=QuantizerConfig("kif", "datalane")), "query", ["'mha_query'", "output", "qkvo_oq_conf"]),
        (dict(softmax_oq_conf=QuantizerConfig("kif", "datalane")), "softmax", ["'mha_attention'", "softmax_oq_conf"]),
        (dict(softmax_oq_conf=datalane(k0=0, i0=0, f0=8)), None, ["softmax output", "wraps", "SAT"]),
    ],
)
def test_settings_not_built_are_refused_naming_the_layer_and_the_setting(settings, heterogeneous, words) -> None:
    mha = attention(**settings)
    net = model(mha)
    if heterogeneous == "query":
        _vary(mha._query_dense.oq)
    elif heterogeneous == "softmax":
        _vary(mha._softmax.oq)
    message = _refused(net)
    for word in ["'mha'", *words]:
        assert word in message


def test_projections_reading_one_tensor_through_different_quantizers_are_refused() -> None:
    mha = attention(fuse="none")
    net = model(mha)
    f = mha._key_dense.iq.quantizer._f
    f.assign(np.full(f.shape, 6.0, dtype="float32"))
    message = _refused(net)
    assert "'mha'" in message and "'mha_key'" in message and "fuse='qkv'" in message


@pytest.mark.parametrize("cls", ["QMultiHeadAttentionT", "QLinformerAttention"])
def test_the_other_attention_layers_are_refused(cls) -> None:
    from keras2clash.frontend.registry import unsupported_layer

    message = str(unsupported_layer(cls, "a"))
    assert cls in message and "QMultiHeadAttention is" in message


@needs_toolchain
def test_clash_simulation_equals_the_golden_model(tmp_path) -> None:
    """A causal attention whose output quantizer wraps (`K2C.Quant.requantizeTo`)."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    net = model(attention(qkvo_iq_conf=datalane(i0=2, f0=4)), causal=True, seed=3)  # the mix rounded and wrapped
    out = tmp_path / "net"
    api.emit(net, "1,7,8", out, show=False)
    project = load_project(out)
    assert project.plans[5].name == "mha_attention" and project.plans[5].out_fmt.overflow == "wrap"
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, inputs(6, seed=3)), 3)
