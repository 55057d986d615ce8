"""The emit summary: storage per layer shows line buffers, not frames; timing from the model."""

from __future__ import annotations

import json
from pathlib import Path

import keras2clash as k2c
from keras2clash.frontend.convert import parse
from keras2clash.hw.planner import make_plan
from keras2clash.hw.summary import design_summary
from keras2clash.quant.formats import parse_format

ROOT = Path(__file__).resolve().parent.parent


def test_thesis_cnn_storage_is_line_buffers_not_frames() -> None:
    plans = make_plan(parse(ROOT / "examples" / "thesis_cnn" / "thesis_cnn.keras"), parse_format("1,7,8"), pipeline=0)
    summary = design_summary(plans)
    layers = {layer["name"]: layer for layer in summary["layers"]}
    # conv_1: 14-wide rows, 3x3 kernel, 1 channel, 16 bits: 2 rows of 14 pixels
    assert layers["conv_1"]["line_buffer_bits"] == 2 * 14 * 1 * 16
    assert layers["conv_1"]["frame_bits"] == 14 * 14 * 1 * 16
    # pool_1: 12-wide rows of 16 channels, 2x2 pool: 1 row
    assert layers["pool_1"]["line_buffer_bits"] == 1 * 12 * 16 * 16
    for name in ("conv_1", "pool_1", "conv_2", "pool_2"):
        assert layers[name]["line_buffer_bits"] < layers[name]["frame_bits"]
    assert layers["conv_2"]["rom_bits"] == 16 * (144 * 16 + 16)  # 16 words, 1 PE, 144 weights + bias
    assert (summary["latency"], summary["interval"], summary["multipliers"]) == (
        2383,
        2319,
        217,
    )  # test_hwmodel.MEASURED


def test_emit_stores_the_design_summary(tmp_path: Path) -> None:
    out = k2c.emit(ROOT / "examples" / "iris" / "iris.keras", "1,7,8", tmp_path / "iris", [3, 2], pipeline=0)
    design = json.loads((out / "manifest.json").read_text())["design"]
    # dense 4->8 (G = 3) and 8->3 (G = 2): (3 + 1) + (2 + 1), + 1 for each of Top's FIFOs,
    # + 5 for the class (the registered beat and activation, 2 comparison levels, a queue), + 20 for the
    # softmax (1 + 2 + 7 + 9 register stages: the table's indices, its read, its output register and a
    # fabric copy, the sum in two, a quotient bit each; and a queue)
    assert (design["latency"], design["interval"], design["multipliers"]) == (34, 3, 3 * 4 + 2 * 8)
    piped = k2c.emit(ROOT / "examples" / "iris" / "iris.keras", "1,7,8", tmp_path / "piped", [3, 2], pipeline=1)
    design = json.loads((piped / "manifest.json").read_text())["design"]
    # one adder level per stage: D = 7 + ceil(log2(ch + 1)) = 7 + 3 (ch = 4), 7 + 4 (ch = 8), and
    # one each for the result register the output queue is written from (G = 3 and G = 2)
    assert (design["latency"], design["interval"]) == (34 + 10 + 11 + 2, 3)
