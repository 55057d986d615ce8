"""The IR's node records: one frozen dataclass per layer kind, with its attributes and weights.

A record names its producers in `inputs` (layer names, or the network input's name): the
edges of the graph are those named tensors, one per layer output, so a fork is a tensor
with several consumers and a merge is a record with several inputs. Shapes never include
the batch axis; images are channels_last `(H, W, C)`.

Records are immutable: a pass returns new records (`dataclasses.replace`), so a graph
before and after a pass can be compared and nothing changes behind a stage's back.

Some kinds exist only between the frontend and the passes (`Identity`, `Activation`,
`BatchNorm`, `ZeroPad2D`): the converters record what Keras has, the passes
(`ir.passes`) remove, fold and fuse them into the kinds the hardware builds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

Shape = tuple[int, ...]

MERGE_OPS = ("add", "subtract", "multiply", "average", "maximum", "minimum", "concatenate")
"""Keras merge layers the hardware builds (the record's `type`)."""


@dataclass(frozen=True)
class Layer:
    """What every node has: its Keras name, its producers, its shapes, fused Keras layers."""

    name: str
    inputs: tuple[str, ...]
    input_shapes: tuple[Shape, ...]
    output_shape: Shape
    fused: tuple[str, ...] = ()

    type: ClassVar[str] = "layer"
    keras_class: ClassVar[str] = "Layer"

    @property
    def input_shape(self) -> Shape:
        return self.input_shapes[0]

    @property
    def activation(self) -> str:
        return "linear"

    def attributes(self) -> dict[str, Any]:
        """The kind's own fields (for the dictionary IR), weights excluded."""
        base = {f.name for f in fields(Layer)}
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in base and not isinstance(getattr(self, f.name), np.ndarray)}

    def weights(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if isinstance(getattr(self, f.name), np.ndarray)}


# --- kinds the hardware builds ---------------------------------------------------------


@dataclass(frozen=True)
class Dense(Layer):
    """`kernel` (n_in, n_out), `bias` (n_out,) float64 (zeros without a bias)."""

    kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), compare=False)
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    use_bias: bool = True
    activation: str = "linear"  # type: ignore[assignment]

    type: ClassVar[str] = "dense"
    keras_class: ClassVar[str] = "Dense"


@dataclass(frozen=True)
class Conv2D(Layer):
    """`kernel` (kh, kw, C, F), `bias` (F,); `pads` (top, bottom, left, right) are explicit
    zero padding ('same' follows the TF rule, see `frontend.convert.same_pads`)."""

    kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0, 0)), compare=False)
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    use_bias: bool = True
    activation: str = "linear"  # type: ignore[assignment]
    kernel_size: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    padding: str = "valid"
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)

    type: ClassVar[str] = "conv2d"
    keras_class: ClassVar[str] = "Conv2D"


@dataclass(frozen=True)
class Pool2D(Layer):
    """Max or average pooling per channel; 'same' max pooling pads with -infinity."""

    pool_size: tuple[int, int] = (2, 2)
    strides: tuple[int, int] = (2, 2)
    padding: str = "valid"
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True)
class MaxPool2D(Pool2D):
    type: ClassVar[str] = "maxpool2d"
    keras_class: ClassVar[str] = "MaxPooling2D"


@dataclass(frozen=True)
class AvgPool2D(Pool2D):
    type: ClassVar[str] = "avgpool2d"
    keras_class: ClassVar[str] = "AveragePooling2D"


@dataclass(frozen=True)
class Flatten(Layer):
    """Row-major reshape of an image's beats into one vector (Keras Flatten, channels last)."""

    type: ClassVar[str] = "flatten"
    keras_class: ClassVar[str] = "Flatten"


@dataclass(frozen=True)
class Merge(Layer):
    """A Keras merge layer: `op` is one of MERGE_OPS. Element-wise ops take inputs of one
    shape; `concatenate` joins the last axis. An activation after it may be fused."""

    op: str = "add"
    activation: str = "linear"  # type: ignore[assignment]

    keras_class: ClassVar[str] = "Merge"

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.op


# --- kinds that only live until the passes ---------------------------------------------


@dataclass(frozen=True)
class Identity(Layer):
    """Dropout and friends: the identity at inference (`keras_class` says which)."""

    source_class: str = "Dropout"

    type: ClassVar[str] = "identity"


@dataclass(frozen=True)
class Activation(Layer):
    """A separate activation layer (Activation, ReLU, LeakyReLU, PReLU, ELU, Softmax): fused
    into the layer before it by the passes where possible, otherwise a standalone hardware
    stage (`activation` is the canonical text of `quant.activations`)."""

    activation: str = "linear"  # type: ignore[assignment]
    source_class: str = "Activation"

    type: ClassVar[str] = "activation"


@dataclass(frozen=True)
class BatchNorm(Layer):
    """Inference-time batch normalisation of the last axis: `scale * x + shift` per channel
    (scale = gamma / sqrt(var + eps), shift = beta - mean * scale)."""

    scale: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    shift: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    mean: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)

    type: ClassVar[str] = "batchnorm"
    keras_class: ClassVar[str] = "BatchNormalization"


@dataclass(frozen=True)
class ZeroPad2D(Layer):
    """Keras ZeroPadding2D: `pads` (top, bottom, left, right) zeros around the image."""

    pads: tuple[int, int, int, int] = (0, 0, 0, 0)

    type: ClassVar[str] = "zeropad2d"
    keras_class: ClassVar[str] = "ZeroPadding2D"


COMPUTE_TYPES = ("dense", "conv2d")
POOL_TYPES = ("maxpool2d", "avgpool2d")
HARDWARE_TYPES = (*COMPUTE_TYPES, *POOL_TYPES, "flatten", *MERGE_OPS, "activation")
"""Every `type` the hardware stages (plan, golden model, emitter, hardware model) build."""

RECORDS: dict[str, type[Layer]] = {
    cls.type: cls for cls in (Dense, Conv2D, MaxPool2D, AvgPool2D, Flatten, Identity, Activation,
                              BatchNorm, ZeroPad2D)
}


def record_from_dict(data: dict[str, Any]) -> Layer:
    """A record from its dictionary-IR form (`Graph.to_dict`), weights included."""
    kind = data["type"]
    cls: type[Layer] = Merge if kind in MERGE_OPS else RECORDS[kind]
    names = {f.name for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("type", "weights", "input_shape"):
            continue
        if key in names:
            values[key] = tuple(value) if isinstance(value, list) else value
    for key, value in (data.get("weights") or {}).items():
        values[key] = np.asarray(value, dtype=np.float64)
    if "input_shapes" not in values:
        values["input_shapes"] = (tuple(data["input_shape"]),)
    values["input_shapes"] = tuple(tuple(s) for s in values["input_shapes"])
    values["output_shape"] = tuple(values["output_shape"])
    values.setdefault("inputs", ())
    values["fused"] = tuple(values.get("fused", ()))
    if cls is Merge:
        values["op"] = kind
    return cls(**values)


def n_values(shape: Shape) -> int:
    return math.prod(shape)
