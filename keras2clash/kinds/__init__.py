"""The layer kinds: one module each (`kinds.base` says what a kind owns).

Importing this package registers every kind with `keras2clash.registry` (where the stages
look a layer's kind up: `kind_of`), its records with `ir.layers.RECORDS` and its Keras
converters with `frontend.registry`.
"""

from __future__ import annotations

from keras2clash.kinds import activation, batchnorm, conv, dense, depthwise, flatten, global_pool, merge, pool, shapes
from keras2clash.kinds.base import Entry, Kind, Storage
from keras2clash.registry import kind_of, kinds, register

__all__ = ["Entry", "Kind", "Storage", "kind_of", "kinds"]

for _module in (activation, batchnorm, conv, dense, depthwise, flatten, global_pool, merge, pool, shapes):
    for _kind in _module.KINDS:
        register(_kind)
