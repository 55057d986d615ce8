"""The dense kind: Keras Dense on a vector (a Dense on a sequence or an image is a 1x1
convolution, `kinds.conv.dense_on_tensor`), on the filter engine (`kinds.engine`). An
EinsumDense whose equation is a Dense on the last axis (`dense_equation`) is converted the
same way.

Block: `K2C.Dense`, the engine fed the whole input vector as its one window (K = n_in).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    FloatTwin,
    KerasLayer,
    _activation,
    _kernel_and_bias,
    _single_input,
    register_converter,
)
from keras2clash.hw.plan import LayerPlan
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry
from keras2clash.kinds.conv import dense_on_tensor
from keras2clash.kinds.engine import EngineKind, neurons
from keras2clash.quant import activations
from keras2clash.quant.exact import QuantizedLayer

HASKELL = kind_template("dense.hs.j2")


@register_record
@dataclass(frozen=True)
class Dense(Layer):
    """`kernel` (n_in, n_out), `bias` (n_out,) float64 (zeros without a bias)."""

    kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), compare=False)
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    use_bias: bool = True
    activation: str = "linear"  # type: ignore[assignment]

    type: ClassVar[str] = "dense"
    keras_class: ClassVar[str] = "Dense"


@register_converter("Dense")
def _convert_dense(layer: KerasLayer, state: ConversionState) -> Layer:
    _single_input(layer, state)
    _refuse_keras_quantized(layer)
    return dense_on_last_axis(layer, state)


def _refuse_keras_quantized(layer: KerasLayer) -> None:
    if getattr(layer, "quantization_mode", None) is not None:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' is Keras-quantized ({layer.quantization_mode}); "
            "give keras2clash the float model"
        )


def dense_on_last_axis(layer: KerasLayer, state: ConversionState) -> Layer:
    """A Dense (`units`, `kernel` (n_in, units), `use_bias`, `bias`, `activation`) on the last
    axis: the Dense record on a vector, a 1x1 convolution per position of a sequence or an
    image (`dense_on_tensor`)."""
    if len(state.shape) != 1:
        return dense_on_tensor(layer, state)
    activation = _activation(layer)
    n_in, n_out = state.shape[0], int(layer.units)
    kernel, bias = _kernel_and_bias(layer, (n_in, n_out))
    return Dense(
        **state.common(layer, (n_out,)), kernel=kernel, bias=bias, use_bias=bool(layer.use_bias), activation=activation
    )


_EQUATION = re.compile(r"^(\.\.\.)?([a-z]+),([a-z])([a-z])->(\.\.\.)?([a-z]+)$")

DENSE_EQUATIONS = (
    "'ab,bc->ac' or '...b,bc->...c' on a vector, 'abc,cd->abd' or '...c,cd->...d' per step of a sequence, "
    "'abcd,de->abce' per pixel of an image; bias_axes absent or the output's last letter"
)
"""The EinsumDense equations converted (`dense_equation`), for refusals."""


def dense_equation(layer: KerasLayer, state: ConversionState) -> int:
    """The units of an EinsumDense (plain Keras, HGQ2's QEinsumDense) whose equation is a Dense
    on the last axis of its input (`DENSE_EQUATIONS`: the batch and every other axis kept, the
    last one contracted with the kernel's first axis into one new axis); one error otherwise."""
    _single_input(layer, state)
    equation = str(layer.equation).replace(" ", "")
    bias_axes = getattr(layer, "bias_axes", None)
    rank = len(state.keras_shape)
    match = _EQUATION.match(equation)
    if match is not None:
        dots, given, inner, new, out_dots, out = match.groups()
        dense = (
            dots == out_dots
            and len(set(given)) == len(given)
            and given[-1] == inner
            and new not in given
            and out == given[:-1] + new
            and (len(given) == 1 if dots else len(given) == rank + 1)
            and bias_axes in (None, new)
        )
        if dense and (rank in (1, 2) or rank == 3 and not dots):  # Keras' shape of '...' on rank 3 is wrong
            return int(layer.kernel.shape[-1])
    raise K2CError(
        f"{type(layer).__name__} layer '{layer.name}' computes '{layer.equation}' (bias_axes {bias_axes!r}) on "
        f"an input of shape {state.keras_shape}; only a Dense on the last axis is converted: {DENSE_EQUATIONS}"
    )


@register_converter("EinsumDense")
def _convert_einsum_dense(layer: KerasLayer, state: ConversionState) -> Layer:
    """An EinsumDense whose equation is a Dense on the last axis (`dense_equation`), as that Dense."""
    units = dense_equation(layer, state)
    _refuse_keras_quantized(layer)
    use_bias = getattr(layer, "bias", None) is not None
    twin = FloatTwin(layer, type(layer).__name__, units=units, use_bias=use_bias)
    return dense_on_last_axis(twin, state)


class DenseKind(EngineKind):
    records = (Dense,)
    filter_word = "neuron"
    latency_built = True

    def windows_per_image(self, plan: LayerPlan) -> int:
        return 1

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """(N, n_in) raw -> (N, n_out) raw."""
        assert params is not None
        return neurons(xs[0].reshape(len(xs[0]), -1), plan, params)

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        kernel, bias = params if params is not None else self.constants(layer)
        kernel = np.asarray(kernel, dtype=np.float64)
        h = xs[0]
        pre = h.reshape(len(h), -1) @ kernel.reshape(-1, kernel.shape[-1]) + np.asarray(bias, dtype=np.float64)
        return pre, activations.keras_float(activations.parse(layer.activation), pre)

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        return self.compute_entry(
            plan, HASKELL.doc(plan.n_in, plan.n_out, plan.activation), [HASKELL.dense(fn)], [], ["dense"]
        )


KINDS = (DenseKind(),)
