"""Precision tools: format ranges, per-layer formats (CLI and config), profiling, automatic
formats, the bit-width sweep, parameter overflow reports, and the Clash simulation
confirming the golden model with mixed per-layer formats."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_cli import run_cli

import keras2clash as k2c
from helpers import needs_toolchain, random_dense_model
from keras2clash.backend.project import load_project
from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerFormats, accumulator_format
from keras2clash.hw.planner import make_plan
from keras2clash.quant import autoformat, golden, profile
from keras2clash.quant.autoformat import resolve_formats
from keras2clash.quant.formats import parse_format as F
from keras2clash.quant.layerformats import load_config, parse_layer_format, resolve_user_formats
from keras2clash.report.sweep import format_range, parse_format_specs, sweep

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "examples" / "digits_dense"
THESIS = "1,2,3:1,16,17"


# ---------------------------------------------------------------- format lists and ranges


def test_thesis_range_is_fifteen_formats() -> None:
    formats = parse_format_specs([THESIS])
    assert [str(f) for f in formats] == [f"1,{i},{i + 1}" for i in range(2, 17)]
    assert [f.bits for f in formats] == list(range(6, 35, 2))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1,7,1:1,7,4", ["1,7,1", "1,7,2", "1,7,3", "1,7,4"]),
        ("1,2,3:1,4,6", ["1,2,3", "1,3,4", "1,4,5", "1,4,6"]),  # int stops, frac goes on
        ("1,4,4:1,2,4", ["1,4,4", "1,3,4", "1,2,4"]),  # downwards
        ("1,5,6;1,7,8;1,5,6", ["1,5,6", "1,7,8"]),  # list, duplicate dropped
        ("1,5,6", ["1,5,6"]),
    ],
)
def test_format_specs(spec: str, expected: list[str]) -> None:
    assert [str(f) for f in parse_format_specs([spec])] == expected


def test_repeated_formats_and_auto() -> None:
    assert [str(f) for f in parse_format_specs(["1,5,6", "1,7,8", "auto"])] == ["1,5,6", "1,7,8", "auto"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [("1,2,3:1,4", "bad format '1,4'"), ("1,2,3:1,4,5:1,6,7", "FIRST:LAST"), ("", "no formats")],
)
def test_bad_format_specs(spec: str, message: str) -> None:
    with pytest.raises(K2CError, match=message):
        parse_format_specs([spec])


def test_range_endpoints_need_same_sign() -> None:
    with pytest.raises(K2CError):
        format_range(F("1,2,3"), F("0,2,3"))


# ---------------------------------------------------------------- per-layer format syntax


def test_layer_format_cli_syntax() -> None:
    name, lf = parse_layer_format("dense_1:w=1,3,12:b=1,7,8:o=1,5,10:acc=24")
    assert name == "dense_1"
    assert lf == LayerFormats(F("1,3,12"), F("1,7,8"), F("1,5,10"), 24)
    assert parse_layer_format("d:1,5,10") == ("d", LayerFormats(F("1,5,10"), F("1,5,10"), F("1,5,10")))
    assert parse_layer_format("d:all=1,5,10:b=1,9,2:acc=exact")[1] == LayerFormats(
        F("1,5,10"), F("1,9,2"), F("1,5,10"), None
    )
    assert parse_layer_format("d:weights=1,1,1:result=1,2,2:accum=9")[1] == LayerFormats(
        weight=F("1,1,1"), output=F("1,2,2"), accumulator_bits=9
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dense_1", "expected NAME:"),
        ("dense_1:x=1,2,3", "unknown field 'x'"),
        ("dense_1:w=1,2", "bad format '1,2'"),
        ("dense_1:w1,2,3:b=1,2,3", "KEY=VALUE"),
        ("dense_1:acc=big", "accumulator is a width"),
    ],
)
def test_bad_layer_format(text: str, message: str) -> None:
    with pytest.raises(K2CError, match=message):
        parse_layer_format(text)


def test_json_config_and_cli_refinement(tmp_path: Path) -> None:
    cfg = tmp_path / "formats.json"
    cfg.write_text(
        json.dumps(
            {
                "default": "1,5,6",
                "input": [1, 1, 6],
                "layers": {
                    "dense_0": {"weight": "1,2,9", "bias": "1,5,4", "output": "1,4,5", "accumulator": 20},
                    "dense_1": "1,3,4",
                },
            }
        )
    )
    config = resolve_user_formats(cfg, ["dense_0:o=1,6,3", "dense_1:acc=30"], None)
    assert config.default == F("1,5,6") and config.input == F("1,1,6")
    assert config.layers["dense_0"] == LayerFormats(F("1,2,9"), F("1,5,4"), F("1,6,3"), 20)
    assert config.layers["dense_1"] == LayerFormats(F("1,3,4"), F("1,3,4"), F("1,3,4"), 30)
    assert resolve_user_formats(cfg, None, "1,2,2").input == F("1,2,2")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"layerz": {}}', "unknown key"),
        ('{"layers": {"d": {"w": [1, 2]}}}', "three integers"),
    ],
)
def test_bad_config_files(tmp_path: Path, content: str, message: str) -> None:
    cfg = tmp_path / "f.json"
    cfg.write_text(content)
    with pytest.raises(K2CError, match=message):
        load_config(cfg)


def test_yaml_config(tmp_path: Path) -> None:
    cfg = tmp_path / "f.yaml"
    cfg.write_text("layers:\n  dense_0:\n    weight: 1,2,9\n    accum: 20\n")
    try:
        import yaml  # noqa: F401
    except ImportError:
        with pytest.raises(K2CError, match="PyYAML"):
            load_config(cfg)
        return
    assert load_config(cfg).layers["dense_0"] == LayerFormats(weight=F("1,2,9"), accumulator_bits=20)


def test_unknown_layer_is_refused() -> None:
    model = random_dense_model([(3, "relu"), (2, "linear")], n_in=4, seed=1)
    from keras2clash.frontend.convert import to_ir

    formats = resolve_formats(to_ir(model), "1,7,8", layer_formats={"nope": "1,2,3"})
    with pytest.raises(K2CError, match="unknown layer"):
        make_plan(to_ir(model), formats.default, layer_formats=formats.layers)


# ---------------------------------------------------------------- the digits network


@pytest.fixture(scope="module")
def digits():
    """(keras model, IR, test x, test y, calibration x, calibration y): calibration is the
    training split, rebuilt exactly as examples/digits_dense/train.py makes it."""
    from keras2clash.frontend.convert import load_keras_model, to_ir

    sys.path.insert(0, str(DIGITS))
    try:
        from train import digits_split
    finally:
        sys.path.remove(str(DIGITS))
    x_cal, x_test, y_cal, y_test = digits_split()
    data = np.load(DIGITS / "test.npz")
    assert np.array_equal(data["x"], x_test) and np.array_equal(data["y"], y_test)
    model = load_keras_model(DIGITS / "digits_dense.keras")
    return model, to_ir(model), x_test.astype(np.float64), y_test, x_cal.astype(np.float64), y_cal


def test_float_forward_equals_keras(digits) -> None:
    model, ir, x, *_ = digits
    traces = profile.float_forward(ir, x)
    keras_out = model.predict(x.astype(np.float32), verbose=0)
    assert np.max(np.abs(traces[-1].out - keras_out)) < 1e-5
    assert [t.name for t in traces] == ["dense_1", "dense_2", "dense_3"]
    assert np.all(traces[0].out == np.maximum(traces[0].pre, 0))


@pytest.mark.parametrize(
    ("values", "bits"),
    [([1.0], 1), ([-1.0], 0), ([0.99], 0), ([-1.5, 0.2], 1), ([0.0], 0), ([24.78], 5), ([-40.56], 6)],
)
def test_int_bits_needed(values, bits) -> None:
    assert profile.int_bits_needed(np.array(values)) == bits


def test_fit_int_bits_uses_the_asymmetric_range() -> None:
    assert autoformat.fit_int_bits(np.array([1.0]), 8) == (1, 0)  # 1.0 does not fit 1,0,7
    assert autoformat.fit_int_bits(np.array([-1.0]), 8) == (0, 0)  # -1.0 does
    assert autoformat.fit_int_bits(np.array([0.999]), 8) == (1, 0)  # rounds up to 1.0
    assert autoformat.fit_int_bits(np.array([1000.0]), 6) == (5, 1)  # nothing fits: widest, reported


def test_profile_outputs(digits, tmp_path: Path) -> None:
    _, ir, x, *_ = digits
    prof = profile.profile(ir, x, "digits_dense")
    kinds = {(s.layer, s.kind): s for s in prof.stats}
    assert kinds[("input", "input")].int_bits == 1  # pixels up to 1.0
    assert kinds[("dense_3", "output")].max <= 1.0  # sigmoid
    w = ir[1]["weights"]["kernel"]
    assert kinds[("dense_2", "weights")].abs_max == pytest.approx(np.abs(w).max())
    paths = profile.write_outputs(prof, tmp_path / "p")
    assert all(p.stat().st_size > 0 for p in paths.values())
    assert "dense_2" in paths["csv"].read_text()


def test_profile_cli(tmp_path: Path, capsys) -> None:
    code, out = run_cli(
        [
            "profile",
            str(DIGITS / "digits_dense.keras"),
            "--data",
            str(DIGITS / "test.npz"),
            "--out-dir",
            str(tmp_path / "p"),
        ],
        capsys,
    )
    assert code == 0, out
    assert (tmp_path / "p" / "profile.png").stat().st_size > 0


def test_auto_formats_saturate_nothing(digits) -> None:
    _, ir, _, _, x_cal, y_cal = digits
    report = autoformat.auto_formats(ir, x_cal, 12, y_cal)
    assert report.auto.saturated == 0
    assert report.auto.input_fmt == F("1,1,10")  # pixels reach 1.0
    assert report.auto.layers["dense_2"].output == F("1,5,6")  # relu outputs up to ~25
    assert report.auto.layers["dense_1"].weight == F("1,2,9")  # |w| up to 2.1
    assert set(report.uniform_candidates) == {f"1,{i},{11 - i}" for i in range(12)}


def test_auto_12_bits_at_least_best_uniform_digits(digits) -> None:
    """Calibrated on the training split; the best uniform 12-bit format is chosen on the same
    data (highest golden accuracy, then fewest saturations); both judged on the test set.
    The auto formats also reproduce the float network: same test accuracy as Keras, and at
    least as many test predictions equal to Keras' as any uniform 12-bit format."""
    model, ir, x, y, x_cal, y_cal = digits
    report = autoformat.auto_formats(ir, x_cal, 12, y_cal)
    auto = report.auto
    auto_test = autoformat.golden_accuracy(ir, x, y, auto.input_fmt, auto.layers, auto.input_fmt)
    assert auto_test >= autoformat.golden_accuracy(ir, x, y, report.uniform)
    keras_pred = np.argmax(model.predict(x.astype(np.float32), verbose=0), axis=1)
    assert auto_test == pytest.approx(np.mean(keras_pred == y))

    def agreement(default, layers=None, input_fmt=None) -> int:
        plans = make_plan(ir, default, layer_formats=layers, input_fmt=input_fmt)
        params = golden.quantize_params(plans, ir)
        pred = golden.predict_classes(golden.run(plans, params, golden.quantize_inputs(plans, x)))
        return int(np.sum(pred == keras_pred))

    best_uniform = max(agreement(autoformat.split(12, i)) for i in range(12))
    assert agreement(auto.input_fmt, auto.layers, auto.input_fmt) >= best_uniform


