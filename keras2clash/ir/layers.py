"""The IR's node records: the base every layer kind's record extends (the records themselves
live in their kinds' modules, `keras2clash.kinds`, and register here for the dictionary IR).

A record names its producers in `inputs` (layer names, or the network input's name): the
edges of the graph are those named tensors, one per layer output, so a fork is a tensor
with several consumers and a merge is a record with several inputs. Shapes never include
the batch axis; images are channels_last `(H, W, C)`.

Records are immutable: a pass returns new records (`dataclasses.replace`), so a graph
before and after a pass can be compared and nothing changes behind a stage's back.

`Identity` exists only between the frontend and the passes (`ir.passes` removes it), so it
lives here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeAlias, TypeVar, cast

import numpy as np

from keras2clash.errors import K2CError

Shape = tuple[int, ...]

IRValue: TypeAlias = "None | bool | int | float | str | np.ndarray | Sequence[IRValue] | Mapping[str, IRValue]"
"""A value in the dictionary IR: a record's field (numbers, names, shapes as tuples), its
weights (numpy arrays), or the same read from JSON (lists for tuples). `Sequence` and
`Mapping` rather than `list` and `dict` because those are invariant: a `list[int]` or a
`dict[str, np.ndarray]` must count as a value too."""

IRRow: TypeAlias = Mapping[str, IRValue]
"""One layer of the dictionary IR (`Graph.to_dict`, `record_from_dict`)."""


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

    def attributes(self) -> dict[str, IRValue]:
        """The kind's own fields (for the dictionary IR), weights excluded."""
        base = {f.name for f in fields(Layer)}
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in base and not isinstance(getattr(self, f.name), np.ndarray)
        }

    def weights(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), np.ndarray)}


# --- kinds that only live until the passes ---------------------------------------------


@dataclass(frozen=True)
class Identity(Layer):
    """Dropout and friends: the identity at inference (`keras_class` says which)."""

    source_class: str = "Dropout"

    type: ClassVar[str] = "identity"


RECORDS: dict[str, type[Layer]] = {cls.type: cls for cls in (Identity,)}
"""Record type -> record class: these, and those the kinds register (`register_record`)."""

R = TypeVar("R", bound=type[Layer])


def register_record_type(type_name: str, cls: type[Layer]) -> None:
    """Register a record class that serves several types (its `type` is a field's value)."""
    RECORDS[type_name] = cls


def register_record(cls: R) -> R:
    """Register a kind's record class for the dictionary IR (`record_from_dict`)."""
    RECORDS[cls.type] = cls
    return cls


def record_from_dict(data: IRRow) -> Layer:
    """A record from its dictionary-IR form (`Graph.to_dict`), weights included."""
    kind = data["type"]
    if kind not in RECORDS:
        raise K2CError(f"layer '{data.get('name')}': unknown layer type {kind!r} in the dictionary IR")
    cls = RECORDS[cast(str, kind)]  # a key of RECORDS
    names = {f.name for f in fields(cls)}
    values: dict[str, Any] = {}  # the keyword arguments of `cls`, whichever kind it is
    for key, value in data.items():
        if key in ("type", "weights", "input_shape"):
            continue
        if key in names:
            values[key] = tuple(value) if isinstance(value, list) else value
    weights = cast(Mapping[str, IRValue], data.get("weights") or {})
    for key, value in weights.items():
        values[key] = np.asarray(value, dtype=np.float64)
    if "input_shapes" not in values:
        values["input_shapes"] = (tuple(cast(Sequence[int], data["input_shape"])),)
    values["input_shapes"] = tuple(tuple(s) for s in values["input_shapes"])
    values["output_shape"] = tuple(values["output_shape"])
    values.setdefault("inputs", ())
    values["fused"] = tuple(values.get("fused", ()))
    if "op" in names:  # a record serving several types (a merge) keeps its type in `op`
        values["op"] = kind
    return cls(**values)
