"""hls4ml configurations: reading one into formats and knobs, writing ours in
that shape, the round trip on examples/digits_dense with a Clash simulation, and one clear
error for each setting we cannot build."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_cli import run_cli

import keras2clash as k2c
from helpers import needs_toolchain
from keras2clash.backend.project import load_project
from keras2clash.errors import K2CError
from keras2clash.network import load_model, plan_network
from keras2clash.quant.formats import FixedFormat, parse_format
from keras2clash.quant.hls4ml import CONFIG_FILE, knobs_for_reuse, read_hls4ml, resolve, to_hls4ml

F = parse_format
DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits_dense"
CONFIG = {
    "Model": {"Precision": "ap_fixed<16,8,AP_RND,AP_SAT>", "ReuseFactor": 1, "Strategy": "Latency"},
    "LayerName": {
        "input_layer": {"Precision": {"result": "ap_ufixed<7,1,AP_RND,AP_SAT>"}},
        "dense_1": {
            "Precision": {
                "weight": "ap_fixed<8,2,AP_RND,AP_SAT>",
                "bias": "ap_fixed<6,4,AP_TRN,AP_SAT>",
                "result": "ap_ufixed<10,4,AP_TRN,AP_SAT>",
            },
            "ReuseFactor": 8,
            "Trace": False,
        },
        "dense_1_relu": {"Precision": {"result": "ap_ufixed<10,4,AP_TRN,AP_SAT>"}},
        "dense_2": {
            "Precision": {
                "weight": "ap_fixed<8,0,AP_RND,AP_SAT>",
                "bias": "ap_fixed<8,2,AP_RND,AP_SAT>",
                "result": "ap_fixed<10,5,AP_RND,AP_WRAP>",
                "accum": "ap_fixed<22,9>",
            },
            "ReuseFactor": 78,
        },
        "dense_3": {
            "Precision": {
                "weight": "ap_fixed<8,3,AP_RND,AP_SAT>",
                "bias": "ap_fixed<4,6,AP_RND,AP_SAT>",
                "result": "ap_fixed<16,8,AP_RND,AP_SAT>",
            },
            "ReuseFactor": 4,
        },
    },
}
STATED = {  # what CONFIG states, as our formats
    "dense_1": (F("1,1,6"), F("1,3,2,trn"), F("0,4,6,trn")),
    "dense_2": (F("1,-1,8"), F("1,1,6"), F("1,4,5,rnd,wrap")),
    "dense_3": (F("1,2,5"), F("1,5,-2"), F("1,7,8")),
}


@pytest.fixture(scope="module")
def digits_graph():
    return load_model(DIGITS / "digits_dense.keras")[1]


def test_read_resolves_formats_and_knobs(digits_graph) -> None:
    resolved = resolve(read_hls4ml(CONFIG), digits_graph)
    assert resolved.formats.default == F("1,7,8") and resolved.formats.input == F("0,1,6")
    for name, (w, b, o) in STATED.items():
        assert resolved.formats.layers[name].weight == w and resolved.formats.layers[name].bias == b
        assert resolved.formats.layers[name].output == o
    assert resolved.formats.layers["dense_2"].accumulator_bits == 22
    # R <= K: R cycles, every neuron in parallel; R = 78 = 2 x K(39): two groups of 12
    assert resolved.parallelism == [39, 12, 10] and resolved.cycles == [8, 39, 4]
    net = plan_network(digits_graph, "1,7,8", hls4ml_config=CONFIG, fifos=False)
    assert to_hls4ml(net.plans, net.formats.default)["LayerName"]["dense_2"]["ReuseFactor"] == 78


def test_model_level_tensor_precision_and_defaults(digits_graph) -> None:
    config = {
        "Model": {"Precision": {"default": "ap_fixed<12,4>", "weight": "ap_fixed<8,1,AP_RND,AP_SAT>"}, "ReuseFactor": 2}
    }
    resolved = resolve(read_hls4ml(config), digits_graph)
    assert resolved.formats.default == FixedFormat(1, 3, 8, "truncate", "wrap")  # ap types truncate and wrap
    assert all(lf.weight == F("1,0,7") and lf.output is None for lf in resolved.formats.layers.values())
    assert resolved.cycles == [2, 2, 2] and resolved.parallelism == [39, 24, 10]
    # the sigmoid output cannot take a truncating, wrapping format: one error naming the layer
    with pytest.raises(
        K2CError, match=r"layer 'dense_3' \(dense\): output format 1,3,8,trn,wrap needs a linear or relu"
    ):
        plan_network(digits_graph, "1,7,8", hls4ml_config=config, fifos=False)


def test_reuse_factor_to_knobs() -> None:
    assert knobs_for_reuse(1, 64, 39, "d") == (39, 1)
    assert knobs_for_reuse(64, 64, 39, "d") == (39, 64)
    assert knobs_for_reuse(128, 64, 39, "d") == (20, 64)
    assert knobs_for_reuse(64 * 39, 64, 39, "d") == (1, 64)
    with pytest.raises(K2CError, match="layer 'd': ReuseFactor 100 cannot be built"):
        knobs_for_reuse(100, 64, 39, "d")
    with pytest.raises(K2CError, match="one of 64, 128, 192, 256, 320"):  # 17 groups of 39 filters: none
        knobs_for_reuse(64 * 17, 64, 39, "d")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"LayerType": {"Dense": {}}}, "section(s) LayerType not read"),
        ({"Model": {"Precision": "ap_fixed<16,8>", "Foo": 1}}, "Model: key(s) Foo not read"),
        ({"Model": {"Precision": "ap_fixed<16,8,AP_RND_INF>"}}, "AP_RND_INF"),
        ({"Model": {"Precision": "ap_fixed<16,8>", "ReuseFactor": 0}}, "ReuseFactor must be an integer >= 1"),
        ({"LayerName": {"dense_9": {"Precision": "ap_fixed<8,2>"}}}, "layer 'dense_9': no such layer"),
        (
            {"LayerName": {"dense_1": {"Precision": {"weights": "ap_fixed<8,2>"}}}},
            "Precision key 'weights' is not read",
        ),
        ({"LayerName": {"dense_1": {"ReuseFactor": 100}}}, "layer 'dense_1': ReuseFactor 100 cannot be built"),
        (
            {
                "LayerName": {
                    "dense_1": {"Precision": {"result": "ap_ufixed<8,4,AP_RND,AP_SAT>"}},
                    "dense_1_relu": {"Precision": {"result": "ap_ufixed<8,3,AP_RND,AP_SAT>"}},
                }
            },
            "differs from layer 'dense_1''s result",
        ),
    ],
)
def test_bad_configs_name_the_setting(digits_graph, change, message) -> None:
    config = {"Model": {"Precision": "ap_fixed<16,8,AP_RND,AP_SAT>"}, **change}
    with pytest.raises(K2CError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_network(digits_graph, "1,7,8", hls4ml_config=config, fifos=False)


def test_reuse_factor_and_knob_options_conflict(digits_graph) -> None:
    with pytest.raises(K2CError, match="give no --parallelism"):
        plan_network(digits_graph, "1,7,8", hls4ml_config=CONFIG, parallelism="1,1,1", fifos=False)


@needs_toolchain
@pytest.mark.toolchain
def test_digits_dense_config_round_trips_bit_exact(tmp_path: Path, capsys) -> None:
    """Read, emit, write: the plan has the stated formats and knobs, golden == Clash
    simulation, and the written config read and emitted again writes the same config."""
    given = tmp_path / "hls4ml.yml"
    given.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "net"
    code, err = run_cli(
        ["emit", str(DIGITS / "digits_dense.keras"), "--out", str(out), "--hls4ml-config", str(given)], capsys
    )
    assert code == 0, err
    project = load_project(out)
    plans = {p.name: p for p in project.plans}
    assert plans["dense_1"].in_fmt == F("0,1,6")
    for name, (w, b, o) in STATED.items():
        assert (plans[name].w_fmt, plans[name].b_fmt, plans[name].out_fmt) == (w, b, o)
    assert [(p.knobs.pe, p.knobs.cycles) for p in project.plans] == [(39, 8), (12, 39), (10, 4)]
    assert plans["dense_2"].acc_fmt.bits == 22 and not plans["dense_2"].params.exact_accumulator
    written = yaml.safe_load((out / CONFIG_FILE).read_text())
    for name, entry in CONFIG["LayerName"].items():
        if name in STATED:
            assert written["LayerName"][name]["ReuseFactor"] == entry["ReuseFactor"]
            for key in ("weight", "bias", "result"):
                assert written["LayerName"][name]["Precision"][key] == entry["Precision"][key]
    assert written["LayerName"]["input"]["Precision"]["result"] == "ap_ufixed<7,1,AP_RND,AP_SAT>"

    again = tmp_path / "again"
    code, err = run_cli(
        ["emit", str(DIGITS / "digits_dense.keras"), "--out", str(again), "--hls4ml-config", str(out / CONFIG_FILE)],
        capsys,
    )
    assert code == 0, err
    assert (again / CONFIG_FILE).read_text() == (out / CONFIG_FILE).read_text()
    assert [p.to_json() for p in load_project(again).plans] == [p.to_json() for p in project.plans]

    comp = k2c.simulate(out, DIGITS / "test.npz", 40, keras=False, show=False)
    assert comp.bit_exact == comp.samples == 40
    assert comp.golden_accuracy > 0.8