def _rescaled_digits(model):
    """The digits network with dense_1 scaled by 64 and dense_2's kernel by 1/64: the same
    function (relu is positively homogeneous), but ranges no uniform format covers well."""
    import keras

    clone = keras.models.clone_model(model)
    w = [np.array(a) for a in model.get_weights()]
    w[0], w[1], w[2] = w[0] * 64, w[1] * 64, w[2] / 64
    clone.set_weights(w)
    return clone


def test_auto_beats_every_uniform_format_when_ranges_differ(digits) -> None:
    from keras2clash.frontend.convert import to_ir

    model, _, x, y, x_cal, y_cal = digits
    ir = to_ir(_rescaled_digits(model))
    report = autoformat.auto_formats(ir, x_cal, 12, y_cal)
    auto_test = autoformat.golden_accuracy(ir, x, y, report.auto.input_fmt, report.auto.layers, report.auto.input_fmt)
    uniform_test = [autoformat.golden_accuracy(ir, x, y, autoformat.split(12, i)) for i in range(12)]
    assert auto_test >= max(uniform_test) + 0.02  # hindsight-best uniform on the test set itself
    assert report.auto.saturated == 0 and report.uniform_saturated > 0


def test_uniform_choice_gives_a_merge_its_output_format_only(monkeypatch) -> None:
    """When a uniform format beats the per-layer choice, each layer keeps the fields it has:
    a merge (no weights, no accumulator) gets an output format only, so the plan builds."""
    import keras

    from keras2clash.frontend.convert import to_ir

    inp = keras.Input((4,))
    hidden = keras.layers.Dense(6, activation="relu", name="hidden")(inp)
    left = keras.layers.Dense(5, name="left")(hidden)
    right = keras.layers.Dense(5, name="right")(hidden)
    joined = keras.layers.Add(name="add")([left, right])
    model = keras.Model(inp, keras.layers.Dense(3, name="out")(joined))
    ir = to_ir(model)
    x = np.random.default_rng(0).uniform(-1, 1, (32, 4))
    y = np.zeros(32, dtype=int)

    def uniform_wins(ir, x, y, default, layers=None, input_fmt=None) -> float:
        return 0.5 if layers else 1.0

    monkeypatch.setattr(autoformat, "golden_accuracy", uniform_wins)
    report = autoformat.auto_formats(ir, x, 10, y)
    chosen = report.chosen
    assert chosen is not report.auto
    assert chosen.layers["add"] == LayerFormats(output=report.uniform)
    assert chosen.layers["left"] == LayerFormats(weight=report.uniform, bias=report.uniform, output=report.uniform)
    plans = make_plan(ir, report.uniform, layer_formats=chosen.layers, input_fmt=chosen.input_fmt)
    assert [p.out_fmt for p in plans if p.name == "add"] == [report.uniform]


