"""The attention kind: Keras' MultiHeadAttention between its input projections and its
output projection, scaled dot-product attention over a whole sequence.

A MultiHeadAttention layer `<name>` becomes records the stages already build, around this
kind's one (`attention_records`): its query, key and value projections (`<name>_query`,
`<name>_key`, `<name>_value`: Dense per step, 1x1 convolutions; the query's carries Keras'
`1/sqrt(key_dim)` scale in its kernel and bias), their concatenation per step
(`<name>_qkv`), this kind's record (`<name>_attention`) and the output projection (`<name>`,
Dense per step), which takes the formats and knobs a config gives the Keras layer. HGQ2's
QMultiHeadAttention (`frontend.hgq_attention`) becomes the same records with its own
formats: its query unscaled, the scale in the softmax (`Attention.scale`), exact scores.

Arithmetic (docs/guide/contract.md, "Attention"), on a step's `q ++ k ++ v` in the input's
format: each score `q[t,i] . k[j,i]` exact, rounded once to the score format (a key after
its query scores the format's minimum under a causal mask); each row of scores through the
softmax (`quant.activations.softmax_raw`) to the probability format; each output
`sum_j p[t,i,j] v[j,i]` exact, rounded once to the output format (with its modes). The
score format is the network's default format (or, `exact_scores`, one that keeps every
score), the probabilities' its width with one integer bit (or the model's own).

Block: `K2C.Attention` (the exact hardware model `hw.events.Playback`, then K2C.Pipe,
Collect and Scatter blocks): the sequence held, one score a cycle, the row's softmax, one
probability a cycle into the mix, the heads collected into a step's output beat.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypedDict, Unpack

import numpy as np

from keras2clash.backend.haskell import kind_template, requantizer
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import ConversionState, KerasLayer, _check_keras_shape, _to_numpy, register_converter
from keras2clash.hw.events import (
    Block,
    Collect,
    EngineTiming,
    Max,
    Playback,
    Scatter,
    Stateful,
    pipe_block,
    softmax_divide_depth,
    softmax_front_depth,
    tree_depth,
)
from keras2clash.hw.plan import Common, Knobs, LayerFormats, LayerPlan, NoParams, Params
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Depth, Entry, Kind, Storage, narrow, params_of, refuse_constant_formats
from keras2clash.kinds.conv import Conv2D
from keras2clash.kinds.merge import Merge
from keras2clash.quant import activations
from keras2clash.quant.exact import QuantizedLayer
from keras2clash.quant.formats import FixedFormat, parse_format, requantize

HASKELL = kind_template("attention.hs.j2")
STAGES = kind_template("stages.hs.j2")

MIX_DEPTH = 4
"""K2C.Attention's MixDepth: a probability and its key's values (three times: a plain copy
between the multiplexers' register and the multipliers' own), their products."""


def score_depth(key_dim: int) -> int:
    """K2C.Attention's ScoreDepth: the operands (twice), the products, their exact sum (a
    register a level of the tree), the rounding and the mask."""
    return 3 + tree_depth(key_dim) + 1


SUM_DEPTH = 1
"""K2C.Attention's SumDepth: the registers after a row's sums (accumulated as its products come,
K2C.Collect.collectSum): the rounding."""


@register_record
@dataclass(frozen=True)
class Attention(Layer):
    """Scaled dot-product attention on a sequence `(1, steps, 2 h dk + h dv)` of `q ++ k ++ v`
    per step (the query already scaled), `heads` heads; output `(1, steps, h dv)`."""

    heads: int = 1
    key_dim: int = 1
    value_dim: int = 1
    causal: bool = False
    scale: float = 1.0  # the softmax reads `scale * score` (HGQ2 scales inside its softmax, Keras the query)
    exact_scores: bool = False  # the scores kept exact (`exact_score_format`), not rounded to the default format
    probability_format: str = ""  # the probabilities' format (a model's own); "": `probability_format(default)`

    type: ClassVar[str] = "attention"
    keras_class: ClassVar[str] = "MultiHeadAttention"


def _projection(
    name: str, source: str, shape: tuple[int, ...], kernel: np.ndarray, bias: np.ndarray, use_bias: bool
) -> Conv2D:
    """A Dense per step of `source` (IR shape `(1, steps, C)`) as a 1x1 convolution."""
    kernel = kernel.reshape(shape[-1], -1)
    out = (*shape[:-1], kernel.shape[1])
    return Conv2D(
        name=name,
        inputs=(source,),
        input_shapes=(shape,),
        output_shape=out,
        kernel=kernel.reshape(1, 1, *kernel.shape),
        bias=bias.reshape(-1) if use_bias else np.zeros(kernel.shape[1]),
        use_bias=use_bias,
        source_class="Dense",
    )


def _weights(dense: Any, use_bias: bool) -> tuple[np.ndarray, np.ndarray]:
    kernel = _to_numpy(dense.kernel).astype(np.float64)
    bias = _to_numpy(dense.bias).astype(np.float64) if use_bias and dense.bias is not None else np.zeros(0)
    return kernel, bias


@dataclass(frozen=True)
class Projection:
    """One of the layer's four Dense-per-step projections: kernel `(C, ...)`, bias (empty
    without one)."""

    kernel: np.ndarray
    bias: np.ndarray


class AttentionOptions(TypedDict, total=False):
    """The attention record's fields beyond the geometry that a converter may set."""

    scale: float
    exact_scores: bool
    probability_format: str


