"""MultiHeadAttention: the conversion into projections around the attention kind, its
arithmetic against Keras' float attention within the bound its contract states, its
refusals, and the Clash simulation bit for bit with the golden model and the hardware
model's cycles (docs/guide/contract.md, "Attention")."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from keras import layers

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.kinds.attention import AttentionParams
from keras2clash.network import load_network
from keras2clash.quant import activations, golden
from keras2clash.quant.formats import parse_format, requantize


def _randomize(model: keras.Model, seed: int, scale: float = 0.5) -> keras.Model:
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        layer.set_weights([rng.uniform(-scale, scale, w.shape) for w in layer.get_weights()])
    return model


def _attention_model(
    steps: int, features: int, heads: int, key_dim: int, value_dim: int, causal: bool, residual: bool, seed: int
) -> keras.Model:
    inp = keras.Input((steps, features))
    mha = layers.MultiHeadAttention(heads, key_dim, value_dim=value_dim, name="mha")
    h = mha(inp, inp, use_causal_mask=causal)
    if residual:
        h = layers.Add(name="residual")([inp, h])
    out = layers.Dense(3, name="head")(layers.Flatten()(h))
    return _randomize(keras.Model(inp, out), seed)


def test_a_layer_becomes_its_projections_around_the_attention() -> None:
    """The query's projection carries Keras' 1/sqrt(key_dim); the output projection takes the
    Keras layer's name."""
    model = _attention_model(5, 4, 2, 3, 2, False, False, seed=1)
    plans = load_network(model, "1,7,8", fifos=False).plans
    by_name = {p.name: p for p in plans}
    assert [p.type for p in plans[:6]] == ["conv2d", "conv2d", "conv2d", "concatenate", "attention", "conv2d"]
    assert [p.name for p in plans[:6]] == ["mha_query", "mha_key", "mha_value", "mha_qkv", "mha_attention", "mha"]
    assert by_name["mha_qkv"].output_shape == (1, 5, 2 * 2 * 3 + 2 * 2)
    assert by_name["mha_attention"].output_shape == (1, 5, 4) and by_name["mha"].output_shape == (1, 5, 4)
    kernel = model.get_layer("mha")._query_dense.kernel.numpy().reshape(4, 6)
    assert np.allclose(by_name["mha_query"].layer.kernel.reshape(4, 6), kernel / np.sqrt(3))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    steps=st.integers(1, 8),
    heads=st.integers(1, 3),
    key_dim=st.integers(1, 4),
    value_dim=st.integers(1, 4),
    causal=st.booleans(),
    fmt=st.sampled_from(["1,7,16", "1,5,10"]),
    seed=st.integers(0, 9999),
)
def test_attention_is_kerass_within_its_stated_bound(steps, heads, key_dim, value_dim, causal, fmt, seed) -> None:
    """On the golden model's own q, k and v the output is the float attention's within: each
    score's rounding (half an LSB moves a row of probabilities by at most twice that in sum),
    the softmax's stated bound per probability, and the output's rounding."""
    model = _attention_model(steps, 3, heads, key_dim, value_dim, causal, False, seed)
    plans = load_network(model, fmt, fifos=False).plans
    plan = next(p for p in plans if p.type == "attention")
    p: AttentionParams = plan.params  # type: ignore[assignment]
    x = np.random.default_rng(seed).uniform(-1, 1, (6, steps, 3))
    values = golden.run_all(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x))
    qkv = values["mha_qkv"]
    got = values["mha_attention"] * plan.out_fmt.lsb
    _, want = plan.kind.float_step(plan.layer, [qkv * plan.in_fmt.lsb], None)
    v = qkv.reshape(6, steps, -1)[..., 2 * heads * key_dim :] * plan.in_fmt.lsb
    table = activations.softmax_table(p.score_fmt, p.prob_fmt, steps)
    row_error = steps * table.error_bound + 2 * (p.score_fmt.lsb / 2)
    bound = np.abs(v).max(initial=0) * row_error + plan.out_fmt.lsb / 2 + 1e-12
    assert np.max(np.abs(got - want)) <= bound


