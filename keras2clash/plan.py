"""The hardware plan: formats and parallelism of every layer (a pass over the IR).

The IR says what the network computes; the plan says how the hardware computes it: the
fixed-point format of each layer's input, weights, accumulator and output, and how many
processing elements each dense layer gets. Formats are per layer in the data model even
when the user gives one format for all, so per-layer precision needs no new plumbing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .errors import K2CError
from .formats import FixedFormat

HARDWARE_ACTIVATION = {"linear": "linear", "relu": "relu", "sigmoid": "sigmoid", "softmax": "linear"}
"""Keras activation -> what the hardware computes (softmax: argmax-preserving identity)."""


@dataclass(frozen=True)
class LayerPlan:
    """One layer as the hardware builds it."""

    name: str
    type: str  # "dense" | "flatten"
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    activation: str  # the Keras activation, kept for reports
    in_fmt: FixedFormat
    out_fmt: FixedFormat
    w_fmt: FixedFormat | None = None
    acc_fmt: FixedFormat | None = None
    pe: int = 1

    @property
    def n_in(self) -> int:
        return math.prod(self.input_shape)

    @property
    def n_out(self) -> int:
        return math.prod(self.output_shape)

    @property
    def hw_activation(self) -> str:
        return HARDWARE_ACTIVATION[self.activation]

    @property
    def groups(self) -> int:
        """ROM words = cycles of compute: ceil(n_out / pe), the last one partly padding."""
        return -(-self.n_out // self.pe)

    @property
    def pad(self) -> int:
        return self.groups * self.pe - self.n_out

    @property
    def multipliers(self) -> int:
        return self.pe * self.n_in if self.type == "dense" else 0

    @property
    def rom_bits(self) -> int:
        if self.type != "dense":
            return 0
        assert self.w_fmt is not None
        return self.groups * self.pe * (self.n_in + 1) * self.w_fmt.bits

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("in_fmt", "out_fmt", "w_fmt", "acc_fmt"):
            fmt = getattr(self, key)
            data[key] = None if fmt is None else [fmt.sign, fmt.int, fmt.frac]
        data["input_shape"] = list(self.input_shape)
        data["output_shape"] = list(self.output_shape)
        return data

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> LayerPlan:
        fields = dict(data)
        for key in ("in_fmt", "out_fmt", "w_fmt", "acc_fmt"):
            value = fields.get(key)
            fields[key] = None if value is None else FixedFormat(*value)
        fields["input_shape"] = tuple(fields["input_shape"])
        fields["output_shape"] = tuple(fields["output_shape"])
        return LayerPlan(**fields)


def accumulator_format(in_fmt: FixedFormat, w_fmt: FixedFormat, n_in: int) -> FixedFormat:
    """The exact accumulator of docs/contract.md step 3: never overflows.

    Clash integer bits ci = (1+ia) + (1+iw) + ceil(log2(n_in+1)) + 1; our `int` field
    excludes the sign bit, so it is ci - 1.
    """
    guard = math.ceil(math.log2(n_in + 1))
    clash_int = (in_fmt.sign + in_fmt.int) + (w_fmt.sign + w_fmt.int) + guard + 1
    return FixedFormat(1, clash_int - 1, in_fmt.frac + w_fmt.frac)


def parse_parallelism(text: str | None, n_dense: int) -> list[int] | None:
    """`"1,2,5"` -> [1, 2, 5]; None stays None (one PE per layer)."""
    if text is None or text.strip() == "":
        return None
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise K2CError(
            f"bad parallelism {text!r}: expected comma-separated integers, one per dense layer"
        ) from None
    if len(values) != n_dense:
        raise K2CError(
            f"bad parallelism {text!r}: {len(values)} value(s) given, the model has "
            f"{n_dense} dense layer(s)"
        )
    return values


def make_plan(
    ir: Sequence[Mapping[str, Any]],
    fmt: FixedFormat,
    parallelism: Sequence[int] | None = None,
    layer_formats: Mapping[str, FixedFormat] | None = None,
) -> list[LayerPlan]:
    """Give every IR layer its formats and processing elements.

    `fmt` is the default for inputs, weights and outputs; `layer_formats` may override a
    layer's weight and output format by name. Parallelism is one value per dense layer,
    each from 1 to that layer's neuron count (any value, not only divisors).
    """
    dense_layers = [layer for layer in ir if layer["type"] == "dense"]
    pes = list(parallelism) if parallelism is not None else [1] * len(dense_layers)
    if len(pes) != len(dense_layers):
        raise K2CError(
            f"parallelism has {len(pes)} value(s), the model has {len(dense_layers)} dense layer(s)"
        )
    overrides = dict(layer_formats or {})
    unknown = set(overrides) - {layer["name"] for layer in ir}
    if unknown:
        raise K2CError(f"format given for unknown layer(s): {', '.join(sorted(unknown))}")

    plans: list[LayerPlan] = []
    current = fmt
    pe_iter = iter(pes)
    for layer in ir:
        if layer["type"] == "flatten":
            plans.append(
                LayerPlan(
                    name=layer["name"], type="flatten",
                    input_shape=tuple(layer["input_shape"]),
                    output_shape=tuple(layer["output_shape"]),
                    activation="linear", in_fmt=current, out_fmt=current,
                )
            )
            continue
        if layer["type"] != "dense":
            raise K2CError(f"layer '{layer['name']}': type {layer['type']!r} has no hardware block")
        pe = next(pe_iter)
        n_out = math.prod(layer["output_shape"])
        if not 1 <= pe <= n_out:
            raise K2CError(
                f"parallelism {pe} out of range for layer '{layer['name']}': "
                f"it must be between 1 and {n_out} (its neuron count)"
            )
        layer_fmt = overrides.get(layer["name"], fmt)
        n_in = math.prod(layer["input_shape"])
        plans.append(
            LayerPlan(
                name=layer["name"], type="dense",
                input_shape=tuple(layer["input_shape"]),
                output_shape=tuple(layer["output_shape"]),
                activation=layer["activation"],
                in_fmt=current, w_fmt=layer_fmt, out_fmt=layer_fmt,
                acc_fmt=accumulator_format(current, layer_fmt, n_in), pe=pe,
            )
        )
        current = layer_fmt
    return plans