def check_call(name: str, class_name: str, state: ConversionState, attention_axes: Sequence[int] | None) -> None:
    """What a multi-head attention call must be to be built: a query and a value (the key is
    the value), sequences of one length, attention over the sequence, no scores returned."""
    options = state.options
    if options.get("attention_mask") is not None or options.get("key") is not None:
        raise K2CError(
            f"{class_name} layer '{name}' is called with an attention_mask or a key of its own; "
            "built: query and value (the key is the value), with or without use_causal_mask"
        )
    if options.get("return_attention_scores"):
        raise K2CError(f"{class_name} layer '{name}' returns its attention scores too; not built")
    if len(state.inputs) != 2:
        raise K2CError(f"{class_name} layer '{name}' reads {len(state.inputs)} tensors; query and value are built")
    query_shape, value_shape = state.shapes
    if len(query_shape) != 3 or query_shape[0] != 1 or len(value_shape) != 3 or value_shape[0] != 1:
        raise K2CError(
            f"{class_name} layer '{name}' attends over inputs of shapes {state.keras_shapes}; "
            "sequences (steps, features) are built"
        )
    if query_shape[1] != value_shape[1]:
        raise K2CError(
            f"{class_name} layer '{name}': its query has {query_shape[1]} steps and its value "
            f"{value_shape[1]}; attention between sequences of one length is built"
        )
    if attention_axes is not None and tuple(int(a) % 3 for a in attention_axes) != (1,):
        raise K2CError(f"{class_name} layer '{name}' attends over axes {attention_axes}; the sequence axis is built")


def attention_records(
    layer: KerasLayer,
    state: ConversionState,
    projections: tuple[Projection, Projection, Projection, Projection],
    **attention: Unpack[AttentionOptions],
) -> tuple[Layer, ...]:
    """The records of a multi-head attention layer `<name>` (checked by `check_call`): its
    query, key and value projections, their concatenation, the attention (`attention`: its
    record's fields beyond the geometry) and the output projection `<name>`."""
    name = str(layer.name)
    heads, key_dim = int(layer.num_heads), int(layer.key_dim)
    value_dim = int(layer.value_dim or key_dim)
    query_shape, value_shape = state.shapes
    query, value = state.inputs
    records: list[Layer] = [
        _projection(f"{name}_{part}", source, shape, p.kernel, p.bias, p.bias.size > 0)
        for part, source, shape, p in zip(
            ("query", "key", "value"), (query, value, value), (query_shape, value_shape, value_shape), projections
        )
    ]
    steps = query_shape[1]
    width = 2 * heads * key_dim + heads * value_dim
    qkv = (1, steps, width)
    records.append(
        Merge(
            name=f"{name}_qkv",
            inputs=tuple(r.name for r in records),
            input_shapes=tuple(r.output_shape for r in records),
            output_shape=qkv,
            op="concatenate",
        )
    )
    mixed = (1, steps, heads * value_dim)
    records.append(
        Attention(
            name=f"{name}_attention",
            inputs=(records[-1].name,),
            input_shapes=(qkv,),
            output_shape=mixed,
            heads=heads,
            key_dim=key_dim,
            value_dim=value_dim,
            causal=bool(state.options.get("use_causal_mask", False)),
            **attention,
        )
    )
    output = projections[3]
    out = _projection(name, records[-1].name, mixed, output.kernel, output.bias, output.bias.size > 0)
    _check_keras_shape(layer, state, out.output_shape)
    return (*records, out)


