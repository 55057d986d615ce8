"""Helpers for the Haskell text of a layer kind: its template (a file of jinja2 macros beside
the kind's module, `keras2clash/kinds/<kind>.hs.j2`) and the small spellings every kind
shares. The text itself lives in the templates; Python passes them the numbers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import jinja2

from keras2clash.quant.formats import FixedFormat

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).resolve().parent.parent / "kinds")),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def format_type_name(fmt: FixedFormat) -> str:
    """The type alias of a format's hardware container (FixedFormat.container): formats
    that share a container (modes, unsigned, negative fields) share its type."""
    c = fmt.container
    return f"Q{c.sign}_{c.int}_{c.frac}"


def requantizer(fmt: FixedFormat, rounding: str | None = None) -> str:
    """The Haskell that requantizes an exact value to `fmt`: K2C.Activation.requantize for
    a plain format (round half up, saturate), K2C.Quant.requantizeTo for the others (its
    width, the container's extra low bits, the modes, the sign). `rounding` replaces the
    format's own (a layer that adds the rounding's offset itself truncates)."""
    if fmt.is_plain and rounding in (None, fmt.rounding):
        return "requantize"
    mode = {"nearest": "Nearest", "nearest_even": "NearestEven", "truncate": "Truncate"}[rounding or fmt.rounding]
    overflow = "Saturate" if fmt.overflow == "saturate" else "Wrap"
    return f"Quant.requantizeTo @{fmt.bits} @{fmt.raw_frac - fmt.frac} Quant.{mode} Quant.{overflow} {bool(fmt.sign)}"


def vec_type(shape: Sequence[int], elem: str) -> str:
    """Nested Vec for a shape, row-major: (8, 8) -> Vec 8 (Vec 8 e)."""
    inner = elem
    for dim in reversed(shape):
        inner = f"Vec {dim} ({inner})" if " " in inner else f"Vec {dim} {inner}"
    return inner


def beat_type(shape: Sequence[int], elem: str) -> str:
    """A beat carries the last axis (docs/architecture/hardware.md, Streams)."""
    return vec_type(shape[-1:], elem)


class KindTemplate:
    """A kind's macros: `template.pad(h, w, ...)` renders the macro `pad` as a string."""

    def __init__(self, name: str) -> None:
        self._module = _env.get_template(name).module

    def __getattr__(self, macro: str) -> Callable[..., str]:
        render = getattr(self._module, macro)
        return lambda *args, **kwargs: str(render(*args, **kwargs))


def kind_template(name: str) -> KindTemplate:
    """The macros of `keras2clash/kinds/<name>`."""
    return KindTemplate(name)


def shape_text(shape: Sequence[int]) -> str:
    """`8x8x3`: a tensor shape in the generated comments."""
    return "x".join(map(str, shape))


def vec_literal(raw: Iterable[int]) -> str:
    """Raw integers as a Vec literal (negative ones in parentheses)."""
    return " :> ".join(f"({v})" if v < 0 else str(v) for v in (int(r) for r in raw)) + " :> Nil"