# ---------------------------------------------------------------- the sweep


def test_digits_sweep_thesis_formats_under_60_s(tmp_path: Path, capsys) -> None:
    started = time.perf_counter()
    code, out = run_cli(
        [
            "sweep",
            str(DIGITS / "digits_dense.keras"),
            "--data",
            str(DIGITS / "test.npz"),
            "--formats",
            THESIS,
            "--auto",
            "--out-dir",
            str(tmp_path / "s"),
        ],
        capsys,
    )
    seconds = time.perf_counter() - started
    assert code == 0, out
    assert seconds < 60
    rows = json.loads((tmp_path / "s" / "sweep.json").read_text())["rows"]
    uniform = {r["label"]: r for r in rows if r["uniform"]}
    assert list(uniform) == [f"1,{i},{i + 1}" for i in range(2, 17)]
    assert len(rows) == 30  # and an auto row per width
    at_16 = uniform["1,7,8"]
    assert at_16["golden"] >= at_16["keras_rounded"] - 0.01
    assert at_16["saturated_params"] == 0
    for kind in ("md", "csv", "png"):
        assert (tmp_path / "s" / f"sweep.{kind}").stat().st_size > 0
    assert "1,7,8" in (tmp_path / "s" / "sweep.md").read_text()


@pytest.mark.parametrize("example", ["resnet_digits", "inception_digits"])
def test_sweep_of_merge_layers(example: str) -> None:
    """Add and Concatenate outputs count among the saturated values like any layer output."""
    folder = ROOT / "examples" / example
    result = sweep(folder / f"{example}.keras", folder / "test.npz", ["1,2,3;1,7,8"], limit=20, show=False)
    assert [r.label for r in result.rows] == ["1,2,3", "1,7,8"]
    assert result.rows[0].saturated_values > result.rows[1].saturated_values == 0


