"""The registry of layer kinds: every kind the hardware builds, keyed by its records' `type`.

A kind lives in one module of this package (`kinds.base` says what it owns); the stages look
a layer's kind up here (`kind_of`) and never name one. Importing this package registers every
kind's records (`ir.layers.RECORDS`) and Keras converters (`frontend.registry`).
"""

from __future__ import annotations

from keras2clash.kinds import flatten, global_pool, pool, shapes
from keras2clash.kinds.base import Entry, Kind, Storage

__all__ = ["KINDS", "Entry", "Kind", "Storage", "kind_of"]

KINDS: dict[str, Kind] = {t: kind for kind in (*pool.KINDS, *flatten.KINDS, *shapes.KINDS, *global_pool.KINDS) for t in kind.types}
"""Record type -> its kind."""


def kind_of(type_name: str) -> Kind | None:
    """The kind of records of `type_name`, None for kinds the stages still build themselves."""
    return KINDS.get(type_name)
