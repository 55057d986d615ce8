"""The design knobs as one record (keras2clash.design.DesignOptions): built alike from the
command line's text and from Python values, one clear error per bad value, and the keyword
form of emit / load_network / plan_network is the same record."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from helpers import random_dense_model
from keras2clash.design import DesignOptions, per_layer
from keras2clash.errors import K2CError
from keras2clash.quant.formats import FixedFormat, parse_format
from keras2clash.quant.layerformats import FormatConfig


def test_strings_and_python_values_make_the_same_record(tmp_path: Path) -> None:
    text = DesignOptions.of(
        "1,5,6",
        parallelism="2,3",
        cycles="1,4",
        pipeline="2,0",
        dsp_budget="12",
        lanes=" Full ",
        calibration=str(tmp_path / "c.npz"),
        input_format="0,1,6",
    )
    values = DesignOptions.of(
        FixedFormat(1, 5, 6),
        parallelism=[2, 3],
        cycles=(1, 4),
        pipeline=[2, 0],
        dsp_budget=12,
        lanes="full",
        calibration=tmp_path / "c.npz",
        layer_formats=FormatConfig(input=parse_format("0,1,6")),
    )
    assert text == values
    assert text.parallelism == (2, 3) and text.pipeline == (2, 0) and text.dsp_budget == 12
    assert text.changed() == (
        "format",
        "layer_formats",
        "calibration",
        "parallelism",
        "cycles",
        "pipeline",
        "dsp_budget",
        "lanes",
    )
    assert DesignOptions.of("auto", bits=8).format == "auto"
    assert (
        DesignOptions.of(pipeline="auto@150").pipeline == 1
        and DesignOptions.of(dsp_budget="ecp5-85k").dsp_budget == 132
    )
    assert DesignOptions() == DesignOptions.of() and DesignOptions().changed() == ()


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"parallelism": "1,x"}, "bad parallelism '1,x': expected comma-separated integers"),
        ({"cycles": [1.5, 2]}, "bad cycles [1.5, 2]: expected whole numbers"),
        ({"pipeline": "fast"}, "bad pipeline 'fast'"),
        ({"pipeline": "auto@0"}, "target clock must be 1 to 1000 MHz"),
        ({"dsp_budget": "altera"}, "bad --dsp-budget 'altera'"),
        ({"dsp_budget": 0}, "at least 1 multiplier"),
        ({"lanes": "half"}, "bad --lanes 'half'"),
        ({"softmax": "probabilities"}, "bad softmax mode 'probabilities'"),
        ({"weight_format": "tight"}, "bad --weight-format 'tight'"),
        ({"bits": 65}, "bad --bits 65"),
        ({"input_format": "1,7"}, "bad format '1,7'"),
        ({"layer_formats": {"dense_0": "1,x,8"}}, "layer 'dense_0'"),
        ({"hls4ml_config": {"Model": {"Foo": 1}}}, "key(s) Foo not read"),
    ],
)
def test_one_error_per_bad_value(knobs: dict, message: str) -> None:
    with pytest.raises(K2CError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        DesignOptions.of("1,7,8", **knobs)


def test_a_bad_format_and_an_unknown_knob() -> None:
    with pytest.raises(K2CError, match="bad format '1,7'"):
        DesignOptions.of("1,7")
    with pytest.raises(TypeError, match="unknown design option.*'parallelsim'"):
        DesignOptions.of("1,7,8", parallelsim="1,2")


def test_keywords_on_a_record_replace_its_fields() -> None:
    base = DesignOptions.of("1,5,6", parallelism="2,3", input_format="0,1,6")
    changed = DesignOptions.of(base, softmax="argmax", parallelism=None)
    assert changed.softmax == "argmax" and changed.parallelism is None and changed.format == base.format
    assert changed.layer_formats == base.layer_formats  # untouched fields stay
    assert DesignOptions.of(base, input_format="0,2,6").layer_formats.input == parse_format("0,2,6")
    assert DesignOptions.of(base) is base
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.bits = 8  # type: ignore[misc]
    with pytest.raises(K2CError, match="bad softmax mode"):  # replace checks like the constructor
        dataclasses.replace(base, softmax="soft")


def test_values_per_layer_are_counted_against_the_model() -> None:
    assert per_layer((2, 3), 2, "parallelism") == [2, 3] and per_layer(None, 2, "cycles") is None
    with pytest.raises(K2CError, match=r"bad parallelism '1,2,3': 3 value\(s\) given, the model has 2"):
        per_layer((1, 2, 3), 2, "parallelism")


def test_the_command_line_builds_the_keywords_record() -> None:
    from keras2clash.cli.params import design_options

    cli = design_options(
        "1,5,6",
        layer_format=["dense_0:o=1,3,6"],
        input_format="0,1,6",
        parallelism="2,1",
        pipeline="auto",
        softmax="argmax",
        weight_format="same",
    )
    keywords = DesignOptions.of(
        "1,5,6",
        layer_formats={"dense_0": {"o": "1,3,6"}},
        input_format="0,1,6",
        parallelism=[2, 1],
        pipeline=2,
        softmax="argmax",
        weight_format="same",
    )
    assert cli == keywords
    assert design_options() == DesignOptions()


def test_load_network_takes_the_record_or_its_keywords() -> None:
    from keras2clash.network import load_network

    model = random_dense_model([(5, "relu"), (3, "softmax")], n_in=4, seed=1)
    by_keywords = load_network(
        model, "1,5,6", parallelism="5,1", cycles=[1, 5], pipeline=0, softmax="argmax", fifos=False
    )
    by_record = load_network(
        model, DesignOptions.of("1,5,6", parallelism=(5, 1), cycles="1,5", pipeline="0", softmax="argmax"), fifos=False
    )
    assert by_keywords.plans == by_record.plans
    assert [(p.knobs.pe, p.knobs.cycles) for p in by_record.plans if p.is_compute] == [(5, 1), (1, 5)]
    with pytest.raises(K2CError, match=r"bad cycles '1,5,1': 3 value\(s\) given, the model has 2"):
        load_network(model, "1,5,6", cycles="1,5,1")
