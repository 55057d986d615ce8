"""Vivado/Vitis HLS fixed-point type names (`ap_fixed<W,I,Q,O>`) <-> our formats.

hls4ml states every precision as such a type. `I` counts the sign bit, so
`ap_fixed<16,8>` holds our `1,7,8`; `ap_ufixed<8,4>` is the unsigned `0,4,4`. Without
modes an ap type truncates (AP_TRN, toward -inf) and wraps (AP_WRAP): `ap_fixed<16,8>` is
`1,7,8,trn,wrap`, and our default contract `1,7,8` is `ap_fixed<16,8,AP_RND,AP_SAT>`
(AP_RND rounds to nearest with ties toward +inf, exactly our rounding). Only the modes the
hardware builds exactly are accepted; the others are refused with the one we would need.
"""

from __future__ import annotations

import re

from keras2clash.errors import K2CError
from keras2clash.quant.formats import NEAREST, NEAREST_EVEN, SATURATE, TRUNCATE, WRAP, FixedFormat, make_format

ROUNDING = {
    "AP_RND": NEAREST,
    "RND": NEAREST,
    "AP_TRN": TRUNCATE,
    "TRN": TRUNCATE,
    "AP_RND_CONV": NEAREST_EVEN,
    "RND_CONV": NEAREST_EVEN,
}
OVERFLOW = {"AP_SAT": SATURATE, "SAT": SATURATE, "AP_WRAP": WRAP, "WRAP": WRAP}
UNSUPPORTED = {
    "AP_RND_ZERO": "rounds ties toward zero",
    "AP_RND_MIN_INF": "rounds ties toward -inf",
    "AP_RND_INF": "rounds ties away from zero",
    "AP_TRN_ZERO": "truncates toward zero",
    "AP_SAT_ZERO": "overflows to zero",
    "AP_SAT_SYM": "saturates symmetrically",
    "AP_WRAP_SM": "wraps sign-magnitude",
}
"""Modes hls4ml knows that the contract does not build (each refused with what it does)."""

_AP_RE = re.compile(r"^\s*(?:ap_)?(u?fixed|u?int)\s*<([^<>]*)>\s*$", re.IGNORECASE)


def parse_ap_type(text: str) -> FixedFormat:
    """`ap_fixed<W,I[,Q[,O[,N]]]>`, `ap_ufixed<...>`, `ap_int<W>`, `ap_uint<W>` (the `ap_`
    prefix optional, as hls4ml's `fixed<16,6,RND,SAT>`) -> a format."""
    match = _AP_RE.match(text)
    if not match:
        raise K2CError(
            f"bad type {text!r}: expected ap_fixed<W,I>, ap_fixed<W,I,Q,O>, ap_ufixed<W,I>, ap_int<W> or ap_uint<W>"
        )
    kind = match.group(1).lower()
    args = [a.strip() for a in match.group(2).split(",")]
    unsigned = kind.startswith("u")
    try:
        if kind.endswith("int"):
            if len(args) != 1:
                raise ValueError
            width, integer, modes = int(args[0]), int(args[0]), []
        else:
            if not 2 <= len(args) <= 5:
                raise ValueError
            width, integer, modes = int(args[0]), int(args[1]), args[2:]
    except ValueError:
        raise K2CError(
            f"bad type {text!r}: {kind}<...> takes "
            f"{'W' if kind.endswith('int') else 'W,I and optionally Q, O, N'} (integers W, I)"
        ) from None
    rounding, overflow = TRUNCATE, WRAP  # the ap types' own defaults
    if modes:
        rounding = _mode(modes[0], ROUNDING, text, "quantization")
    if len(modes) > 1:
        overflow = _mode(modes[1], OVERFLOW, text, "overflow")
    if len(modes) > 2 and modes[2] not in ("0",):
        raise K2CError(f"bad type {text!r}: saturation bits N={modes[2]} are not supported (only 0)")
    sign = 0 if unsigned else 1
    return make_format(sign, integer - sign, width - integer, rounding, overflow, text=text)


def _mode(name: str, known: dict[str, str], text: str, what: str) -> str:
    key = name.strip().upper()
    if key in known:
        return known[key]
    if key in UNSUPPORTED:
        choices = " or ".join(k for k in known if k.startswith("AP_"))
        raise K2CError(
            f"type {text!r}: {what} mode {key} ({UNSUPPORTED[key]}) is not built by keras2clash; use {choices}"
        )
    raise K2CError(f"bad type {text!r}: unknown {what} mode {name!r}")


def ap_type(fmt: FixedFormat) -> str:
    """The exact ap type of a format, both modes spelled out (parse_ap_type's inverse)."""
    q = {NEAREST: "AP_RND", NEAREST_EVEN: "AP_RND_CONV", TRUNCATE: "AP_TRN"}[fmt.rounding]
    o = "AP_SAT" if fmt.overflow == SATURATE else "AP_WRAP"
    kind = "ap_fixed" if fmt.sign else "ap_ufixed"
    return f"{kind}<{fmt.bits},{fmt.sign + fmt.int},{q},{o}>"