@register_converter("MultiHeadAttention")
def _convert_multi_head_attention(layer: KerasLayer, state: ConversionState) -> tuple[Layer, ...]:
    """Keras' scale `1/sqrt(key_dim)` multiplies the query; here it goes into the query's
    kernel and bias, rounded with the weights."""
    check_call(str(layer.name), "MultiHeadAttention", state, layer.attention_axes)
    scale = 1.0 / math.sqrt(float(layer.key_dim))
    dense = (layer._query_dense, layer._key_dense, layer._value_dense, layer._output_dense)
    parts = [Projection(*_weights(d, bool(layer.use_bias))) for d in dense]
    parts[0] = Projection(parts[0].kernel * scale, parts[0].bias * scale)
    return attention_records(layer, state, (parts[0], parts[1], parts[2], parts[3]))


@dataclass(frozen=True)
class AttentionParams(Params):
    """The sequence, the heads and their sizes, the mask, and the formats of the scores and
    the probabilities."""

    steps: int = 1
    heads: int = 1
    key_dim: int = 1
    value_dim: int = 1
    causal: bool = False
    score_fmt: FixedFormat = FixedFormat(1, 7, 8)
    prob_fmt: FixedFormat = FixedFormat(1, 1, 14)
    scale: float = 1.0


def probability_format(fmt: FixedFormat) -> FixedFormat:
    """The probabilities' format: `fmt`'s width with one integer bit (they lie in [0, 1])."""
    return FixedFormat(1, 1, fmt.hw_bits - 2)


def exact_score_format(layer: Attention, in_fmt: FixedFormat, prob_fmt: FixedFormat) -> FixedFormat:
    """A format that holds every score `q . k` of values of `in_fmt` exactly (the sum's own
    Clash type in K2C.Attention: its rounding keeps every value). Under a causal mask it has
    integer bits enough that a masked score (the format's minimum) lies beyond the softmax
    table's last nonzero entry for any row: its probability is exactly 0, as when HGQ2
    multiplies the masked exponentials by 0."""
    a = in_fmt.container
    widest = 2 * a.int + 1 + (layer.key_dim - 1).bit_length()  # |score| <= key_dim 2^(2 int) < 2^(widest - 1)
    fmt = FixedFormat(1, widest, 2 * a.frac)
    while layer.causal:
        table = activations.softmax_table(fmt, prob_fmt, layer.input_shape[-2], layer.scale)
        nearest = (1 << (fmt.int + fmt.frac)) - (1 << (widest - 1 + fmt.frac))  # the least raw max - masked
        if nearest >> table.shift >= len(table.values) - 1:
            break
        fmt = FixedFormat(1, fmt.int + 1, fmt.frac)
    return fmt


def _geometry(layer: Attention, **formats: FixedFormat) -> AttentionParams:
    """The record's sequence, heads, sizes, mask and scale as parameters (with `formats`)."""
    return AttentionParams(
        steps=layer.input_shape[-2],
        heads=layer.heads,
        key_dim=layer.key_dim,
        value_dim=layer.value_dim,
        causal=layer.causal,
        scale=layer.scale,
        **formats,
    )


def softmax_text(p: AttentionParams) -> str:
    """The row's softmax as an activation text (its scale, when not 1)."""
    return activations.canonical("softmax", scale=p.scale)


