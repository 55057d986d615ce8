"""`--weight-format fit` (the default): each layer's weights in the format's width with the
integer bits their largest value needs (autoformat.fitted_weights), under any format set by
hand; `same`: the layer's format. The Clash simulation still equals the golden model bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import assert_clash_matches_golden, needs_toolchain, random_dense_model, run_cli
from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerFormats
from keras2clash.quant.formats import parse_format


def _model(tmp_path: Path) -> Path:
    """dense_0's largest |weight| lies in [2, 4), dense_1's below 0.5 (scaled by hand)."""
    model = random_dense_model([(6, "relu"), (3, "linear")], n_in=5, seed=3, scale=0.2)
    k0, b0, k1, b1 = model.get_weights()
    k0 = k0 / np.abs(k0).max() * 3.1
    k1 = k1 / np.abs(k1).max() * 0.45
    model.set_weights([k0, b0, k1, b1])
    path = tmp_path / "m.keras"
    model.save(path)
    return path


def test_fit_gives_each_layer_the_integer_bits_its_weights_need(tmp_path: Path) -> None:
    from keras2clash.network import load_network

    plans = {p.name: p for p in load_network(_model(tmp_path), "1,7,8", weight_format="fit").plans}
    assert str(plans["dense_0"].w_fmt) == str(parse_format("1,2,13"))  # 3.1 < 4
    # 0.45 < 0.5, but never a negative integer field: its container would be 17 bits wide
    assert str(plans["dense_1"].w_fmt) == str(parse_format("1,0,15"))
    for plan in plans.values():  # biases, outputs and the input keep the format
        assert str(plan.b_fmt) == str(plan.out_fmt) == str(plan.in_fmt) == "1,7,8"
    same = {p.name: p for p in load_network(_model(tmp_path), "1,7,8", weight_format="same").plans}
    assert all(str(p.w_fmt) == "1,7,8" for p in same.values())


def test_fit_is_the_default_of_emit_and_same_keeps_the_layer_format(tmp_path: Path, capsys) -> None:
    """`emit` without --weight-format fits the weights (the project's manifest says so);
    `--weight-format same` keeps the 2021 thesis' contract."""
    import json

    path = _model(tmp_path)
    formats = {}
    for option in ([], ["--weight-format", "same"]):
        out = tmp_path / ("p_" + "_".join(option or ["default"]))
        code, err = run_cli(["emit", str(path), "--out", str(out), *option], capsys)
        assert code == 0, err
        layers = json.loads((out / "manifest.json").read_text())["layers"]
        formats[tuple(option)] = {layer["name"]: layer["w_fmt"] for layer in layers if layer["w_fmt"]}
    assert formats[()] == {"dense_0": [1, 2, 13], "dense_1": [1, 0, 15]}
    assert formats[("--weight-format", "same")] == {"dense_0": [1, 7, 8], "dense_1": [1, 7, 8]}


def test_fit_stays_under_formats_set_by_hand(tmp_path: Path) -> None:
    from keras2clash.network import load_network

    plans = {
        p.name: p
        for p in load_network(
            _model(tmp_path),
            "1,5,6",
            weight_format="fit",
            layer_formats={"dense_1": LayerFormats(weight=parse_format("1,3,4"))},
        ).plans
    }
    assert str(plans["dense_0"].w_fmt) == str(parse_format("1,2,9"))  # the default's 12 bits
    assert str(plans["dense_1"].w_fmt) == "1,3,4"


def test_bad_weight_format_is_one_clear_error(tmp_path: Path, capsys) -> None:
    from keras2clash.network import load_network

    with pytest.raises(K2CError, match="bad --weight-format 'tight': one of same, fit"):
        load_network(_model(tmp_path), "1,7,8", weight_format="tight")
    code, err = run_cli(["emit", str(_model(tmp_path)), "--out", str(tmp_path / "p"), "--weight-format", "x"], capsys)
    assert code == 2 and "bad --weight-format 'x'" in err and not (tmp_path / "p").exists()


def test_fit_is_closer_to_keras(tmp_path: Path) -> None:
    """The same network and inputs, the input and the layers' outputs at 16 fraction bits so
    that the weights' rounding shows: fitted weights land nearer Keras' float outputs."""
    import keras

    from keras2clash import debug

    path = _model(tmp_path)
    x = np.random.default_rng(0).uniform(-1, 1, (200, 5))
    want = keras.models.load_model(path).predict(x, verbose=0)
    fine = {name: LayerFormats(output=parse_format("1,7,16")) for name in ("dense_0", "dense_1")}
    err = {
        w: np.abs(
            debug.predict(path, x, "1,7,8", weight_format=w, layer_formats=fine, input_format="1,7,16").values - want
        ).mean()
        for w in ("same", "fit")
    }
    assert err["fit"] < err["same"] / 2, err  # what is left is mostly the biases' rounding (1,7,8)


@needs_toolchain
def test_fit_is_bit_exact_in_clash(tmp_path: Path) -> None:
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    out = api.emit(_model(tmp_path), "1,7,8", tmp_path / "net", show=False, weight_format="fit")
    project = load_project(out)
    x = np.random.default_rng(1).uniform(-2, 2, (24, 5))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=5)


def test_predict_and_trace_take_the_weight_format_of_a_model_not_of_a_project(tmp_path: Path, capsys) -> None:
    """`predict MODEL` plans the model as `emit` does (fit by default, `--weight-format same`
    on request: other outputs, the weights' rounding); a project brings its own formats."""
    path = _model(tmp_path)
    x = np.random.default_rng(2).uniform(-2, 2, (16, 5))
    np.savez(tmp_path / "x.npz", x=x)
    raw = {}
    for option in ([], ["--weight-format", "same"]):
        out = tmp_path / f"out{len(option)}.npz"
        code, err = run_cli(
            ["predict", str(path), "--data", str(tmp_path / "x.npz"), "--out", str(out), *option], capsys
        )
        assert code == 0, err
        raw[len(option)] = np.load(out)["raw"]
    from keras2clash import debug

    assert np.array_equal(raw[0], debug.predict(path, x, weight_format="fit").raw)  # the default is fit
    assert np.array_equal(raw[2], debug.predict(path, x, weight_format="same").raw)
    assert not np.array_equal(raw[0], raw[2])
    code, err = run_cli(["emit", str(path), "--out", str(tmp_path / "p")], capsys)
    assert code == 0, err
    code, err = run_cli(
        ["trace", str(tmp_path / "p"), "--data", str(tmp_path / "x.npz"), "--weight-format", "same"], capsys
    )
    assert code == 2 and "weight_format" in err and "options for planning a Keras model" in err
