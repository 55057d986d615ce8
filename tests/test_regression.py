"""Regression models and autoencoders: no labels or real-valued targets,
scored by max absolute error and MSE against Keras and the targets, beside the bit-exact
count; the task detected from the labels and the output layer, or given."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import keras2clash as k2c
from helpers import needs_toolchain, run_cli
from keras2clash.data import detect_task, load_test_set
from keras2clash.report.comparison import Comparison, ErrorFigures, RungErrors, error_figures, render, to_markdown


@pytest.mark.parametrize(
    ("y", "n_out", "activation", "task"),
    [
        (np.array([0, 2, 1]), 3, "linear", "classifier"),  # integer labels
        (np.eye(3)[[0, 2, 1]], 3, "linear", "classifier"),  # one-hot rows
        (None, 3, "softmax", "classifier"),  # a softmax output is a classifier's (then labels are needed)
        (None, 8, "sigmoid", "regression"),  # an autoencoder with x only
        (np.array([0.5, 1.0, 2.0]), 1, "linear", "regression"),  # one output
        (np.array([[0, 1.0], [1.0, 1.0], [0, 0]]), 2, "linear", "regression"),  # 0/1 values, not one-hot
        (np.array([[0.2, 1.5], [1.0, -1.0], [0, 3]]), 2, "relu", "regression"),
    ],
)
def test_detect_task(y, n_out, activation, task) -> None:
    assert detect_task(y, n_out, activation) == task
    other = "regression" if task == "classifier" else "classifier"
    assert detect_task(y, n_out, activation, other) == other  # the flag decides


def test_load_test_set(tmp_path: Path) -> None:
    data = tmp_path / "d.npz"
    np.savez(data, x=np.ones((4, 3)), y=np.arange(8.0).reshape(4, 2, 1))
    ds = load_test_set(data, (3,), 2, "linear")
    assert ds.task == "regression" and ds.y.shape == (4, 2) and ds.y[3, 1] == 7.0
    assert ds.head(2).y.shape == (2, 2) and ds.head(2).task == "regression"
    np.savez(data, x=np.ones((4, 3)))
    ds = load_test_set(data, (3,), 3, "sigmoid")
    assert ds.task == "regression" and ds.y is None and len(ds.head(1)) == 1
    with pytest.raises(k2c.K2CError, match=r"needs arrays 'x' and 'y'.*--task regression"):
        load_test_set(data, (3,), 3, "softmax")
    np.savez(data, x=np.ones((4, 3)), y=np.ones((4, 5)))
    with pytest.raises(k2c.K2CError, match=r"targets have shape \(4, 5\), expected \(4, 2\)"):
        load_test_set(data, (3,), 2, "linear")
    np.savez(data, x=np.ones((4, 3)), y=np.array([[0.5, np.nan]] * 4))
    with pytest.raises(k2c.K2CError, match="targets contain NaN"):
        load_test_set(data, (3,), 2, "linear")
    with pytest.raises(k2c.K2CError, match="unknown task 'clustering'"):
        load_test_set(data, (3,), 2, "linear", "clustering")


def test_error_figures() -> None:
    got = error_figures(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 2.5], [2.0, 4.0]]))
    assert got == ErrorFigures(max_abs=1.0, mse=(0.25 + 1.0) / 4)
    assert error_figures(np.zeros(2), np.array([0.0, np.nan])).max_abs == np.inf


def _regression_comparison(targets: bool) -> Comparison:
    def rung(keras: float | None, target: float) -> RungErrors:
        return RungErrors(
            None if keras is None else ErrorFigures(keras, keras**2),
            ErrorFigures(target, target**2) if targets else None,
        )

    return Comparison(
        model="reg",
        format="1,7,8",
        parallelism=[1, 1],
        cycles=[1, 1],
        samples=10,
        keras_float_accuracy=None,
        keras_rounded_accuracy=None,
        golden_accuracy=None,
        sim_accuracy=None,
        bit_exact=10,
        class_match=None,
        first_latency=12,
        interval=4.0,
        multipliers=9,
        task="regression",
        keras_float_errors=rung(None, 0.5),
        keras_rounded_errors=rung(0.001953, 0.5),
        golden_errors=rung(0.0123, 0.51),
        sim_errors=rung(0.0123, 0.51),
    )


def test_the_table_adapts_to_regression() -> None:
    comp = _regression_comparison(targets=True)
    assert comp.columns() == ("rung", "max |err| vs Keras", "MSE vs Keras", "MSE vs targets", "note")
    rows = comp.rows()
    assert rows[0] == ("Keras float", "-", "-", "0.25", "float32 reference")
    assert rows[2][:4] == ("golden model 1,7,8", "0.0123", "0.0001513", "0.2601")
    assert rows[3][-1] == "bit-exact vs golden: 10/10"
    console = Console(record=True, width=140)
    render(comp, console)
    text = console.export_text()
    assert "MSE vs targets" in text and "accuracy" not in text and "BIT-EXACT" in text
    assert to_markdown(comp).splitlines()[:2] == [
        "| rung | max |err| vs Keras | MSE vs Keras | MSE vs targets | note |",
        "|---|---:|---:|---:|---|",
    ]
    no_targets = _regression_comparison(targets=False)
    assert no_targets.columns() == ("rung", "max |err| vs Keras", "MSE vs Keras", "note")
    assert all(len(row) == 4 for row in no_targets.rows())
    assert '"task": "regression"' in comp.to_json() and '"mse": 0.2601' in comp.to_json()


@pytest.mark.slow  # ~20 s (a ghc build); the autoencoder below is the unmarked end-to-end check
@pytest.mark.toolchain
@needs_toolchain
def test_a_trained_regression_model_in_clash(tmp_path: Path) -> None:
    """A Dense regression net trained for a few epochs on y = sin(2 x0) + x1*x2/2: the
    Clash simulation equals the golden model on every sample; the errors against Keras are
    the format's, against the targets the model's own."""
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (600, 3)).astype("float32")
    y = (np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] * x[:, 2])[:, None].astype("float32")
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(12, activation="relu", name="hidden"),
            keras.layers.Dense(1, name="value"),
        ],
        name="regress",
    )
    model.compile(optimizer=keras.optimizers.Adam(0.03), loss="mse")
    model.fit(x[:500], y[:500], epochs=3, batch_size=32, verbose=0)
    np.savez(tmp_path / "test.npz", x=x[500:], y=y[500:])
    project = k2c.emit(model, "1,5,10", tmp_path / "net", show=False)
    comp = k2c.simulate(project, tmp_path / "test.npz", show=False)
    keras_mse = float(np.mean((model.predict(x[500:], verbose=0) - y[500:]) ** 2))
    assert comp.task == "regression" and comp.bit_exact == comp.samples == 100
    assert comp.sim_errors == comp.golden_errors and comp.golden_accuracy is None
    assert comp.keras_float_errors.vs_targets.mse == pytest.approx(keras_mse, rel=1e-5)
    assert comp.keras_float_errors.vs_targets.mse < 0.2  # it learned something
    assert comp.keras_rounded_errors.vs_keras.max_abs <= 2**-11  # half an LSB
    assert 0 < comp.golden_errors.vs_keras.max_abs < 0.02
    assert comp.golden_errors.vs_targets.mse == pytest.approx(keras_mse, abs=0.01)


@pytest.mark.toolchain
@needs_toolchain
def test_an_autoencoder_without_labels_in_clash(tmp_path: Path, capsys) -> None:
    """8 -> 3 -> 8 (sigmoid), test data without y: compared with Keras only; the CLI prints
    the adapted table and exits 0 (bit-exact); with the inputs as targets, the
    reconstruction error is there too."""
    import keras

    rng = np.random.default_rng(1)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(3, activation="relu", name="code"),
            keras.layers.Dense(8, activation="sigmoid", name="decoded"),
        ],
        name="autoencoder",
    )
    model.set_weights([rng.normal(0, 0.8, w.shape).astype("float32") for w in model.get_weights()])
    x = rng.uniform(0, 1, (40, 8))
    np.savez(tmp_path / "x.npz", x=x)
    project = k2c.emit(model, "1,4,9", tmp_path / "net", show=False)
    comp = k2c.simulate(project, tmp_path / "x.npz", show=False)
    assert comp.task == "regression" and comp.bit_exact == 40 and not comp.has_targets
    gold = k2c.predict(project, x)
    assert comp.golden_errors.vs_keras == error_figures(gold.values, model.predict(x, verbose=0))
    assert comp.golden_errors.vs_keras.max_abs < 0.05
    code, out = run_cli(["simulate", str(project), "--data", str(tmp_path / "x.npz")], capsys)
    assert code == 0 and "max |err| vs Keras" in out and "40/40" in out and "accuracy" not in out
    code, out = run_cli(["simulate", str(project), "--data", str(tmp_path / "x.npz"), "--task", "classifier"], capsys)
    assert code == 2 and "needs arrays 'x' and 'y'" in out
    np.savez(tmp_path / "xy.npz", x=x, y=x)  # reconstruction targets
    comp = k2c.simulate(project, tmp_path / "xy.npz", show=False)
    assert comp.bit_exact == 40 and comp.golden_errors.vs_targets == error_figures(gold.values, x)
    assert comp.keras_float_errors.vs_targets == error_figures(model.predict(x, verbose=0), x)


def test_testbench_of_an_autoencoder(tmp_path: Path) -> None:
    """The HDL testbench (`keras2clash testbench`, then `rtlsim`) takes a test set without
    labels; real targets are kept beside the expected outputs, class labels as labels."""
    from helpers import random_dense_model
    from keras2clash.verify.testbench import write_testbench

    model = random_dense_model([(3, "relu"), (6, "sigmoid")], n_in=6, seed=7)
    project = k2c.emit(model, "1,4,9", tmp_path / "net", show=False)
    x = np.random.default_rng(8).uniform(0, 1, (5, 6))
    np.savez(tmp_path / "x.npz", x=x)
    tb = write_testbench(project, tmp_path / "x.npz")
    with np.load(tb.directory / "golden.npz") as saved:
        assert sorted(saved.files) == ["classes", "expected", "x_raw"]
        assert np.array_equal(saved["expected"], k2c.predict(project, x).raw)
    np.savez(tmp_path / "xy.npz", x=x, y=x)
    tb = write_testbench(project, tmp_path / "xy.npz")
    with np.load(tb.directory / "golden.npz") as saved:
        assert np.array_equal(saved["targets"], x) and "labels" not in saved.files
