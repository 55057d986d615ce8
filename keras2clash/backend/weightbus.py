"""The host's side of the weight ports (`K2C.WeightBus`, `--writable-weights`): new weights of
an emitted design as the messages that load them, the messages that read them back, and the
answers read back as the layers' raw constants.

A write message is a header beat, `layer index << 24 | first address`, then each word in
32-bit beats, least significant first, `tlast` on the last beat. A word is the layer's weight
memory word exactly as its `.mem` file holds it (`memfiles.rom_words`, the layout of
`K2C.Memory`), so new weights are quantized and packed by the code that wrote the files. A
read message is a header beat with `READ_FLAG` set, then a beat of the word count; its answer,
on the master port, is the words in a write's beats (`memfiles.rom_params` unpacks them). Only a
design emitted with `--readable-weights` too has that port (`K2C.WeightReadBack`); on one without
it a read message writes nothing and gets no answer, so reads of it are refused here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from keras2clash.backend.emitter import BUS_BEAT_BITS, word_beats
from keras2clash.backend.memfiles import rom_params, rom_words, word_bits
from keras2clash.backend.project import Project
from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerPlan
from keras2clash.quant.golden import QuantizedLayer

HEADER_INDEX_SHIFT = 24
"""A header beat's layer index sits above its read flag and its 23-bit first address."""
READ_FLAG = 1 << 23
"""A header beat with this bit set reads; clear, it writes."""
COUNT_MASK = (1 << 24) - 1
"""A read's count beat: the words in its low 24 bits."""


@dataclass(frozen=True)
class WeightMessage:
    """One message of the weight port: the layer it writes or reads, its index on the bus, its
    beats (the header first; `tlast` belongs on the last), and the beats of the answer a read
    gets on the master port (0: a write, no answer)."""

    layer: str
    index: int
    beats: tuple[int, ...]
    answer_beats: int = 0


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


def read_message(plan: LayerPlan, index: int, first: int = 0, count: int | None = None) -> WeightMessage:
    """The message that reads `count` words (default: to the end) of layer `plan` (bus index
    `index`) from address `first`; its answer is the words that exist of those."""
    count = plan.rom_depth - first if count is None else count
    if not 0 <= first < plan.rom_depth or not 1 <= count <= COUNT_MASK:
        raise K2CError(f"layer '{plan.name}' has {plan.rom_depth} words: no read of {count} from address {first}")
    words = min(count, plan.rom_depth - first)
    beats = (index << HEADER_INDEX_SHIFT | READ_FLAG | first, count)
    return WeightMessage(plan.name, index, beats, words * word_beats(plan))


def read_messages(project: Project, layers: Sequence[str] | None = None) -> list[WeightMessage]:
    """The messages that read whole memories of `project`: those of `layers` (names, in the
    order given; default every memory in bus order)."""
    _check_readable(project)
    memories = bus_layers(project.plans)
    index = {plan.name: k for k, plan in enumerate(memories)}
    names = [plan.name for plan in memories] if layers is None else list(layers)
    unknown = [name for name in names if name not in index]
    if unknown:
        raise K2CError(
            f"design '{project.name}' has no weight memory '{unknown[0]}' (the memories: {', '.join(index)})"
        )
    return [read_message(memories[index[name]], index[name]) for name in names]


def read_answers(project: Project, params: Mapping[str, QuantizedLayer]) -> list[tuple[int, ...]]:
    """The answers to `read_messages(project)` of memories holding `params`: each memory's
    words in a write's beats."""
    return [layer_message(plan, k, params[plan.name]).beats[1:] for k, plan in enumerate(bus_layers(project.plans))]


def answer_words(plan: LayerPlan, beats: Sequence[int]) -> list[str]:
    """The words of a read's answer of layer `plan` ('0'/'1' strings, MSB first, as
    `memfiles.rom_words` gives them): each word's beats, least significant first."""
    per_word = word_beats(plan)
    if not beats or len(beats) % per_word:
        raise K2CError(f"layer '{plan.name}': an answer of {len(beats)} beats is not whole words of {per_word} beats")
    bits = word_bits(plan)
    words = []
    for start in range(0, len(beats), per_word):
        value = sum(int(b) << (BUS_BEAT_BITS * k) for k, b in enumerate(beats[start : start + per_word]))
        if value >> bits:
            raise K2CError(f"layer '{plan.name}': an answer's word has bits set past its {bits} bits")
        words.append(format(value, f"0{bits}b"))
    return words


def read_back(project: Project, answers: Mapping[str, Sequence[int]]) -> dict[str, QuantizedLayer]:
    """The raw constants of each layer in `answers` (its name -> the answer's beats to a read
    of its whole memory, `read_messages`), unpacked from the words (`memfiles.rom_params`)."""
    _check_readable(project)
    memories = {plan.name: plan for plan in bus_layers(project.plans)}
    params = {}
    for name, beats in answers.items():
        plan = memories[name]
        words = answer_words(plan, beats)
        if len(words) != plan.rom_depth:
            raise K2CError(f"layer '{name}': an answer of {len(words)} words, its memory has {plan.rom_depth}")
        params[name] = rom_params(plan, words)
    return params


def _check_port(project: Project) -> None:
    if not project.writable_weights:
        raise K2CError(
            f"design '{project.name}' has no weight port; emit it with --writable-weights to load new weights"
        )


def _check_readable(project: Project) -> None:
    _check_port(project)
    if not project.readable_weights:
        raise K2CError(
            f"design '{project.name}' does not read its weights back (no m_axis_weights port); "
            "emit it with --writable-weights --readable-weights to read them"
        )


def weight_messages(
    project: Project, params: Mapping[str, QuantizedLayer], *, changed_only: bool = False
) -> list[WeightMessage]:
    """The messages that load `params` (the golden model's quantized constants of every layer
    with constants, as `quant.golden.quantize_params` gives them) into `project`'s memories,
    one per memory in bus order (`changed_only`: only those whose words change). Refused, with
    the layer named, when the design's weights are not writable or a constant the weight port
    cannot reach (a BatchNormalization's, ...) would change."""
    _check_port(project)
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
    first; `tlast` on each line's last beat. Answers read back are text of the same kind."""
    return beats_text([message.beats for message in messages])


def beats_text(lines: Sequence[Sequence[int]]) -> str:
    """Lines of 32-bit beats as text: each beat in hex (8 digits), `tlast` on a line's last."""
    return "".join(" ".join(f"{beat:08x}" for beat in beats) + "\n" for beats in lines)


def parse_beats(text: str) -> list[list[int]]:
    """`beats_text`'s lines back as beats (blank lines skipped)."""
    try:
        return [[int(beat, 16) for beat in line.split()] for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise K2CError(f"not a line of 32-bit beats in hex: {exc}") from None
