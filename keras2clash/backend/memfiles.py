"""Weight memory files: the ROM contents of each compute layer, one word per line.

The layout is the one `K2C.Memory` unpacks (docs/reference/project.md, "Weight memory files"): word
`g*b + t` holds, for PE j, filter `g*p + j`'s chunk t of `ch` weights and a bias field (the
real bias in chunk 0, zero in the others); PE 0 in the most significant bits; within a PE
the ch weights (window element t*ch first) then the bias field. Weights are W-bit and the
bias field B-bit two's complement. Neurons past the layer's filters and window elements
past K are zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from bitstring import Bits

from keras2clash.hw.plan import LayerPlan
from keras2clash.quant.golden import QuantizedLayer


def rom_table(plan: LayerPlan, params: QuantizedLayer) -> np.ndarray:
    """(words, p, ch + 1) raw integers: each word's PEs, their chunk weights and bias field."""
    p, ch, b, g = plan.engine_knobs.pe, plan.chunk, plan.engine_knobs.cycles, plan.groups
    k, f = plan.window, plan.filters
    weights = np.zeros((g * p, b * ch), dtype=np.int64)  # filter x padded window
    weights[:f, :k] = params.kernel.T
    bias = np.zeros(g * p, dtype=np.int64)
    bias[:f] = params.bias
    table = np.zeros((g, b, p, ch + 1), dtype=np.int64)
    table[..., :ch] = weights.reshape(g, p, b, ch).transpose(0, 2, 1, 3)
    table[:, 0, :, ch] = bias.reshape(g, p)
    return table.reshape(g * b, p, ch + 1)


def word_bits(plan: LayerPlan) -> int:
    """Bits of one ROM word: p * (ch * W + B)."""
    assert plan.w_fmt is not None and plan.b_fmt is not None
    return plan.engine_knobs.pe * (plan.chunk * plan.w_fmt.hw_bits + plan.b_fmt.hw_bits)


def rom_words(plan: LayerPlan, params: QuantizedLayer) -> list[str]:
    """The ROM of one compute layer as '0'/'1' strings, MSB first."""
    assert plan.w_fmt is not None and plan.b_fmt is not None
    w_bits, b_bits = plan.w_fmt.hw_bits, plan.b_fmt.hw_bits  # the containers
    words = []
    for word in rom_table(plan, params):
        fields: list[str] = []
        for pe in word:
            fields.extend(Bits(int=int(v), length=w_bits).bin for v in pe[:-1])
            fields.append(Bits(int=int(pe[-1]), length=b_bits).bin)
        words.append("".join(fields))
    return words


def rom_params(plan: LayerPlan, words: Sequence[str]) -> QuantizedLayer:
    """The raw constants a ROM of `words` ('0'/'1' strings, MSB first, as `rom_words` gives
    them) holds: the inverse of `rom_words`, the zero padding past the filters and the window
    dropped."""
    assert plan.w_fmt is not None and plan.b_fmt is not None
    w_bits, b_bits = plan.w_fmt.hw_bits, plan.b_fmt.hw_bits
    p, ch, b, g = plan.engine_knobs.pe, plan.chunk, plan.engine_knobs.cycles, plan.groups
    if len(words) != g * b or any(len(word) != word_bits(plan) for word in words):
        raise ValueError(f"layer '{plan.name}': expected {g * b} words of {word_bits(plan)} bits")
    widths = ([w_bits] * ch + [b_bits]) * p
    table = np.zeros((g * b, p * (ch + 1)), dtype=np.int64)
    for row, word in enumerate(words):
        start = 0
        for column, width in enumerate(widths):
            table[row, column] = Bits(bin=word[start : start + width]).int
            start += width
    fields = table.reshape(g, b, p, ch + 1)
    weights = fields[..., :ch].transpose(0, 2, 1, 3).reshape(g * p, b * ch)
    bias = fields[:, 0, :, ch].reshape(g * p)
    return QuantizedLayer(weights[: plan.filters, : plan.window].T.copy(), bias[: plan.filters].copy())


def memfile_text(plan: LayerPlan, params: QuantizedLayer) -> str:
    return "\n".join(rom_words(plan, params)) + "\n"