def test_a_causal_mask_hides_the_later_steps() -> None:
    """Step 0 attends to itself alone under a causal mask: its output is its own value."""
    model = _attention_model(4, 3, 1, 2, 2, True, False, seed=3)
    plans = load_network(model, "1,7,16", fifos=False).plans
    x = np.random.default_rng(3).uniform(-1, 1, (2, 4, 3))
    values = golden.run_all(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x))
    first_value = values["mha_qkv"].reshape(2, 4, -1)[:, 0, 4:]
    out = values["mha_attention"].reshape(2, 4, -1)[:, 0]
    assert np.array_equal(out, first_value)


CLASH = settings(
    max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate]
)  # no shrinking: each example builds Clash


@needs_toolchain
@CLASH
@given(
    steps=st.integers(1, 6),
    features=st.integers(1, 4),
    heads=st.integers(1, 3),
    key_dim=st.integers(1, 4),
    value_dim=st.integers(1, 3),
    causal=st.booleans(),
    residual=st.booleans(),
    fmt=st.sampled_from(["1,5,10", "1,3,6"]),
    seed=st.integers(0, 10_000),
)
def test_random_attention_bit_exact_in_clash(
    tmp_path_factory, steps, features, heads, key_dim, value_dim, causal, residual, fmt, seed
) -> None:
    from keras2clash import api
    from keras2clash.backend.project import load_project

    model = _attention_model(steps, features, heads, key_dim, value_dim, causal, residual, seed)
    out = tmp_path_factory.mktemp("mha") / "net"
    api.emit(model, fmt, out, show=False)
    project = load_project(out)
    x = np.random.default_rng(seed).uniform(-1.5, 1.5, size=(4, steps, features))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed)


def _refusal(call) -> str:
    query, value = keras.Input((5, 3)), keras.Input((4, 3))
    out = call(query, value)
    model = keras.Model(
        [query, value] if value in out._keras_history[0]._inbound_nodes[0].input_tensors else query, out
    )
    with pytest.raises(K2CError) as err:
        load_network(model, "1,7,8", fifos=False)
    return str(err.value)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda q, v: layers.MultiHeadAttention(2, 3, name="m")(q, v), ["'m'", "5 steps", "4"]),
        (
            lambda q, v: layers.MultiHeadAttention(2, 3, name="m")(q, q, attention_mask=np.ones((1, 5, 5))),
            ["'m'", "attention_mask"],
        ),
        (lambda q, v: layers.MultiHeadAttention(2, 3, name="m")(q, q, key=q), ["'m'", "key"]),
    ],
)
def test_refusals_name_the_layer_and_the_setting(call, words) -> None:
    message = _refusal(call)
    assert len(message.splitlines()) == 1
    for word in words:
        assert word in message


def test_the_output_is_rounded_with_its_formats_modes() -> None:
    """An output format with other modes (truncate, wrap) rounds the exact mix once with them:
    the golden output equals the exact mix (an output format wide enough to keep it)
    requantized to that format."""
    model = _attention_model(3, 2, 1, 2, 2, False, False, seed=2)
    x = np.random.default_rng(2).uniform(-1, 1, (8, 3, 2))

    def attention_output(fmt: str) -> tuple[np.ndarray, AttentionParams]:
        plans = load_network(model, "1,7,8", fifos=False, layer_formats={"mha_attention": {"o": fmt}}).plans
        values = golden.run_all(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x))
        plan = next(p for p in plans if p.type == "attention")
        return values["mha_attention"], plan.params  # type: ignore[return-value]

    exact, p = attention_output("1,9,22")  # the mix's fraction bits: the probabilities' 14 and the input's 8
    assert p.prob_fmt.frac + 8 == 22
    got, _ = attention_output("1,2,3,trn,wrap")
    assert np.array_equal(got, requantize(exact.astype(object), 22, parse_format("1,2,3,trn,wrap")))


def test_the_probabilities_have_one_integer_bit() -> None:
    model = _attention_model(3, 2, 1, 2, 2, False, False, seed=2)
    plan = next(p for p in load_network(model, "1,7,8", fifos=False).plans if p.type == "attention")
    assert plan.params.prob_fmt == parse_format("1,1,14")  # type: ignore[attr-defined]
