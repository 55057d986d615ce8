"""Weight memory files: the ROM contents of each dense layer, one word per line.

The layout is the one `K2C.Memory` unpacks (docs/architecture.md): word k holds neurons
k*p .. k*p+p-1; PE 0 in the most significant bits; within a PE its n weights (input 0
first) then its bias; each value W bits two's complement; zero padding past n_out.
"""

from __future__ import annotations

import numpy as np
from bitstring import Bits

from .golden import QuantizedDense
from .plan import LayerPlan


def rom_words(plan: LayerPlan, params: QuantizedDense) -> list[str]:
    """The ROM of one dense layer as '0'/'1' strings, MSB first."""
    assert plan.w_fmt is not None
    width = plan.w_fmt.bits
    n_in = plan.n_in
    neurons = np.zeros((plan.groups * plan.pe, n_in + 1), dtype=np.int64)
    neurons[: plan.n_out, :n_in] = params.kernel.T
    neurons[: plan.n_out, n_in] = params.bias
    words = []
    for group in neurons.reshape(plan.groups, plan.pe * (n_in + 1)):
        words.append("".join(Bits(int=int(v), length=width).bin for v in group))
    return words


def memfile_text(plan: LayerPlan, params: QuantizedDense) -> str:
    return "\n".join(rom_words(plan, params)) + "\n"