def test_sweep_cli_errors(tmp_path: Path, capsys) -> None:
    args = ["sweep", str(DIGITS / "digits_dense.keras"), "--data", str(DIGITS / "test.npz")]
    code, err = run_cli([*args, "--formats", "auto"], capsys)
    assert code == 2 and "needs --bits" in err
    code, err = run_cli([*args, "--formats", "1,5,6", "--confirm-bits", "9"], capsys)
    assert code == 2 and "no format of that width" in err


# ---------------------------------------------------------------- overflow is reported


def test_parameter_overflow_in_manifest(tmp_path: Path, capsys) -> None:
    model = random_dense_model([(4, "relu"), (2, "linear")], n_in=3, seed=9, scale=3.0)
    project = k2c.emit(model, "1,1,6", tmp_path / "net", weight_format="same")  # `fit` would hold them all
    precision = json.loads((project / "manifest.json").read_text())["precision"]
    rows = {r["layer"]: r for r in precision["parameter_saturation"]}
    kernel = np.asarray(model.get_weights()[0])
    expected = int(np.sum((kernel >= 2 - 2**-7) | (kernel < -2 - 2**-7)))
    assert expected > 0 and rows["dense_0"]["weights"] == expected
    assert rows["dense_0"]["weights_worst"] > 0.5
    assert "do not fit their format" in capsys.readouterr().err
    assert precision["formats"]["default"] == "1,1,6"


