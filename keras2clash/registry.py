"""Where the layer kinds are looked up: record type -> its kind (`keras2clash.kinds`).

This module imports nothing of the package, so every stage can ask a layer's kind, the
plan record (`hw.plan.LayerPlan.kind`) included; `keras2clash.kinds` fills it when it is
imported (the package's `__init__` imports it through `api`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keras2clash.kinds.base import Kind

_KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Make `kind` the home of its records' types."""
    for type_name in kind.types:
        if type_name in _KINDS:
            raise ValueError(f"two kinds claim the layer type {type_name!r}")
        _KINDS[type_name] = kind
    return kind


def kind_of(type_name: str) -> Kind | None:
    """The kind of records of `type_name`; None for types the stages still build themselves."""
    return _KINDS.get(type_name)


def kinds() -> tuple[Kind, ...]:
    """Every registered kind, once each."""
    return tuple(dict.fromkeys(_KINDS.values()))
