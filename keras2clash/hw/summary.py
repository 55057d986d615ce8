"""What `emit` tells the user before any synthesis: cost and speed of the design it wrote.

Per layer: multipliers and on-chip storage from the exact hardware model (`hwmodel`): the
weight ROM, the line buffers of windowed layers next to the frame a naive design would store
(line buffers keep only the rows a window needs), and data registers. For the network: the
latency and initiation interval the model predicts (equal to simulation, tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from rich.console import Console
from rich.table import Table

from keras2clash.hw.hwmodel import timing
from keras2clash.hw.plan import LayerPlan
from keras2clash.hw.resources import layer_resources, runs_of
from keras2clash.jsontypes import Json, JsonObject
from keras2clash.registry import kind_of


def frame_bits(plan: LayerPlan) -> int:
    """Bits of one whole input frame of a windowed layer (what line buffers avoid storing)."""
    return plan.kind.frame_bits(plan) if plan.kind is not None else 0


def design_summary(plans: Sequence[LayerPlan]) -> JsonObject:
    """Per-layer resources and network timing as plain data (stored in manifest.json)."""
    layers: list[Json] = []
    runs = runs_of(plans)
    resources = [layer_resources(plan, runs) for plan in plans]
    for plan, res in zip(plans, resources):
        layers.append(
            {
                "name": plan.name,
                "type": plan.type,
                "pe": res.pe,
                "cycles": res.cycles,
                "multipliers": res.multipliers,
                "rom_bits": res.rom_bits,
                "line_buffer_bits": res.line_buffer_bits,
                "block_fifo_bits": res.block_fifo_bits,
                "frame_bits": frame_bits(plan),
                "register_bits": res.register_bits,
                "source_class": plan.kind.source_class(plan) if plan.kind is not None else "",
                "activation": plan.activation,
                "activation_table_bits": res.table_bits,
                "activation_doc": plan.activation_doc if plan.activation != "linear" else "",
            }
        )
        note = plan.kind.cost_note(plan) if plan.kind is not None else ""
        if note:  # a manifest without such a layer reads as before
            cast(JsonObject, layers[-1])["cost_note"] = note
    t = timing(list(plans))
    return {
        "layers": layers,
        "latency": t.first_latency,
        "interval": t.ii,
        "multipliers": sum(res.multipliers for res in resources),
        "memory_bits": sum(
            res.rom_bits + res.line_buffer_bits + res.block_fifo_bits + res.register_bits for res in resources
        ),
    }


def _rows(summary: JsonObject) -> list[JsonObject]:
    layers = summary["layers"]
    assert isinstance(layers, list)
    return [layer for layer in layers if isinstance(layer, dict)]


def render_summary(summary: JsonObject, console: Console) -> None:
    table = Table(
        title="design (exact hardware model); storage in bits",
        caption="p: processing elements, b: cycles per window; frame: what storing the "
        "layer's whole input would take instead of its line buffers",
    )
    for column in ("layer", "type", "p", "b", "mults", "ROM", "line buf", "frame", "regs"):
        table.add_column(column, justify="left" if column in ("layer", "type") else "right")
    for layer in _rows(summary):
        compute = (home := kind_of(str(layer["type"]))) is not None and home.has_knobs
        table.add_row(
            str(layer["name"]),
            str(layer["type"]) + (f" ({layer['source_class']})" if layer.get("source_class") else ""),
            str(layer["pe"]) if compute else "-",
            str(layer["cycles"]) if compute else "-",
            f"{layer['multipliers']:,}",
            f"{layer['rom_bits']:,}",
            f"{layer['line_buffer_bits']:,}",
            f"{layer['frame_bits']:,}" if layer["frame_bits"] else "-",
            f"{layer['register_bits']:,}",
        )
    console.print(table)
    for layer in _rows(summary):
        if layer.get("cost_note"):
            console.print(f"{layer['name']}: {layer['cost_note']}")
        if layer.get("block_fifo_bits"):
            console.print(f"{layer['name']}: a branch FIFO in block RAM, {layer['block_fifo_bits']:,} bits")
        if layer.get("activation_doc"):
            tables = layer.get("activation_table_bits", 0)
            console.print(
                f"{layer['name']}: {layer['activation_doc']}" + (f"; tables {tables:,} bits" if tables else "")
            )
    console.print(
        f"latency {summary['latency']} cycles (first input beat -> output), initiation interval "
        f"{summary['interval']:g} cycles, {summary['multipliers']:,} multipliers, "
        f"{summary['memory_bits']:,} bits on chip"
    )
