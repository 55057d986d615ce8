"""The types of JSON data the stages read and write (manifests, the dictionary IR, reports).

`Json` is any JSON value; `JsonObject` an object. Signatures that take or give JSON say so with
these rather than `Any`, so mypy follows the data into the code that reads it.
"""

from __future__ import annotations

from typing import TypeAlias

Json: TypeAlias = "None | bool | int | float | str | list[Json] | dict[str, Json]"
JsonObject: TypeAlias = "dict[str, Json]"