def test_emit_auto_needs_bits_and_calibration(tmp_path: Path, capsys) -> None:
    model = DIGITS / "digits_dense.keras"
    code, err = run_cli(["emit", str(model), "--format", "auto", "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and "--bits" in err
    code, err = run_cli(["emit", str(model), "--format", "auto", "--bits", "12", "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and "--calibration" in err
    code, err = run_cli(["emit", str(model), "--layer-format", "dense_9:1,2,3", "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and "unknown layer" in err and "dense_9" in err


def test_emit_auto_writes_the_chosen_formats(tmp_path: Path, capsys) -> None:
    # Inputs only (no labels): the per-layer choice is used as it is.
    np.savez(tmp_path / "calib.npz", x=np.load(DIGITS / "test.npz")["x"])
    code, err = run_cli(
        [
            "emit",
            str(DIGITS / "digits_dense.keras"),
            "--format",
            "auto",
            "--bits",
            "12",
            "--calibration",
            str(tmp_path / "calib.npz"),
            "--out",
            str(tmp_path / "a"),
        ],
        capsys,
    )
    assert code == 0, err
    plans = {p.name: p for p in load_project(tmp_path / "a").plans}
    assert plans["dense_2"].out_fmt == F("1,5,6") and plans["dense_1"].in_fmt == F("1,1,10")
    assert all(p.w_fmt.bits == 12 and p.b_fmt.bits == 12 for p in plans.values())
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["precision"]["formats"]["auto"]["auto"]["bits"] == 12
    assert manifest["precision"]["formats"]["auto"]["kept_uniform"] is False


def test_emit_auto_keeps_a_better_uniform_format(tmp_path: Path, capsys) -> None:
    # With labels, the test set as calibration: 1,8,3 beats the per-layer choice there.
    code, err = run_cli(
        [
            "emit",
            str(DIGITS / "digits_dense.keras"),
            "--format",
            "auto",
            "--bits",
            "12",
            "--calibration",
            str(DIGITS / "test.npz"),
            "--out",
            str(tmp_path / "a"),
        ],
        capsys,
    )
    assert code == 0, err
    assert "auto keeps the uniform format 1,8,3" in err
    plans = load_project(tmp_path / "a").plans
    assert {(p.in_fmt, p.out_fmt) for p in plans} == {(F("1,8,3"), F("1,8,3"))}


# ---------------------------------------------------------------- Clash simulation


@needs_toolchain
@pytest.mark.toolchain
def test_sweep_confirms_golden_in_clash_at_6_12_16_bits(tmp_path: Path) -> None:
    result = sweep(
        DIGITS / "digits_dense.keras",
        DIGITS / "test.npz",
        ["1,2,3;1,5,6;1,7,8"],
        confirm_bits="6,12,16",
        out_dir=tmp_path / "s",
        show=False,
    )
    confirmed = [r for r in result.rows if r.bit_exact is not None]
    assert [r.label for r in confirmed] == ["1,2,3", "1,5,6", "1,7,8"]
    for r in confirmed:
        assert r.bit_exact == r.sim_samples == 360
        assert r.sim_accuracy == r.golden
    assert (tmp_path / "s" / "projects" / "1_7_8" / "manifest.json").is_file()


@needs_toolchain
@pytest.mark.toolchain
def test_mixed_per_layer_formats_are_bit_exact_in_clash(tmp_path: Path, capsys) -> None:
    """Weights, bias, output and accumulator formats differ per layer; two accumulators are
    narrow and saturate (one of them per chunk, cycles 3), the input has its own format."""
    model = random_dense_model([(6, "relu"), (5, "sigmoid"), (3, "linear")], n_in=8, seed=3, scale=1.5)
    model_path = tmp_path / "m.keras"
    model.save(model_path)
    cfg = tmp_path / "formats.json"
    cfg.write_text(
        json.dumps(
            {
                "input": "1,3,6",
                "layers": {
                    "dense_0": {"w": "1,2,9", "b": "1,5,4", "o": "1,4,5", "acc": 18},
                    "dense_1": {"w": "1,3,4", "b": "1,1,10", "o": "1,1,6"},
                },
            }
        )
    )
    out = tmp_path / "net"
    code, err = run_cli(
        [
            "emit",
            str(model_path),
            "--out",
            str(out),
            "--layer-formats",
            str(cfg),
            "--layer-format",
            "dense_2:w=1,1,12:b=1,6,2:o=1,5,8:acc=22",
            "--parallelism",
            "3,2,1",
            "--cycles",
            "3,2,1",
        ],
        capsys,
    )
    assert code == 0, err
    plans = {p.name: p for p in load_project(out).plans}
    assert plans["dense_0"].in_fmt == F("1,3,6") and plans["dense_1"].in_fmt == F("1,4,5")
    assert not plans["dense_0"].params.exact_accumulator and plans["dense_0"].acc_fmt.bits == 18
    assert not plans["dense_2"].params.exact_accumulator and plans["dense_2"].b_fmt == F("1,6,2")

    rng = np.random.default_rng(1)
    x = rng.normal(0, 4, (80, 8)).astype("float32")
    x[1], x[2] = 1e6, -1e6
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=rng.integers(0, 3, 80))
    # the narrow accumulators really saturate: the exact-accumulator golden model differs
    project = load_project(out)
    import dataclasses

    exact = [
        dataclasses.replace(
            p,
            acc_fmt=accumulator_format(p.in_fmt, p.w_fmt, p.window, p.b_fmt),
            params=dataclasses.replace(p.params, exact_accumulator=True),
        )
        if p.is_compute
        else p
        for p in project.plans
    ]
    x_raw = golden.quantize_inputs(project.plans, x)
    differ = np.any(
        golden.run(project.plans, project.params, x_raw) != golden.run(exact, project.params, x_raw), axis=1
    )
    assert differ.sum() > 10

    comp = k2c.simulate(out, data, keras=False, show=False)
    assert comp.bit_exact == comp.samples == 80


def test_auto_12_bits_never_below_any_uniform_on_its_calibration_data(digits) -> None:
    """`run --format auto` calibrates on the data it reports on: there the chosen formats are
    at least as accurate as every uniform 12-bit format (on the data it reports on),
    because auto keeps a uniform format when one does better on the calibration data."""
    _, ir, x, y, _, _ = digits
    report = autoformat.auto_formats(ir, x, 12, y)
    chosen = report.chosen
    chosen_acc = autoformat.golden_accuracy(ir, x, y, chosen.input_fmt, chosen.layers, chosen.input_fmt)
    every_uniform = [autoformat.golden_accuracy(ir, x, y, autoformat.split(12, i)) for i in range(12)]
    assert chosen_acc >= max(every_uniform)
    assert chosen_acc == max(report.auto_accuracy, report.uniform_accuracy)
