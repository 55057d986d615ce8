"""The exact integer arithmetic of the contract (docs/guide/contract.md) on raw values: the
golden model's building blocks, shared by the kinds' golden steps (`keras2clash.kinds`).

Everything is vectorised numpy; values that could outgrow int64 are computed in Python
integers (object arrays), so nothing can wrap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from keras2clash.quant import activations
from keras2clash.quant.formats import FixedFormat, requantize, saturate

INT64_SAFE_BITS = 62
"""Accumulators up to this width are computed in int64 (leaves headroom for rounding)."""


@dataclass(frozen=True)
class QuantizedLayer:
    """A compute layer's parameters as the ROM stores them (raw integers).

    `kernel` is (K, filters) with K in window order (conv: (i*kw + j)*C + c, i.e. the Keras
    kernel (kh, kw, C, F) reshaped row-major; depthwise: i*kw + j of the filter's own
    channel, the record's (kh, kw, C*m) reshaped); `bias` is (filters,) in the bias format.
    """

    kernel: np.ndarray
    bias: np.ndarray


def _exact(values: np.ndarray, extra_bits: int) -> np.ndarray:
    """`values` in a dtype that holds them grown by `extra_bits` bits: int64 while that
    fits INT64_SAFE_BITS, Python integers (object) beyond, so nothing can wrap."""
    values = np.asarray(values)
    if values.dtype == object or values.size == 0:
        return values
    top = max(int(values.max()), -int(values.min()), 1)
    return values.astype(object) if top.bit_length() + 1 + extra_bits > INT64_SAFE_BITS else values


def _round_shift(acc: np.ndarray, shift: int) -> np.ndarray:
    """Contract step 4: divide by 2^shift rounding half up (shift > 0), or scale up exactly."""
    if shift > 0:
        acc = _exact(acc, 1) if shift < INT64_SAFE_BITS else np.asarray(acc).astype(object)
        return (acc + (1 << (shift - 1))) >> shift
    return _exact(acc, -shift) << (-shift)


def requantize_to(raw: np.ndarray, frac: int, out: FixedFormat) -> np.ndarray:
    """Contract step 4 from raw values with `frac` fraction bits to `out`'s raw values: its
    rounding (nearest: half up; truncate: floor) at its `frac`, its overflow (saturate or
    wrap) on its W-bit codes, in a dtype wide enough for every step (formats.requantize)."""
    if out.is_plain:  # the default contract (the common case, int64 throughout)
        return saturate(_round_shift(raw, frac - out.frac), out)
    grow = max(out.frac - frac, 0) + max(-out.frac, 0) + 2
    return requantize(_exact(raw, grow), frac, out)


def pad_images(x: np.ndarray, pads: tuple[int, int, int, int], value: int | float) -> np.ndarray:
    """(N, H, W, C) -> padded with `value` on top, bottom, left, right."""
    top, bottom, left, right = pads
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def windows(
    x: np.ndarray, kernel: tuple[int, int], dilation: tuple[int, int], strides: tuple[int, int], out_hw: tuple[int, int]
) -> np.ndarray:
    """All windows of (N, H, W, C) padded images -> (N, H2, W2, kh, kw, C), strided: window
    (i, j) spans the dilated extent from input pixel (i*sh, j*sw), tap (r, s) reads pixel
    (i*sh + r*dh, j*sw + s*dw). Raw integers and floats alike."""
    (kh, kw), (dh, dw), (sh, sw), (h2, w2) = kernel, dilation, strides, out_hw
    view = np.lib.stride_tricks.sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    view = view[:, : (h2 - 1) * sh + 1 : sh, : (w2 - 1) * sw + 1 : sw, :, ::dh, ::dw]
    return np.moveaxis(view, 3, -1)  # N, H2, W2, kh, kw, C


def activate(r: np.ndarray, activation: str, fmt: FixedFormat) -> np.ndarray:
    """Apply a fused hardware activation to requantized raw values (results stay in `fmt`;
    softmax works over the last axis). quant.activations holds the arithmetic."""
    return activations.apply(r, activation, fmt.container, fmt.container)


def finish(acc: np.ndarray, frac: int, out: FixedFormat, activation: str, relu_first: bool) -> np.ndarray:
    """Contract steps 4 and 5 on an exact value with `frac` fraction bits: requantize to `out`,
    then the fused activation; with `relu_first` a relu before a wrapping requantization
    (HGQ2's order, which a wrap does not commute with: `hw.plan.relu_before_requantize`)."""
    if relu_first:
        return np.asarray(requantize_to(np.maximum(acc, 0), frac, out), dtype=np.int64)
    return np.asarray(activate(requantize_to(acc, frac, out), activation, out), dtype=np.int64)
