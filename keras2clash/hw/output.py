"""How the output layer ends: a monotone activation there is applied after the class is
taken (the Top's split), which the planner, the golden model, the hardware model and the
emitter all ask about the same way."""

from __future__ import annotations

from keras2clash.hw.plan import LayerPlan, relu_before_requantize
from keras2clash.quant import activations


def splits_output(plan: LayerPlan) -> bool:
    """Whether the output layer's activation is applied after the class is taken: a monotone
    one (sigmoid, softmax, tanh, relu, ...) keeps the order of the values before it, and
    taking the argmax there avoids the ties its saturation would create. Not a relu applied
    before a wrapping requantization: that one is part of the requantization."""
    act = activations.parse(plan.activation)
    return act.monotone and not act.is_linear and not relu_before_requantize(plan)
