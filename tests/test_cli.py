"""Bad input: one clear message naming the problem, exit code 2, no traceback, nothing written."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import keras2clash
from helpers import cli_env, needs_toolchain, run_cli
from keras2clash.design import DesignOptions
from keras2clash.errors import K2CError

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "examples" / "digits_dense"
IRIS = ROOT / "examples" / "iris"


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory) -> Path:
    import keras

    path = tmp_path_factory.mktemp("m") / "conv.keras"
    keras.Sequential(
        [
            keras.Input((4, 4, 4, 1)),
            keras.layers.Conv3D(2, 3, name="conv_a"),
            keras.layers.Flatten(),
            keras.layers.Dense(2),
        ]
    ).save(path)
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--format", "1,7"], "bad format '1,7'"),
        (["--format", "2,7,8"], "sign must be 1"),
        (["--format", "1,-9,8"], "0 bits; a format needs at least 1"),
        (["--format", "1,7,8,trn,clip"], "overflow 'clip' unknown"),
        (["--format", "ap_fixed<16,8,AP_RND_INF>"], "AP_RND_INF (rounds ties away from zero) is not built"),
        (["--format", "1,40,40"], "at most 64"),
        (["--parallelism", "1,2,3"], "3 value(s) given, the model has 2"),
        (["--parallelism", "4,1"], "parallelism 4 out of range for layer 'dense_0'"),
        (["--parallelism", "1,0"], "between 1 and 2"),
        (["--readable-weights"], "--readable-weights reads back the weight port's memories: add --writable-weights"),
    ],
)
def test_emit_option_errors(tmp_path: Path, tiny_model: Path, capsys, extra, message) -> None:
    out = tmp_path / "out"
    code, err = run_cli(["emit", str(tiny_model), "--out", str(out), *extra], capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert not out.exists()


def test_missing_model_file(tmp_path: Path, capsys) -> None:
    code, err = run_cli(["emit", str(tmp_path / "nope.keras"), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "nope.keras" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_corrupt_model_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.keras"
    bad.write_bytes(b"this is not a zip file")
    code, err = run_cli(["emit", str(bad), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "bad.keras" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_unsupported_layer_names_it(tmp_path: Path, conv_model: Path, capsys) -> None:
    code, err = run_cli(["emit", str(conv_model), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "Conv3D" in err and "conv_a" in err
    assert not (tmp_path / "o").exists()


def test_refuses_to_overwrite(tmp_path: Path, tiny_model: Path, capsys) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "precious").write_text("x")
    code, err = run_cli(["emit", str(tiny_model), "--out", str(out)], capsys)
    assert code == 2 and "not empty; use --force" in err
    assert (out / "precious").read_text() == "x"


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_model: Path) -> Path:
    out = tmp_path_factory.mktemp("p") / "net"
    import keras2clash as k2c

    return k2c.emit(tiny_model, "1,7,8", out)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "data file not found"),
        (lambda p: p.write_bytes(b"garbage"), "not a readable .npz"),
        (lambda p: np.savez(p, a=np.zeros(3)), "needs arrays 'x' and 'y'"),
        (lambda p: np.savez(p, x=np.zeros((5, 3)), y=np.zeros(5)), "the model expects (N, 4)"),
        (lambda p: np.savez(p, x=np.zeros((5, 4)), y=np.zeros(4)), "labels have shape (4,)"),
        (lambda p: np.savez(p, x=np.zeros((5, 4)), y=np.full(5, 7)), "classes 0..1"),
        (lambda p: np.savez(p, x=np.full((5, 4), np.nan), y=np.zeros(5)), "NaN"),
    ],
)
def test_bad_data_files(tmp_path: Path, project: Path, capsys, make, message) -> None:
    data = tmp_path / "d.npz"
    make(data)
    code, err = run_cli(["simulate", str(project), "--data", str(data)], capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_simulate_needs_a_project(tmp_path: Path, capsys) -> None:
    code, err = run_cli(["simulate", str(tmp_path), "--data", str(DIGITS / "test.npz")], capsys)
    assert code == 2 and "not an emitted keras2clash project" in err


def test_hdl_needs_a_project(tmp_path: Path, capsys) -> None:
    code, err = run_cli(["hdl", str(tmp_path), "--verilog"], capsys)
    assert code == 2 and "not an emitted keras2clash project" in err


def test_installed_console_script_prints_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "keras2clash"),
            "emit",
            str(DIGITS / "digits_dense.keras"),
            "--format",
            "1,7",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "bad format '1,7'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "message"), [(["emit"], "Missing argument"), (["bogus"], "No such command")])
def test_usage_errors_are_short(capsys, args, message) -> None:
    code, err = run_cli(args, capsys)
    assert code == 2 and message in err and "Traceback" not in err


@pytest.fixture(scope="module")
def tiny_project(tmp_path_factory, tiny_model: Path) -> Path:
    return keras2clash.emit(tiny_model, "1,7,8", tmp_path_factory.mktemp("p") / "net", show=False)


# --- checks before any work -------------------------------------------------------------------


@needs_toolchain
def test_run_checks_the_data_before_the_first_step(tmp_path: Path, capsys) -> None:
    data = tmp_path / "wrong.npz"
    np.savez(data, x=np.zeros((5, 3)), y=np.zeros(5))  # iris has 4 inputs
    work = tmp_path / "work"
    work.mkdir()
    t0 = time.monotonic()
    code, err = run_cli(["run", str(IRIS / "iris.keras"), "--data", str(data), "--out", str(work / "iris")], capsys)
    assert code == 2 and "the model expects (N, 4)" in err
    assert list(work.iterdir()) == []  # no project left behind
    assert time.monotonic() - t0 < 20  # no Clash run first (three HDLs take ~22 s on iris)


def test_report_rejects_a_bad_dsp_target_before_any_work(tiny_project: Path, capsys) -> None:
    before = sorted(p.relative_to(tiny_project) for p in tiny_project.rglob("*"))
    code, err = run_cli(["report", str(tiny_project), "--dsp", "altera"], capsys)
    assert code == 2 and "bad --dsp 'altera'" in err and "ice40" in err
    assert sorted(p.relative_to(tiny_project) for p in tiny_project.rglob("*")) == before  # Clash never ran


# --- labels, usage, extreme inputs, unsupported layers ----------------------------------------


@pytest.mark.parametrize("label", [-0.5, 0.5, 1.25, float("nan")])
def test_float_labels_are_not_truncated(tmp_path: Path, tiny_project: Path, capsys, label: float) -> None:
    from keras2clash.data import load_dataset

    data = tmp_path / "d.npz"
    np.savez(data, x=np.zeros((3, 4)), y=np.array([0.0, 1.0, label]))
    with pytest.raises(K2CError, match="labels must be whole class numbers"):
        load_dataset(data, (4,), 2)
    code, err = run_cli(["testbench", str(tiny_project), "--data", str(data)], capsys)
    assert code == 2 and "label 2 is" in err


def test_whole_float_labels_are_classes(tmp_path: Path) -> None:
    from keras2clash.data import load_dataset

    data = tmp_path / "d.npz"
    np.savez(data, x=np.zeros((3, 4)), y=np.array([0.0, 1.0, 1.0]))
    assert load_dataset(data, (4,), 2).y.tolist() == [0, 1, 1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["emit"], "Missing argument"),
        (["bogus"], "No such command 'bogus'"),
        (["emit", "m.keras", "--frmat", "1,7,8"], "No such option: --frmat"),
        (["simulate", "p", "--data", "d.npz", "-n", "0"], "Invalid value for '-n'"),
    ],
)
def test_usage_errors_are_one_error_line(capsys, args, message) -> None:
    code, err = run_cli(args, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err


@pytest.fixture()
def extreme_data(tmp_path: Path) -> Path:
    x = np.array([[1e308, -1e308, 3e38, 1e-320], [-1e300, 1e300, 0, 1], [5e38, -5e38, 1e20, -1e20]])
    path = tmp_path / "extreme.npz"
    np.savez(path, x=x, y=np.array([0, 1, 2]))
    return path


def _no_runtime_warnings(capsys, args: list[str]) -> tuple[int, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a leaked numpy warning fails the command
        code, err = run_cli(args, capsys)
    assert "RuntimeWarning" not in err and "Traceback" not in err, err
    return code, err


def test_no_runtime_warnings_on_extreme_inputs(tmp_path: Path, capsys, extreme_data: Path) -> None:
    from keras2clash.backend.project import load_project
    from keras2clash.quant.golden import quantize_inputs

    project = keras2clash.emit(IRIS / "iris.keras", "1,7,8", tmp_path / "iris", show=False)
    code, err = _no_runtime_warnings(capsys, ["testbench", str(project), "--data", str(extreme_data)])
    assert code == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        raw = quantize_inputs(load_project(project).plans, np.load(extreme_data)["x"])
    assert raw.tolist() == [[32767, -32768, 32767, 0], [-32768, 32767, 0, 256], [32767, -32768, 32767, -32768]]
    # profiling and calibrating need finite float activations: one clear error
    code, err = _no_runtime_warnings(capsys, ["profile", str(IRIS / "iris.keras"), "--data", str(extreme_data)])
    assert code == 2 and "overflows float64" in err
    code, err = _no_runtime_warnings(
        capsys, ["sweep", str(IRIS / "iris.keras"), "--data", str(extreme_data), "-f", "1,7,8"]
    )
    assert code == 0


def test_lambda_layer_is_an_unsupported_layer(tmp_path: Path, capsys) -> None:
    import keras

    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(3, name="d"),
            keras.layers.Lambda(lambda t: t * 2, name="double"),
            keras.layers.Dense(2),
        ]
    )
    keras_file = tmp_path / "lam.keras"
    model.save(keras_file)
    json_file = tmp_path / "lam.json"
    json_file.write_text(model.to_json())
    import pickle

    (tmp_path / "lam.pkl").write_bytes(pickle.dumps(model.get_weights()))
    for path in (keras_file, json_file):
        code, err = run_cli(["emit", str(path), "--out", str(tmp_path / "o")], capsys)
        assert code == 2, err
        assert "unsupported layer Lambda 'double'" in err and "safe_mode" not in err
        assert not (tmp_path / "o").exists()


def test_missing_model_file_does_not_import_tensorflow(tmp_path: Path) -> None:
    probe = (
        "import sys; from keras2clash.cli import main; sys.argv = ['keras2clash', 'emit', sys.argv[1], "
        "'--out', sys.argv[2]]\ntry:\n    main()\nexcept SystemExit as e:\n"
        "    print(e.code, 'tensorflow' in sys.modules, 'keras' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "nope.keras"), str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert "model file not found" in proc.stderr
    assert proc.stdout.split() == ["2", "False", "False"]


# --- the design options: one record for every command that takes them -------------------------

DESIGN_WORDS = [
    *("--format", "1,5,6", "--layer-format", "dense_0:o=1,3,6", "--input-format", "0,1,6", "--bits", "12"),
    *("--calibration", "c.npz", "--weights", "w.pkl", "--softmax", "argmax", "--weight-format", "same"),
]
HARDWARE_WORDS = ["--parallelism", "2,1", "--cycles", "1,2", "--pipeline", "auto@150", "--dsp-budget", "8"]
DESIGN = DesignOptions.of(
    "1,5,6",
    layer_formats={"dense_0": {"o": "1,3,6"}},
    input_format="0,1,6",
    bits=12,
    calibration="c.npz",
    weights="w.pkl",
    softmax="argmax",
    weight_format="same",
)


def test_every_command_gets_the_record_its_design_options_state(tmp_path: Path, monkeypatch, capsys) -> None:
    """emit and run hand api the record; trace and predict, debug (None for no option at all)."""
    from keras2clash import api, debug

    seen: list[DesignOptions | None] = []

    def emit(model, design, out, **kwargs):
        seen.append(design)
        return out

    def run(model, data, design, out, **kwargs):
        seen.append(design)
        return SimpleNamespace(all_exact=True)

    def golden(model, data, design, **kwargs):
        seen.append(design)
        raise K2CError("the record is all this test needs")

    monkeypatch.setattr(api, "emit", emit)
    monkeypatch.setattr(api, "run", run)
    monkeypatch.setattr(debug, "trace", golden)
    monkeypatch.setattr(debug, "predict", golden)
    data = tmp_path / "x.npz"
    np.savez(data, x=np.zeros((2, 4)))
    hardware = DesignOptions.of(DESIGN, parallelism=[2, 1], cycles=[1, 2], pipeline="auto@150", dsp_budget=8)
    for words, want in [
        (["emit", "m.keras", *DESIGN_WORDS, *HARDWARE_WORDS, "--lanes", "auto"], replace(hardware, lanes="auto")),
        (["run", "m.keras", "--data", data, *DESIGN_WORDS, *HARDWARE_WORDS], hardware),
        (["emit", "m.keras"], DesignOptions()),
        (["trace", "m.keras", "--data", data, *DESIGN_WORDS], DESIGN),
        (["predict", "m.keras", "--data", data, "--out", tmp_path / "p.npz", *DESIGN_WORDS], DESIGN),
        (["trace", "project", "--data", data, "--softmax", "argmax"], DesignOptions(softmax="argmax")),
        (["trace", "project", "--data", data], None),
        (["predict", "project", "--data", data, "--out", tmp_path / "p.npz"], None),
    ]:
        seen.clear()
        code, text = run_cli(words, capsys)
        assert code in (0, 2) and "Traceback" not in text, text
        assert seen == [want], words


def test_design_options_stand_once_in_each_command(capsys) -> None:
    """The knobs a command takes (emit and run every one; trace and predict
    those of the golden model's numbers), each once, with its own defaults."""
    import typer

    from keras2clash.cli import app

    command = typer.main.get_command(app)
    options = {
        name: {p.name: p.default for p in command.commands[name].params} for name in ("emit", "run", "trace", "predict")
    }
    numbers = {"format", "layer_format", "layer_formats", "input_format", "bits", "calibration", "softmax"}
    hardware = {"parallelism", "cycles", "pipeline", "dsp_budget", "lanes", "writable_weights", "readable_weights"}
    assert numbers | {"weights", "weight_format", "hls4ml_config"} | hardware <= set(options["emit"])
    assert set(options["emit"]) - set(options["run"]) == {"name"}
    for name in ("trace", "predict"):
        assert numbers | {"weights", "weight_format"} <= set(options[name])
        assert not hardware & set(options[name]) and "hls4ml_config" not in options[name]
        assert options[name]["format"] is None and options[name]["weight_format"] is None
    assert options["emit"]["format"] == options["run"]["format"] == "1,7,8"
    assert options["emit"]["weight_format"] == "fit" and "design" not in options["emit"]


def test_a_command_without_a_design_parameter_is_refused() -> None:
    from keras2clash.cli import params

    def knobless(model: Path) -> None:
        pass

    with pytest.raises(TypeError, match="knobless takes no 'design' parameter"):
        params.design_knobs(knobless)
