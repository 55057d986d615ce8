"""Bad input: one clear message naming the problem, exit code 2, no traceback, nothing written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest


from helpers import run_cli, random_dense_model

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "examples" / "digits_dense"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("m") / "tiny.keras"
    random_dense_model([(3, "relu"), (2, "sigmoid")], n_in=4, seed=2).save(path)
    return path


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory) -> Path:
    import keras

    path = tmp_path_factory.mktemp("m") / "conv.keras"
    keras.Sequential([keras.Input((4, 4, 4, 1)), keras.layers.Conv3D(2, 3, name="conv_a"),
                      keras.layers.Flatten(), keras.layers.Dense(2)]).save(path)
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
        [str(ROOT / ".venv" / "bin" / "keras2clash"), "emit", str(DIGITS / "digits_dense.keras"),
         "--format", "1,7", "--out", str(tmp_path / "o")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "bad format '1,7'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "message"), [(["emit"], "Missing argument"), (["bogus"], "No such command")])
def test_usage_errors_are_short(capsys, args, message) -> None:
    code, err = run_cli(args, capsys)
    assert code == 2 and message in err and "Traceback" not in err
