"""The host's side of the weight port (`K2C.WeightBus`, `--writable-weights`): new weights of
an emitted design as the messages that load them.

A message is a header beat, `layer index << 24 | first address`, then each word in 32-bit
beats, least significant first, `tlast` on the last beat. A word is the layer's weight
memory word exactly as its `.mem` file holds it (`memfiles.rom_words`, the layout of
`K2C.Memory`), so new weights are quantized and packed by the code that wrote the files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from keras2clash.backend.emitter import BUS_BEAT_BITS, word_beats
from keras2clash.backend.memfiles import rom_words
from keras2clash.backend.project import Project
from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerPlan
from keras2clash.quant.golden import QuantizedLayer

HEADER_INDEX_SHIFT = 24
"""A header beat's layer index sits above its 24-bit first address."""


@dataclass(frozen=True)
class WeightMessage:
    """One message of the weight port: the layer it writes, its index on the bus, its beats
    (the header first); `tlast` belongs on the last."""

    layer: str
    index: int
    beats: tuple[int, ...]


def bus_layers(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """The memories on the weight port, in bus order: the engine layers in network order
    (the emitted README's and Weights.hs' table)."""
    return [plan for plan in plans if plan.is_compute]


def layer_message(plan: LayerPlan, index: int, params: QuantizedLayer) -> WeightMessage:
    """The message that writes layer `plan` (bus index `index`) whole, from address 0."""
    beats = [index << HEADER_INDEX_SHIFT]
    mask = (1 << BUS_BEAT_BITS) - 1
    for word in rom_words(plan, params):
        value = int(word, 2)
        beats.extend((value >> (BUS_BEAT_BITS * k)) & mask for k in range(word_beats(plan)))
    return WeightMessage(plan.name, index, tuple(beats))


def weight_messages(
    project: Project, params: Mapping[str, QuantizedLayer], *, changed_only: bool = False
) -> list[WeightMessage]:
    """The messages that load `params` (the golden model's quantized constants of every layer
    with constants, as `quant.golden.quantize_params` gives them) into `project`'s memories,
    one per memory in bus order (`changed_only`: only those whose words change). Refused, with
    the layer named, when the design's weights are not writable or a constant the weight port
    cannot reach (a BatchNormalization's, ...) would change."""
    if not project.writable_weights:
        raise K2CError(
            f"design '{project.name}' has no weight port; emit it with --writable-weights to load new weights"
        )
    memories = bus_layers(project.plans)
    on_bus = {plan.name for plan in memories}
    for plan in project.plans:
        if not plan.has_params:
            continue
        if plan.name not in params:
            raise K2CError(f"the new weights have no values for layer '{plan.name}'")
        if plan.name not in on_bus and not _same(params[plan.name], project.params[plan.name]):
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): its constants are part of the synthesized design, not of a "
                "weight memory; new weights must keep them as they are"
            )
    messages = []
    for index, plan in enumerate(memories):
        if changed_only and rom_words(plan, params[plan.name]) == rom_words(plan, project.params[plan.name]):
            continue
        messages.append(layer_message(plan, index, params[plan.name]))
    return messages


def _same(a: QuantizedLayer, b: QuantizedLayer) -> bool:
    return bool(np.array_equal(a.kernel, b.kernel) and np.array_equal(a.bias, b.bias))


def messages_text(messages: Sequence[WeightMessage]) -> str:
    """The messages as text, one line per message: its beats in hex (8 digits), the header
    first; `tlast` on each line's last beat."""
    return "".join(" ".join(f"{beat:08x}" for beat in message.beats) + "\n" for message in messages)
