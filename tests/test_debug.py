"""keras2clash.predict and keras2clash.trace: the golden model's outputs
without files, every layer against Keras' output of the same layer, the CLI's exit codes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import random_dense_model, run_cli


def _cnn():
    """Padding folded into a Conv2D, a BatchNormalization folded and a ReLU fused into it, a
    SeparableConv2D (two records), a Dropout removed, a softmax Dense: every mapping rule."""
    import keras

    rng = np.random.default_rng(0)
    inp = keras.Input((6, 6, 1), name="image")
    h = keras.layers.ZeroPadding2D(1, name="pad")(inp)
    h = keras.layers.Conv2D(3, 3, name="conv")(h)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.ReLU(name="relu")(h)
    h = keras.layers.SeparableConv2D(2, 3, name="sep", activation="relu")(h)
    h = keras.layers.Flatten(name="flat")(h)
    h = keras.layers.Dropout(0.2, name="drop")(h)
    out = keras.layers.Dense(3, activation="softmax", name="out")(h)
    model = keras.Model(inp, out, name="cnn")
    model.set_weights(
        [
            np.abs(rng.normal(1, 0.2, w.shape)).astype("float32")
            if "variance" in w.path
            else rng.normal(0, 0.5, w.shape).astype("float32")
            for w in model.weights
        ]
    )
    return model


@pytest.fixture(scope="module")
def cnn():
    return _cnn()


@pytest.fixture(scope="module")
def cnn_x():
    return np.random.default_rng(1).uniform(-1, 1, (24, 6, 6, 1))


def test_predict_is_the_golden_model_and_writes_nothing(tmp_path: Path, monkeypatch, cnn, cnn_x) -> None:
    import keras2clash as k2c
    from keras2clash.network import load_network
    from keras2clash.quant import golden

    monkeypatch.chdir(tmp_path)
    result = k2c.predict(cnn, cnn_x, "1,5,10")
    network = load_network(cnn, "1,5,10")
    x_raw = golden.quantize_inputs(network.plans, cnn_x)
    raw, classes = golden.predict(network.plans, network.params, x_raw)
    assert np.array_equal(result.raw, raw) and np.array_equal(result.classes, classes)
    assert np.array_equal(result.values, raw * 2.0**-10) and str(result.output_format) == "1,5,10"
    assert np.array_equal(result.input_raw, x_raw) and len(result) == 24
    keras_out = cnn.predict(cnn_x, verbose=0)
    assert np.max(np.abs(result.values - keras_out)) < 0.02  # close to Keras, and in [0, 1]: a softmax
    assert list(tmp_path.iterdir()) == []
    # the same from the planned network, a single sample, and a wrong shape named
    again = k2c.predict(network, cnn_x[3])
    assert np.array_equal(again.raw, raw[3:4])
    with pytest.raises(k2c.K2CError, match=r"inputs have shape \(24, 5, 6, 1\)"):
        k2c.predict(network, cnn_x[:, 1:])
    with pytest.raises(k2c.K2CError, match="format: options for planning a Keras model"):
        k2c.predict(network, cnn_x, "1,7,8")


def test_predict_from_an_emitted_project(tmp_path: Path) -> None:
    import keras2clash as k2c

    model = random_dense_model([(5, "relu"), (3, "linear")], n_in=4, seed=3)
    x = np.random.default_rng(2).uniform(-2, 2, (10, 4))
    project = k2c.emit(model, "1,6,9", tmp_path / "p", show=False)
    assert np.array_equal(k2c.predict(project, x).raw, k2c.predict(model, x, "1,6,9").raw)


def test_trace_maps_every_record_to_its_keras_tensor(cnn, cnn_x) -> None:
    import keras2clash as k2c
    from keras2clash.network import load_network
    from keras2clash.quant import golden

    tr = k2c.trace(cnn, cnn_x, "1,7,8")
    assert [r.name for r in tr.layers] == ["input", "conv", "sep_depthwise", "sep", "flat", "out"]
    assert [r.keras_layer for r in tr.layers] == ["image", "relu", None, "sep", "flat", "out"]
    conv = tr["conv"]
    assert "ZeroPadding2D 'pad' folded in" in conv.note and "BatchNormalization 'bn' folded in" in conv.note
    assert "ReLU 'relu' fused in" in conv.note and "SeparableConv2D 'sep'" in tr["sep_depthwise"].note
    assert tr["sep_depthwise"].stats is None and tr["sep_depthwise"].keras is None
    # Keras' column is Keras' own computation: the last one is model.predict
    assert np.allclose(tr["out"].keras, cnn.predict(cnn_x, verbose=0), atol=1e-6)
    assert np.allclose(tr["input"].keras, cnn_x.reshape(24, -1).astype("float32"))
    # the fixed-point column is the golden model's, every layer
    network = load_network(cnn, "1,7,8")
    values = golden.run_all(network.plans, network.params, golden.quantize_inputs(network.plans, cnn_x))
    for row in tr.layers:
        assert np.array_equal(row.raw, values[row.name].reshape(24, -1))
        assert np.array_equal(row.fixed, row.raw * 2.0**-8)
    s = tr["input"].stats
    assert 0.45 < s.max_lsb <= 0.5 and s.max_abs == pytest.approx(s.max_lsb / 256)
    err = np.abs(tr["sep"].fixed - tr["sep"].keras)
    assert tr["sep"].stats.mse == pytest.approx(np.mean(err**2)) and tr["sep"].stats.max_abs == err.max()
    # the first layer over a threshold, in network order
    over = [r.name for r in tr.layers if r.stats is not None and r.stats.max_lsb > 1.0]
    assert tr.first_divergence(1.0).name == over[0] and tr.first_divergence(1e9) is None
    assert tr.first_divergence(0.0, "max_abs").name == "input"


def test_trace_softmax_left_out_compares_the_logits(cnn, cnn_x) -> None:
    import keras2clash as k2c

    tr = k2c.trace(cnn, cnn_x, "1,7,8", softmax="argmax")
    out = tr["out"]
    assert "softmax left out" in out.note
    kernel, bias = (w.numpy() for w in cnn.get_layer("out").weights)
    logits = tr["flat"].keras.astype("float32") @ kernel + bias  # Keras' Dense before its softmax
    assert np.allclose(out.keras, logits, atol=1e-5) and out.stats.max_abs < 0.1


def test_trace_finds_the_saturating_layer(tmp_path: Path) -> None:
    """Weights far beyond a 1,2,5 format's range: the first dense layer saturates, and the
    trace says so; the plot is a PNG written whole, never over a file without force."""
    import keras2clash as k2c

    model = random_dense_model([(6, "relu"), (4, "linear"), (2, "linear")], n_in=3, seed=4, scale=3.0)
    x = np.random.default_rng(5).uniform(-1, 1, (40, 3))
    tr = k2c.trace(model, x, "1,2,5")
    first = tr.first_divergence(4.0)
    assert first is not None and first.name == "dense_0" and first.stats.saturated > 0
    png = tr.plot(tmp_path / "trace.png", threshold=4.0, force=False)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(k2c.K2CError, match="use --force"):
        tr.plot(png, force=False)
    assert [p.name for p in tmp_path.iterdir()] == ["trace.png"]


def test_trace_reaches_inside_a_nested_model() -> None:
    import keras

    import keras2clash as k2c

    inner = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(5, activation="tanh", name="inner_a"),
            keras.layers.Dense(3, name="inner_b"),
        ],
        name="inner",
    )
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(2, name="head")(inner(inp)))
    x = np.random.default_rng(6).uniform(-1, 1, (16, 4))
    tr = k2c.trace(model, x, "1,7,8")
    assert [r.keras_layer for r in tr.layers[1:]] == ["inner_a", "inner_b", "head"]
    assert all(r.stats.max_abs < 0.05 for r in tr.layers)
    assert np.allclose(tr["head"].keras, model.predict(x, verbose=0), atol=1e-6)


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("debug")
    model = root / "m.keras"
    random_dense_model([(6, "relu"), (3, "softmax")], n_in=4, seed=1).save(model)
    data = root / "x.npz"
    np.savez(data, x=np.random.default_rng(0).uniform(-1, 1, (30, 4)))
    return model, data


def test_cli_trace_exit_codes(tmp_path: Path, cli_files, capsys) -> None:
    model, data = cli_files
    code, out = run_cli(["trace", str(model), "--data", str(data), "--format", "1,3,6"], capsys)
    assert code == 0 and "dense_0" in out and "first divergence" not in out
    plot = tmp_path / "t.png"
    code, out = run_cli(
        ["trace", str(model), "--data", str(data), "--format", "1,3,6", "--threshold", "1", "--plot", str(plot)], capsys
    )
    assert code == 1 and "first divergence: layer 'dense_0'" in out and plot.read_bytes()[:4] == b"\x89PNG"
    code, out = run_cli(["trace", str(model), "--data", str(data), "--threshold", "1000"], capsys)
    assert code == 0 and "no layer exceeds max_lsb 1000" in out
    code, out = run_cli(["trace", str(model), "--data", str(data), "--metric", "worst"], capsys)
    assert code == 2 and "unknown --metric 'worst'" in out
    np.savez(tmp_path / "bad.npz", y=np.zeros(3))
    code, out = run_cli(["trace", str(model), "--data", str(tmp_path / "bad.npz")], capsys)
    assert code == 2 and "needs an array 'x'" in out and "Traceback" not in out


def test_cli_predict_writes_the_outputs(tmp_path: Path, cli_files, capsys) -> None:
    import keras2clash as k2c

    model, data = cli_files
    out = tmp_path / "pred.npz"
    code, text = run_cli(["predict", str(model), "--data", str(data), "--out", str(out), "-n", "7"], capsys)
    assert code == 0 and "7 samples" in text
    want = k2c.predict(model, np.load(data)["x"][:7])
    with np.load(out) as got:
        assert np.array_equal(got["raw"], want.raw) and np.array_equal(got["classes"], want.classes)
        assert np.array_equal(got["values"], want.values) and str(got["output_format"]) == "1,7,8"
    code, text = run_cli(["predict", str(model), "--data", str(data), "--out", str(out)], capsys)
    assert code == 2 and "--force" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.npz"]


@pytest.mark.parametrize("standalone", [True, False])
def test_trace_softmax_left_out_with_a_linear_layer_after_it(standalone) -> None:
    """A softmax (its own layer, or a Dense's activation) followed by a linear Activation,
    both fused into the Dense: with the softmax left out, the Keras side is still the logits."""
    import keras

    import keras2clash as k2c

    rng = np.random.default_rng(9)
    inp = keras.Input((4,))
    h = keras.layers.Dense(3, activation=None if standalone else "softmax", name="logits")(inp)
    if standalone:
        h = keras.layers.Softmax(name="soft")(h)
    model = keras.Model(inp, keras.layers.Activation("linear", name="lin")(h))
    model.set_weights([rng.normal(0, 1, w.shape).astype("float32") for w in model.get_weights()])
    x = rng.uniform(-1, 1, (12, 4))
    row = k2c.trace(model, x, "1,7,8", softmax="argmax")["logits"]
    kernel, bias = (w.numpy() for w in model.get_layer("logits").weights)
    assert np.allclose(row.keras, x.astype("float32") @ kernel + bias, atol=1e-5)
    assert row.stats.max_lsb < 4 and "softmax left out" in row.note
