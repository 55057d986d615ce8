"""The Haskell of the shape layers (ZeroPadding, Cropping, UpSampling, Reshape/Permute): the
`_layer_entry` fields of one layer (`doc`, `body`, `notes`, `uses`). They move values, so
every one keeps its input's format.
"""

from __future__ import annotations

from typing import Any

from keras2clash.hw.plan import LayerPlan
from keras2clash.hw.shape_blocks import rebeat_groups


def _snats(*values: int) -> str:
    return " ".join(f"(SNat @{v})" for v in values)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def shape_entry(plan: LayerPlan) -> dict[str, Any]:
    """What `emitter._layer_entry` needs for one shape layer."""
    shapes = f"{_shape_text(plan.input_shape)} -> {_shape_text(plan.output_shape)}"
    h, w = plan.input_shape[:2] if len(plan.input_shape) == 3 else (1, 1)
    if plan.type == "zeropad2d":
        top, bottom, left, right = plan.pads
        return {"doc": f"{shapes}, zero padding (top {top}, bottom {bottom}, left {left}, right {right})",
                "body": [f"Pad.pad {{- image -}} {_snats(h, w)} {{- top bottom left right -}} "
                         f"{_snats(top, bottom, left, right)} 0"],
                "uses": ["pad"]}
    if plan.type == "crop2d":
        top, bottom, left, right = plan.crops
        return {"doc": f"{shapes}, cropping (top {top}, bottom {bottom}, left {left}, right {right})",
                "body": [f"Crop.crop {{- image -}} {_snats(h, w)} {{- top bottom left right -}} "
                         f"{_snats(top, bottom, left, right)}"],
                "notes": ["Drops the border beats as they arrive (no storage)."],
                "uses": ["crop2d"]}
    if plan.type == "upsample2d":
        sh, sw = plan.size
        return {"doc": f"{shapes}, nearest upsampling by {sh}x{sw}",
                "body": [f"Upsample.upsample {{- width -}} (SNat @{w}) {{- repeats down, across -}} {_snats(sh, sw)}"],
                "notes": [f"Keeps one input row ({w} pixel(s)) in a block-RAM line buffer."],
                "uses": ["upsample2d"]}
    if plan.type == "reshape":
        return _reshape_entry(plan, shapes)
    raise ValueError(f"no emitter for layer type {plan.type!r}")


def _reshape_entry(plan: LayerPlan, shapes: str) -> dict[str, Any]:
    """A relabelling is a wire (`id`); otherwise Collect g_in beats, Scatter into g_out."""
    g_in, g_out = rebeat_groups(plan)
    c_in, c_out = plan.input_shape[-1], plan.output_shape[-1]
    source = plan.layer.source_class if plan.layer is not None else "Reshape"
    doc = f"{shapes}, {source} (same row-major order)"
    if (g_in, g_out) == (1, 1):
        return {"doc": doc, "body": ["id"], "uses": [],
                "notes": [f"A relabelling: the same beats of {c_in} value(s) in the same order; no hardware."]}
    body, uses = [], []
    if g_in > 1:
        body.append(f"Collect.collect (SNat @{g_in})")
        uses.append("flatten")
    if g_out > 1:
        body.append(f"Scatter.scatter (SNat @{g_out})")
        uses.append("scatter")
    note = (f"Regroups beats of {c_in} value(s) into beats of {c_out}: groups of {g_in * c_in} value(s), "
            f"{g_in} beat(s) in, {g_out} out.")
    return {"doc": doc, "body": body, "uses": uses, "notes": [note]}