def _split(x: np.ndarray, p: AttentionParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch `(N, 1, steps, width)` as q, k `(N, steps, h, dk)` and v `(N, steps, h, dv)`."""
    n, hk = len(x), p.heads * p.key_dim
    x = x.reshape(n, p.steps, -1)
    shape = (n, p.steps, p.heads)
    return (
        x[..., :hk].reshape(*shape, p.key_dim),
        x[..., hk : 2 * hk].reshape(*shape, p.key_dim),
        x[..., 2 * hk :].reshape(*shape, p.value_dim),
    )


def _mask(p: AttentionParams) -> np.ndarray:
    """Which (query, key) pairs a causal mask hides: `(steps, steps)`."""
    t = np.arange(p.steps)
    return (t[None, :] > t[:, None]) if p.causal else np.zeros((p.steps, p.steps), dtype=bool)


class AttentionKind(Kind):
    records = (Attention,)
    params_type: ClassVar[type[Params]] = AttentionParams
    keeps_format = False

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        layer = common.layer
        assert isinstance(layer, Attention)
        override = refuse_constant_formats(layer, override)
        prob = parse_format(layer.probability_format) if layer.probability_format else probability_format(fmt)
        score = exact_score_format(layer, common.in_fmts[0], prob) if layer.exact_scores else fmt
        params = _geometry(layer, score_fmt=score, prob_fmt=prob)
        return common.plan(out_fmt=override.output or fmt, params=params)

    def check(self, plan: LayerPlan) -> None:
        """The input, the scores and the probabilities in signed formats with the default
        modes (their Clash types are the formats); the output in any format (its rounding is
        `backend.haskell.requantizer`'s)."""
        p = params_of(plan, AttentionParams)
        for what, fmt in (("input", plan.in_fmt), ("score", p.score_fmt), ("probability", p.prob_fmt)):
            if not fmt.is_plain:
                raise K2CError(
                    f"layer '{plan.name}' (attention): its {what} format {fmt} is not built; attention reads "
                    "its input and computes its scores and probabilities in signed formats with the default "
                    "modes, e.g. 1,7,8"
                )

    def window(self, input_shape: tuple[int, ...], params: Params) -> int:
        """K of a score: the key dimension."""
        return narrow(params, AttentionParams).key_dim

    def multipliers(self, plan: LayerPlan) -> int:
        """One score a cycle (`key_dim` products) and one probability a cycle (`value_dim`)."""
        p = params_of(plan, AttentionParams)
        return p.key_dim + p.value_dim

    def windows_per_image(self, plan: LayerPlan) -> int:
        p = params_of(plan, AttentionParams)
        return p.steps * p.heads * p.steps

    # --- the golden model and the float model -------------------------------------------

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        p = params_of(plan, AttentionParams)
        x = np.asarray(xs[0]).astype(object)
        q, k, v = _split(x, p)
        fi = plan.in_fmt.raw_frac
        scores = requantize(np.einsum("ntid,njid->nitj", q, k), 2 * fi, p.score_fmt)
        scores = np.where(_mask(p)[None, None], p.score_fmt.raw_min, scores)
        probs = activations.softmax_raw(scores, p.score_fmt, p.prob_fmt, p.scale)
        mixed = np.einsum("nitj,njie->ntie", probs, v)
        out = requantize(mixed, p.prob_fmt.raw_frac + fi, plan.out_fmt)
        return np.asarray(out, dtype=np.int64).reshape(len(x), *plan.output_shape)

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        assert isinstance(layer, Attention)
        p = _geometry(layer)
        q, k, v = _split(np.asarray(xs[0], dtype=np.float64), p)
        scores = layer.scale * np.einsum("ntid,njid->nitj", q, k)
        scores = np.where(_mask(p)[None, None], -np.inf, scores)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True)
        out = np.einsum("nitj,njie->ntie", probs, v).reshape(len(q), *layer.output_shape)
        return None, out

    # --- the hardware model --------------------------------------------------------------

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        p = params_of(plan, AttentionParams)
        heads = Collect(p.heads, down, mx)
        sums = pipe_block(SUM_DEPTH, heads, mx, blocks)
        row = Collect(p.steps, sums, mx, settle=2)  # K2C.Collect.collectSum
        mix = pipe_block(MIX_DEPTH, row, mx, blocks)
        mixer = Scatter(p.steps, mix, mx)
        # the row's softmax with one division a cycle (K2C.Softmax.softmaxSerialS)
        quotients = Collect(p.steps, mixer, mx)
        divisions = pipe_block(softmax_divide_depth(p.prob_fmt.raw_frac), quotients, mx, blocks)
        spread = Scatter(p.steps, divisions, mx)
        softmax = pipe_block(softmax_front_depth(p.steps), spread, mx, blocks)
        scores = Collect(p.steps, softmax, mx)
        first = pipe_block(score_depth(p.key_dim), scores, mx, blocks)
        store = Playback(p.steps, p.steps * p.heads * p.steps, first, mx, lambda: mixer.ready)
        blocks.extend((heads, row, mixer, quotients, spread, scores, store))
        return store

    def storage(self, plan: LayerPlan) -> Storage:
        """The sequence in LUT RAM; the rows of scores and probabilities, the row's sums and the
        product registered before it is added, the heads of a step, and the counters in
        registers; the softmax's exponential table."""
        p = params_of(plan, AttentionParams)
        fi, fs, fp, fo = plan.in_fmt, p.score_fmt, p.prob_fmt, plan.out_fmt
        product = fp.hw_bits + fi.hw_bits + max(p.steps - 1, 1).bit_length()
        rows = p.steps * fs.hw_bits + p.steps * fp.hw_bits
        counters = 5 * max(p.steps - 1, 1).bit_length() + 2 * max(p.heads - 1, 1).bit_length() + 4
        table = activations.softmax_table(fs, fp, p.steps, p.scale)
        return Storage(
            register_bits=rows + 2 * p.value_dim * product + p.heads * p.value_dim * fo.hw_bits + counters,
            fifo_bits=p.steps * plan.input_shape[-1] * fi.hw_bits,
            table_bits=len(table.values) * (table.frac + 2),
        )

    # --- the backend ---------------------------------------------------------------------

    def extra_activations(self, plan: LayerPlan, fn: str) -> tuple[tuple[str, LayerPlan], ...]:
        """The softmax over a row of scores: a standalone activation from the score format to
        the probabilities'."""
        p = params_of(plan, AttentionParams)
        row = (1, 1, p.steps)
        softmax = replace(
            plan,
            type="activation",
            activation=softmax_text(p),
            input_shape=row,
            output_shape=row,
            in_fmt=p.score_fmt,
            out_fmt=p.prob_fmt,
            knobs=Knobs(pe=1, cycles=p.steps),  # one division a cycle: a row comes once every `steps` scores
            params=NoParams(),
        )
        return ((f"{fn}_softmax", softmax),)

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        p = params_of(plan, AttentionParams)
        fo = p.prob_fmt.raw_frac
        return (
            Depth("score", HASKELL.score_depth(p.key_dim), score_depth(p.key_dim), "attention"),
            Depth("mix", HASKELL.mix_depth(), MIX_DEPTH, "attention"),
            Depth("sum", HASKELL.sum_depth(), SUM_DEPTH, "attention"),
            Depth("softmax", STAGES.softmax_front_depth(p.steps), softmax_front_depth(p.steps), "softmax"),
            Depth("division", STAGES.softmax_divide_depth(fo), softmax_divide_depth(fo), "softmax"),
        )

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        p = params_of(plan, AttentionParams)
        table = activations.describe(softmax_text(p), p.score_fmt, p.prob_fmt, p.steps)
        finish = requantizer(plan.out_fmt)
        return Entry(
            doc=HASKELL.doc(p.steps, p.heads, p.key_dim, p.value_dim, p.causal),
            body=(HASKELL.attention(p.steps, p.heads, p.key_dim, p.value_dim, p.causal, fn, finish),),
            notes=(HASKELL.note(p.score_fmt, p.prob_fmt, plan.out_fmt, table),),
            uses=("attention",) + (() if plan.out_fmt.is_plain else ("quant",)),
        )


KINDS = (AttentionKind(),)
