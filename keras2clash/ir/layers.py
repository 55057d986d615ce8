"""The IR's node records: one frozen dataclass per layer kind, with its attributes and weights.

A record names its producers in `inputs` (layer names, or the network input's name): the
edges of the graph are those named tensors, one per layer output, so a fork is a tensor
with several consumers and a merge is a record with several inputs. Shapes never include
the batch axis; images are channels_last `(H, W, C)`.

Records are immutable: a pass returns new records (`dataclasses.replace`), so a graph
before and after a pass can be compared and nothing changes behind a stage's back.

Some kinds exist only between the frontend and the passes (`Identity`, `Activation`,
`BatchNorm`): the converters record what Keras has, the passes
(`ir.passes`) remove, fold and fuse them into the kinds the hardware builds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

import numpy as np

from keras2clash.errors import K2CError

Shape = tuple[int, ...]



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
    zero padding ('same' follows the TF rule, see `frontend.convert.same_pads`, on the
    dilated extent). `dilation` (dh, dw): tap (i, j) reads input pixel (i*dh, j*dw) of the
    window. `source_class` is the Keras class it came from (Conv2D, Conv1D, or a Dense
    applied per position of a tensor), for reports and the generated Haskell."""

    kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0, 0)), compare=False)
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    use_bias: bool = True
    activation: str = "linear"  # type: ignore[assignment]
    kernel_size: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    padding: str = "valid"
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    source_class: str = "Conv2D"

    type: ClassVar[str] = "conv2d"
    keras_class: ClassVar[str] = "Conv2D"


@dataclass(frozen=True)
class DepthwiseConv2D(Layer):
    """A depthwise convolution (Keras DepthwiseConv2D, and the first half of a separable
    one): output channel `f = c*m + j` (m = `depth_multiplier`) is the kh x kw window of
    input channel `c = f // m` times its own filter. `kernel` is (kh, kw, C*m), Keras'
    (kh, kw, C, m) reshaped, so that a per-output-channel scale (a folded BatchNorm)
    broadcasts over its last axis as for Conv2D; `bias` (C*m,)."""

    kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)), compare=False)
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    use_bias: bool = True
    activation: str = "linear"  # type: ignore[assignment]
    kernel_size: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    padding: str = "valid"
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    depth_multiplier: int = 1

    type: ClassVar[str] = "depthwise2d"
    keras_class: ClassVar[str] = "DepthwiseConv2D"


# --- kinds that only live until the passes ---------------------------------------------


@dataclass(frozen=True)
class Identity(Layer):
    """Dropout and friends: the identity at inference (`keras_class` says which)."""

    source_class: str = "Dropout"

    type: ClassVar[str] = "identity"


COMPUTE_TYPES = ("dense", "conv2d", "depthwise2d")
WINDOW_TYPES = ("conv2d", "depthwise2d")
"""The compute kinds built on the window generator (K2C.Window, with K2C.Pad in front when
padded); the other kinds say it themselves (`Kind.windowed`)."""
HARDWARE_TYPES = COMPUTE_TYPES
"""The `type`s the hardware stages build themselves; the kinds of `keras2clash.kinds` too."""

RECORDS: dict[str, type[Layer]] = {
    cls.type: cls for cls in (Dense, Conv2D, DepthwiseConv2D, Identity)
}
"""Record type -> record class: these, and those the kinds register (`register_record`)."""

R = TypeVar("R", bound=type[Layer])


def register_record_type(type_name: str, cls: type[Layer]) -> None:
    """Register a record class that serves several types (its `type` is a field's value)."""
    RECORDS[type_name] = cls


def register_record(cls: R) -> R:
    """Register a kind's record class for the dictionary IR (`record_from_dict`)."""
    RECORDS[cls.type] = cls
    return cls


def record_from_dict(data: dict[str, Any]) -> Layer:
    """A record from its dictionary-IR form (`Graph.to_dict`), weights included."""
    kind = data["type"]
    if kind not in RECORDS:
        raise K2CError(f"layer '{data.get('name')}': unknown layer type {kind!r} in the dictionary IR")
    cls = RECORDS[kind]
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
    if "op" in names:  # a record serving several types (a merge) keeps its type in `op`
        values["op"] = kind
    return cls(**values)
