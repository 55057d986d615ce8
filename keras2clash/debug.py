"""Debugging from Python: `predict` (the golden model's outputs, no file written) and
`trace` (every layer's fixed-point output beside Keras' float output of the same layer).

Both take whatever a user has at hand — a `keras.Model`, a model file, a planned
`network.Network`, or an emitted project folder — and go through the one loading path
(`network.load_network`, `backend.project.load_project`), so what they show is what `emit`
builds and the hardware computes, bit for bit. The per-layer records and their views
(table, plot, first divergence) are `report.trace`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from keras2clash.backend.project import MANIFEST, SOURCE_MODEL, Project, load_project
from keras2clash.data import load_inputs, load_named_inputs
from keras2clash.design import DEFAULT_FORMAT, DesignKnobs, DesignOptions
from keras2clash.errors import K2CError
from keras2clash.frontend import walk
from keras2clash.frontend.convert import to_graph
from keras2clash.frontend.keras_ref import PRE_ACTIVATION, keras_layer_outputs
from keras2clash.frontend.load import load_keras_model
from keras2clash.hw.inputs import network_inputs, several_inputs
from keras2clash.hw.output import output_plans, several_outputs
from keras2clash.hw.plan import LayerPlan
from keras2clash.ir.graph import Graph
from keras2clash.network import Network, load_network
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat
from keras2clash.report.trace import LayerTrace, Trace, error_stats

if TYPE_CHECKING:
    from typing_extensions import Unpack


@dataclass(frozen=True)
class Prediction:
    """The golden model's (= the hardware's) answer for a batch of inputs.

    `raw` are the output port's integers, `values` the reals they stand for
    (`raw * 2^-frac` of `output_format`); `classes` is what the core's class output gives
    (the argmax of the output layer's values before a monotone activation, lowest index on
    ties: docs/guide/contract.md), None when the output is an image or a sequence (no class);
    `input_raw` the quantized inputs the core reads (a model of several inputs: a tuple of
    them in the model's order, `input_formats` theirs, `input_format` the first's). An image output is flattened row-major
    (the order its beats leave the core): `values.reshape(-1, *output_shape)` restores it."""

    raw: np.ndarray  # (N, n_out) int64
    values: np.ndarray  # (N, n_out) float64
    classes: np.ndarray | None  # (N,) int64; None: the output has no class
    output_format: FixedFormat
    input_raw: np.ndarray | tuple[np.ndarray, ...]  # (N, *input_shape) int64, one per input
    input_format: FixedFormat
    output_shape: tuple[int, ...] = ()  # one sample's output, as the hardware streams it
    input_formats: tuple[FixedFormat, ...] = ()  # every input's format, in the model's order
    input_names: tuple[str, ...] = ()  # every input's name, in the model's order
    output_name: str = ""  # the output layer's name

    def __len__(self) -> int:
        return len(self.raw)


@dataclass(frozen=True)
class _Source:
    """What `predict` and `trace` need from whichever object the user gave."""

    name: str
    plans: list[LayerPlan]
    params: dict[str, golden.QuantizedLayer]
    keras_model: Any = None  # None: a Network planned from a graph alone (no Keras to compare with)
    model_path: Path | None = None  # a project's source model, loaded only when `trace` needs it

    def keras(self) -> Any:
        if self.keras_model is None and self.model_path is not None:
            if not self.model_path.is_file():
                raise K2CError(
                    f"{self.model_path} is missing: trace compares with the Keras model the project "
                    "was emitted from; emit the project again"
                )
            return load_keras_model(self.model_path)
        return self.keras_model


def _resolve(model: Any, design: DesignOptions | str | FixedFormat | None, knobs: DesignKnobs) -> _Source:
    """A Network, a Project, an emitted project folder, a keras.Model or a model file."""
    if isinstance(model, (str, Path)) and Path(model).is_dir() and (Path(model) / MANIFEST).is_file():
        model = load_project(model)
    if isinstance(model, (Network, Project)) and (design is not None or knobs):
        stated = (design.changed() or ("format",)) if isinstance(design, DesignOptions) else ()  # a format at least
        given = sorted(knobs) + list(stated) + (["format"] if isinstance(design, (str, FixedFormat)) else [])
        raise K2CError(
            f"{', '.join(given)}: options for planning a Keras model; a planned network or "
            "an emitted project has its formats already"
        )
    if isinstance(model, Project):
        return _Source(model.name, model.plans, model.params, model_path=model.root / SOURCE_MODEL)
    if not isinstance(model, Network):
        # the golden model needs no FIFO depths (a model of several outputs has no hardware)
        model = load_network(model, DEFAULT_FORMAT if design is None else design, fifos=False, **knobs)
    return _Source(model.name, model.plans, model.params, keras_model=model.keras_model)


def _inputs(x: Any, input_shape: tuple[int, ...], limit: int | None) -> np.ndarray:
    """`X` as (N, *input_shape) floats: the IR's shape or the Keras one (a 1-D sequence is one
    row high in the IR), or a single sample of the input shape, or an .npz file's `x`; the
    first `limit` samples; one clear error otherwise."""
    if limit is not None and limit < 1:
        raise K2CError(f"the number of samples must be at least 1, got {limit}")
    if isinstance(x, (str, Path)):
        return load_inputs(x, input_shape)[:limit]
    try:
        x = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise K2CError(f"inputs are not an array: {exc}") from None
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise K2CError(f"inputs are {x.dtype}, not numbers")
    if tuple(x.shape) == tuple(input_shape):
        x = x[None]
    size = math.prod(input_shape)
    if x.ndim < 2 or len(x) == 0 or math.prod(x.shape[1:]) != size:
        raise K2CError(f"inputs have shape {tuple(x.shape)}; the model expects (N, {', '.join(map(str, input_shape))})")
    if not np.all(np.isfinite(x)):
        raise K2CError("inputs contain NaN or infinity")
    return x.astype(np.float64).reshape(len(x), *input_shape)[:limit]


def _network_inputs(plans: list[LayerPlan], x: Any, limit: int | None) -> Any:
    """`_inputs` for every input of the network: one array for a model of one input; a tuple
    of arrays for a model of several (`x` a list in the model's order, a dict by input
    name, or an .npz file with `x_<input name>` per input)."""
    ports = network_inputs(plans)
    if not several_inputs(plans):
        return _inputs(x, ports[0].shape, limit)
    if isinstance(x, (str, Path)):
        return tuple(a[:limit] for a in load_named_inputs(x, [(p.name, p.shape) for p in ports]))
    xs = tuple(_inputs(a, p.shape, limit) for p, a in zip(ports, golden.input_arrays(plans, x)))
    if len({len(a) for a in xs}) != 1:
        raise K2CError("the inputs have different numbers of samples: " + ", ".join(str(len(a)) for a in xs))
    return xs


def predict(
    model: Any,
    x: Any,
    design: DesignOptions | str | FixedFormat | None = None,
    *,
    limit: int | None = None,
    **knobs: Unpack[DesignKnobs],
) -> Prediction | list[Prediction]:
    """The golden model's outputs for inputs `x` (an array, or an .npz file's `x`; the first
    `limit` samples; a model of several inputs takes a list of arrays in the model's order, a
    dict by input name, or an .npz with `x_<input name>` per input): raw integers, the reals they stand for,
    and the class (the core's, or the argmax of the values a core without one sends). Nothing
    is written to disk. A model of several outputs gives a list of them, one `Prediction` per
    output in the model's order (as `keras.Model.predict` gives one array per output).

    `model` is a `keras.Model`, a model file (.keras, .h5, JSON config), a planned
    `network.Network` or an emitted project folder (its formats; `design` and the knobs are
    then refused). For a Keras model, `design` (a `DesignOptions`, or the format, default
    1,7,8) and the knobs (`layer_formats`, `input_format`, `bits`, `calibration`, `softmax`,
    ...) are `emit`'s."""
    source = _resolve(model, design, knobs)
    xs = _network_inputs(source.plans, x, limit)
    x_raw = golden.quantize_inputs(source.plans, xs)
    heads = output_plans(source.plans)
    formats = tuple(port.fmt for port in network_inputs(source.plans))
    names = tuple(port.name for port in network_inputs(source.plans))
    predictions = [
        Prediction(
            raw=np.asarray(raw, dtype=np.int64),
            values=head.out_fmt.to_real(raw),
            classes=classes,
            output_format=head.out_fmt,
            input_raw=x_raw,
            input_format=formats[0],
            output_shape=head.output_shape,
            input_formats=formats,
            input_names=names,
            output_name=head.name,
        )
        for head, (raw, classes) in zip(heads, golden.predict_outputs(source.plans, source.params, x_raw))
    ]
    return predictions if several_outputs(source.plans) else predictions[0]


def trace(
    model: Any,
    x: Any,
    design: DesignOptions | str | FixedFormat | None = None,
    *,
    limit: int | None = None,
    **knobs: Unpack[DesignKnobs],
) -> Trace:
    """Every layer's fixed-point output (raw and real) on inputs `x` (several inputs as for
    `predict`; a row per input) beside Keras' float
    output of the same layer, with error statistics (`report.trace`). `model` as for
    `predict`; the Keras model is needed (a project's `source_model.keras`).

    Each hardware layer is compared with the Keras tensor it computes: a Dense whose
    BatchNormalization and activation were folded and fused into it with the output of the
    last of those Keras layers; a ZeroPadding2D folded into a convolution leaves the
    convolution's own output; a softmax left out (`softmax="argmax"`) compares the
    logits with Keras' values before the softmax; a record Keras has no tensor for (the
    depthwise half of a SeparableConv2D) is listed without a Keras column."""
    source = _resolve(model, design, knobs)
    keras_model = source.keras()
    if keras_model is None:
        raise K2CError(
            "trace compares with Keras: give the Keras model (or a file, or a project), "
            "not a network planned from a graph alone"
        )
    xs = _network_inputs(source.plans, x, limit)
    graph = to_graph(keras_model)  # before --softmax argmax: which fused layers it had
    nodes = walk.layer_nodes(keras_model)
    order = {str(node.layer.name): k for k, node in enumerate(nodes)}
    classes = {str(node.layer.name): type(node.layer).__name__ for node in nodes}
    softmaxes = {str(node.layer.name) for node in nodes if _applies_softmax(node.layer)}
    keras_inputs = {str(node.layer.name): tuple(node.inputs) for node in nodes}
    targets = [_keras_target(plan, graph, order, classes, softmaxes, keras_inputs) for plan in source.plans]
    pre = tuple(t.layer for t in targets if t.layer is not None and t.pre_activation)
    floats = keras_layer_outputs(keras_model, xs, pre_activation=pre)
    x_raw = golden.quantize_inputs(source.plans, xs)
    raw = golden.run_all(source.plans, source.params, x_raw)

    rows = [
        _row(
            port.name,
            "input",
            "InputLayer",
            keras_input,
            (),
            f"the inputs quantized to {port.fmt}",
            port.fmt,
            raw[port.name],
            floats[keras_input],
        )
        for port, keras_input in zip(network_inputs(source.plans), walk.input_names(keras_model))
    ]
    for plan, target in zip(source.plans, targets):
        key = None if target.layer is None else target.layer + (PRE_ACTIVATION if target.pre_activation else "")
        rows.append(
            _row(
                plan.name,
                plan.type,
                target.keras_class,
                target.layer,
                target.fused,
                target.note,
                plan.out_fmt,
                raw[plan.name],
                None if key is None else floats[key],
            )
        )
    return Trace(model=source.name, samples=len(rows[0].raw), layers=rows)


@dataclass(frozen=True)
class _Target:
    """The Keras tensor a hardware layer's output is compared with."""

    layer: str | None  # Keras layer name (None: Keras has no such tensor)
    keras_class: str
    fused: tuple[str, ...]
    note: str
    pre_activation: bool = False


def _applies_softmax(layer: Any) -> bool:
    """A Keras Softmax layer, or a layer whose own activation is the softmax."""
    activation = getattr(layer, "activation", None)
    return type(layer).__name__ == "Softmax" or getattr(activation, "__name__", "") == "softmax"


def _keras_target(
    plan: LayerPlan,
    graph: Graph,
    order: dict[str, int],
    classes: dict[str, str],
    softmaxes: set[str],
    keras_inputs: dict[str, tuple[str, ...]],
) -> _Target:
    """Which Keras layer's output equals `plan`'s (see `trace`), with a note saying why."""
    record = graph.by_name().get(plan.name)
    fused = tuple(record.fused) if record is not None else ()
    if plan.name not in order:
        owners = [r.name for r in graph.consumers(plan.name) if r.name in order] if record is not None else []
        part = f" of {classes[owners[0]]} '{owners[0]}'" if owners else " of a Keras layer"
        return _Target(None, "", fused, f"no Keras tensor: the first part{part} (one Keras layer, two records)")
    moved = _folded_past(plan.name, graph, order, keras_inputs)
    if moved is not None:
        layer, holder = moved
        note = f"no Keras tensor: {classes[layer]} '{layer}' before it is folded into '{holder}' after it"
        return _Target(None, "", fused, note)
    after = sorted((n for n in (plan.name, *fused) if order.get(n, -1) >= order[plan.name]), key=order.__getitem__)
    before = [n for n in fused if n in order and order[n] < order[plan.name]]
    notes = [f"{classes[n]} '{n}' folded in" for n in before]
    notes += [f"{classes[n]} '{n}' {'folded' if classes[n] == 'BatchNormalization' else 'fused'} in" for n in after[1:]]
    pre = False
    applying = [n for n in after if n in softmaxes]
    if record is not None and record.activation == "softmax" and plan.activation != "softmax" and applying:
        notes.append("softmax left out (argmax): compared before Keras' softmax")
        k = after.index(applying[-1])
        if k > 0 and classes[after[k]] in ("Activation", "Softmax"):  # a softmax layer: the tensor before it
            after = after[:k]
        else:  # the layer's own activation: its output without it
            after, pre = after[: k + 1], True
    last = after[-1]
    return _Target(last, classes[last], fused, "; ".join(notes), pre)


def _folded_past(
    name: str, graph: Graph, order: dict[str, int], keras_inputs: dict[str, tuple[str, ...]]
) -> tuple[str, str] | None:
    """A Keras layer between record `name` and the records it reads that a pass folded into a
    later record (an affine folded through a Flatten into the Dense after it), and that
    record: `name` then moves values Keras never has. None when every such layer was folded
    into `name` itself or into its producer, or removed as an identity."""
    holders = {n: r.name for r in graph.layers for n in r.fused if order.get(n, -1) < order.get(r.name, -1)}
    records = graph.by_name()
    pending = list(keras_inputs.get(name, ()))
    while pending:
        tensor = pending.pop()
        if tensor in records or tensor not in keras_inputs:
            continue  # a record the graph keeps, or the network input
        if tensor in holders and holders[tensor] != name:
            return tensor, holders[tensor]
        pending.extend(keras_inputs[tensor])
    return None


def _row(
    name: str,
    kind: str,
    keras_class: str,
    keras_layer: str | None,
    fused: tuple[str, ...],
    note: str,
    fmt: FixedFormat,
    raw: np.ndarray,
    keras: np.ndarray | None,
) -> LayerTrace:
    raw = np.asarray(raw, dtype=np.int64).reshape(len(raw), -1)
    fixed = fmt.to_real(raw)
    if keras is not None and keras.shape != fixed.shape:  # never expected: say so instead of comparing wrongly
        keras, note = None, f"Keras output {keras.shape[1:]} values, hardware {fixed.shape[1:]}: not compared"
    return LayerTrace(
        name=name,
        kind=kind,
        keras_class=keras_class,
        keras_layer=keras_layer,
        fused=fused,
        note=note,
        fmt=fmt,
        raw=raw,
        fixed=fixed,
        keras=keras,
        stats=None if keras is None else error_stats(fixed, keras, fmt, raw),
    )
