"""How the output layer ends, which the planner, the golden model, the hardware model and the
emitter all ask about the same way:

- a vector output is a classifier's: the Top takes the class (the argmax) and sends one beat
  per image, the scores and the class (`classifies`); with `--no-class` it sends the one beat
  of values alone, as a trigger's scores (`LayerPlan.output_class`), and a test set's class
  is the argmax of those values;
- an image or sequence output streams out as it is computed, one beat per position, the
  last axis inside a beat (`output_beats`), with no class;
- a monotone activation on a classifier's output layer is applied after the class is taken
  (the Top's split, `splits_output`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerPlan, relu_before_requantize
from keras2clash.quant import activations


def output_plans(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """The layers whose outputs are the network's, in the model's order: those of a model of
    several outputs (`LayerPlan.output_port`), else the last layer."""
    ports = sorted((p for p in plans if p.output_port is not None), key=lambda p: p.output_port or 0)
    return ports or [plans[-1]]


def several_outputs(plans: Sequence[LayerPlan]) -> bool:
    return any(p.output_port is not None for p in plans)


def classifies(plan: LayerPlan) -> bool:
    """Whether the Top takes a class from the output layer `plan`: its output is a vector, and
    the design asks for the class."""
    return is_vector(plan) and plan.output_class


def is_vector(plan: LayerPlan) -> bool:
    """Whether the layer's output is one vector per sample (a classifier's or a trigger's scores)."""
    return len(plan.output_shape) == 1


def output_beats(plan: LayerPlan) -> int:
    """Output beats per image of the output layer `plan`: one position each (one for a vector)."""
    return math.prod(plan.output_shape[:-1])


def splits_output(plan: LayerPlan) -> bool:
    """Whether the output layer's activation is applied after the class is taken: a monotone
    one (sigmoid, softmax, tanh, relu, ...) keeps the order of the values before it, and
    taking the argmax there avoids the ties its saturation would create. Not a relu applied
    before a wrapping requantization: that one is part of the requantization. An output
    without a class keeps its activation in the network, and so does a layer that feeds its
    output back into its next step (`Kind.feeds_back`)."""
    act = activations.parse(plan.activation)
    if plan.kind is not None and plan.kind.feeds_back:
        return False
    return classifies(plan) and act.monotone and not act.is_linear and not relu_before_requantize(plan)


def output_task(plan: LayerPlan, task: str) -> str:
    """The comparison a test set gets (`data.detect_task`'s `task`): an image or a sequence is
    compared value by value, as a regression model's; a vector keeps the task, with or
    without the Top's class."""
    if is_vector(plan):
        return task
    if task == "classifier":
        raise K2CError(
            f"the output of layer '{plan.name}' is {plan.output_shape}, not a vector: there is no class to "
            "compare (use --task regression or auto)"
        )
    return "regression"
