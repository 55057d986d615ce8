"""The layer kinds: one module each (`kinds.base` says what a kind owns).

Importing this package imports every module in it and registers the kinds each lists in its
`KINDS` with `keras2clash.registry` (where the stages look a layer's kind up: `kind_of`); the
modules register their records with `ir.layers.RECORDS` and their Keras converters with
`frontend.registry` as they are imported. A new kind is a new module here: nothing else lists it.
"""

from __future__ import annotations

import importlib
import pkgutil

from keras2clash.kinds.base import Entry, Kind, Storage
from keras2clash.registry import kind_of, kinds, register

__all__ = ["Entry", "Kind", "Storage", "kind_of", "kinds"]

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
    for _kind in getattr(importlib.import_module(f"{__name__}.{_info.name}"), "KINDS", ()):
        register(_kind)
