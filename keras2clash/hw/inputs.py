"""The network's inputs as the golden model and the ports see them: one for a model of one
input (the first layer's first input, in its input format), or every input of a model of
several, in the model's order, each in its own format (`LayerPlan.network_inputs`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from keras2clash.hw.plan import LayerPlan
from keras2clash.quant.formats import FixedFormat


@dataclass(frozen=True)
class NetworkInput:
    """One input of the network: its tensor name, its shape (the IR's) and its format."""

    name: str
    shape: tuple[int, ...]
    fmt: FixedFormat


def network_inputs(plans: Sequence[LayerPlan]) -> list[NetworkInput]:
    """The network's inputs in the model's order."""
    first = plans[0]
    if first.network_inputs:
        return [NetworkInput(name, tuple(shape), fmt) for name, shape, fmt in first.network_inputs]
    return [NetworkInput(first.inputs[0] if first.inputs else "input", first.input_shape, first.in_fmt)]


def several_inputs(plans: Sequence[LayerPlan]) -> bool:
    return bool(plans and plans[0].network_inputs)


def named_inputs(plans: Sequence[LayerPlan]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every input of a network of several inputs, in the model's order (a
    test set's `x_<name>`, `data.load_named_inputs`); empty for one input (its `x`)."""
    return [(port.name, port.shape) for port in network_inputs(plans)] if several_inputs(plans) else []
