"""The emitter: readable Haskell named after Keras layers, exact memory files, atomic output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import keras2clash as k2c
from helpers import random_dense_model
from keras2clash.backend.emitter import cabal_package_name, haskell_names
from keras2clash.backend.memfiles import rom_words
from keras2clash.errors import K2CError
from keras2clash.hw.planner import make_plan
from keras2clash.quant.formats import parse_format
from keras2clash.quant.golden import QuantizedLayer


@pytest.fixture(scope="module")
def model():
    return random_dense_model([(5, "relu"), (3, "sigmoid")], n_in=4, seed=1)


def test_project_layout_and_readable_network(tmp_path: Path, model) -> None:
    out = k2c.emit(model, "1,7,8", tmp_path / "net", [2, 3], name="tiny", weight_format="same")  # weights SFixed 8 8
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    for expected in [
        "Network.hs",
        "Weights.hs",
        "Top.hs",
        "Sim.hs",
        "bin/Clash.hs",
        "tiny.cabal",
        "cabal.project",
        "manifest.json",
        "golden.npz",
        "source_model.keras",
        "weights/dense_0.mem",
        "weights/dense_1.mem",
        "clash_lib/K2C/Dense.hs",
    ]:
        assert expected in files
    network = (out / "Network.hs").read_text()
    assert (
        "network p_dense_0 b_dense_0 l_dense_0 p_dense_1 b_dense_1 l_dense_1 =\n"
        "  dense_0 p_dense_0 b_dense_0 l_dense_0\n  |> dense_1 p_dense_1 b_dense_1 l_dense_1\n"
    ) in network
    assert (
        "  => SNat 2  -- ^ processing elements of dense_0\n  -> SNat 1  -- ^ cycles per window of dense_0\n"
        "  -> SNat 2  -- ^ adder levels per pipeline stage of dense_0 (0: not pipelined)\n"
        "  -> SNat 3  -- ^ processing elements of dense_1"
    ) in network
    assert "dense_1 pe cycles levels =\n  Dense.dense pe cycles levels W.dense_1 finish" in network
    assert (
        "finish = Finish requantize linear  -- a register stage each" in network
    )  # the output's sigmoid is applied in Top
    assert "outputActivation = map dense_1_sigmoid" in network and "dense_1_sigmoid = Lut.lut" in network
    weights = (out / "Weights.hs").read_text()
    assert 'dense_0 :: WeightRom 3 2 4 (SFixed 8 8) (SFixed 8 8)\ndense_0 = WeightRom "weights/dense_0.mem"' in weights
    assert 't_name   = "tiny"' in (out / "Top.hs").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert [layer["knobs"]["pe"] for layer in manifest["layers"]] == [2, 3]


def test_memory_words_decode_back_to_the_parameters() -> None:
    fmt = parse_format("1,3,4")
    ir = [
        {
            "type": "dense",
            "name": "d",
            "input_shape": (3,),
            "output_shape": (5,),
            "activation": "relu",
            "use_bias": True,
            "fused": [],
            "weights": {},
        }
    ]
    plan = make_plan(ir, fmt, [2])[0]
    kernel = np.arange(-7, 8).reshape(3, 5)
    bias = np.array([-128, 127, 0, 1, -1])
    words = rom_words(plan, QuantizedLayer(kernel, bias))
    assert len(words) == 3 and all(len(w) == 2 * 4 * 8 for w in words)
    values = [int(w[i : i + 8], 2) for w in words for i in range(0, len(w), 8)]
    values = [v - 256 if v >= 128 else v for v in values]
    neurons = np.array(values).reshape(6, 4)  # 3 words x 2 PEs, each 3 weights + bias
    assert neurons[:5, :3].tolist() == kernel.T.tolist()
    assert neurons[:5, 3].tolist() == bias.tolist()
    assert neurons[5].tolist() == [0, 0, 0, 0]  # padding neuron of the last word


def test_haskell_names_are_valid_and_unique() -> None:
    assert haskell_names(["dense_1", "Dense-2", "1st", "type", "dense_1"]) == [
        "dense_1",
        "dense_2",
        "layer_1st",
        "type_layer",
        "dense_1_1",
    ]
    # names Clash.Prelude exports would be ambiguous in the generated modules
    assert haskell_names(["d1", "map", "register", "d1024", "d1025", "conv"]) == [
        "d1_layer",
        "map_layer",
        "register_layer",
        "d1024_layer",
        "d1025",
        "conv",
    ]
    assert haskell_names(["layer", "names", "value"]) == ["layer", "names", "value"]  # the list's comment words


def test_cabal_package_names_are_valid() -> None:
    assert cabal_package_name("sequential_6") == "sequential6"
    assert cabal_package_name("digits_dense") == "digits-dense"
    assert cabal_package_name("net_2_3_x") == "net23-x"
    assert cabal_package_name("7") == "net7"


def test_refuses_non_empty_directory_and_force_replaces(tmp_path: Path, model) -> None:
    out = tmp_path / "net"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(K2CError, match="not empty; use --force"):
        k2c.emit(model, "1,7,8", out)
    assert (out / "keep.txt").read_text() == "mine"
    k2c.emit(model, "1,7,8", out, force=True)
    assert not (out / "keep.txt").exists() and (out / "Network.hs").exists()


def test_failure_leaves_nothing_half_written(tmp_path: Path, model, monkeypatch) -> None:
    import keras2clash.backend.emitter as emitter

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(emitter, "memfile_text", boom)
    with pytest.raises(RuntimeError):
        k2c.emit(model, "1,7,8", tmp_path / "net")
    assert list(tmp_path.iterdir()) == []


def test_top_entity_names_are_legal_in_every_hdl() -> None:
    from keras2clash.backend.emitter import hdl_name

    assert hdl_name("digits_dense") == "digits_dense"
    assert hdl_name("My--Model_") == "my_model"
    assert hdl_name("3layers") == "net_3layers"
    assert hdl_name("__") == "net"
    assert hdl_name("module") == "module_net"


def test_table_slices_fit_one_block_ram_each() -> None:
    """A table deeper than 1024 words is cut into slices no wider than the deepest block-RAM
    shape holding it (2048 x 9), high bits first; a table that fits one shape stays whole."""
    from keras2clash.backend.activations import table_slices

    assert table_slices(1155, 14) == (5, 9)
    assert table_slices(1599, 16) == (7, 9)
    assert table_slices(2048, 24) == (6, 9, 9)
    assert table_slices(1024, 16) == (16,) and table_slices(890, 18) == (18,) and table_slices(300, 30) == (30,)
    assert table_slices(4096, 8) == (4, 4)


def test_sliced_table_files_and_haskell(tmp_path: Path) -> None:
    """iris' softmax table (1155 entries of 14 bits) is written as two slice files whose lines,
    side by side, are the table's words, and Weights.hs reads them side by side."""
    from keras2clash.quant import activations

    root = Path(__file__).resolve().parent.parent
    out = k2c.emit(root / "examples" / "iris" / "iris.keras", "1,7,8", tmp_path / "iris")
    high = (out / "weights" / "output_softmax.0.mem").read_text().split()
    low = (out / "weights" / "output_softmax.1.mem").read_text().split()
    assert not (out / "weights" / "output_softmax.mem").exists()
    table = activations.softmax_table(parse_format("1,7,8"), parse_format("1,7,8"), 3)
    assert [int(h + lo, 2) for h, lo in zip(high, low)] == [v & (2**14 - 1) for v in table.values]
    assert {len(w) for w in high} == {5} and {len(w) for w in low} == {9}
    weights = (out / "Weights.hs").read_text()
    assert (
        'output_softmax = bitTable ((tableFile "weights/output_softmax.0.mem" :: TableRom 1155 (BitVector 5)) '
        '`beside` (tableFile "weights/output_softmax.1.mem" :: TableRom 1155 (BitVector 9)))'
    ) in weights
