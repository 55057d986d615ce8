"""The Haskell of the activation functions (K2C.Relu, K2C.Lut, K2C.Softmax): one top-level
definition per layer with a non-linear activation, named after the layer and the function,
its table memory files, and its documentation (what it computes, its maximum error).

The tables come from `quant.activations`, the numbers the golden model uses too."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerPlan
from keras2clash.quant import activations as acts
from keras2clash.quant.formats import FixedFormat


@dataclass(frozen=True)
class ActivationCode:
    """One layer's activation in Haskell: `name` (a function of one value, or of a whole beat
    when `vector`), its signature and body lines, its table (if any)."""

    name: str
    vector: bool
    signature: str
    body: str
    doc: str
    table_name: str | None = None
    table_type: str | None = None
    table_words: tuple[str, ...] = ()
    stream: bool = False  # a pipelined stream stage carrying a payload (softmax), not a function
    # cut in two register stages (K2C.Pipe.mapP2): the first half's signature and body, defined as
    # `<name>_product`; the second is K2C.Relu.reluSelect (per value)
    product_signature: str | None = None
    product_body: str | None = None

    @property
    def product_name(self) -> str:
        return f"{self.name}_product"

    @functools.cached_property
    def table_files(self) -> list[tuple[str, tuple[str, ...]]]:
        """The table's memory files (name under weights/, lines), high bits first: one file,
        or one per bit slice (`table_slices`)."""
        assert self.table_name is not None and self.table_words
        widths = table_slices(len(self.table_words), len(self.table_words[0]))
        if len(widths) == 1:
            return [(f"{self.table_name}.mem", self.table_words)]
        files, start = [], 0
        for j, width in enumerate(widths):
            files.append((f"{self.table_name}.{j}.mem", tuple(w[start : start + width] for w in self.table_words)))
            start += width
        return files

    def table_expr(self) -> str:
        """The Haskell value of the table (K2C.Lut): its file, or its slices side by side."""
        files = self.table_files
        if len(files) == 1:
            return f'tableFile "weights/{files[0][0]}"'
        entries = len(self.table_words)
        parts = [
            f'(tableFile "weights/{name}" :: TableRom {entries} (BitVector {len(lines[0])}))' for name, lines in files
        ]
        return f"bitTable ({' `beside` '.join(parts)})"  # concatenation: either association

    def stage(self) -> str:
        """The stream stage applying it to a beat inside the network: a pipelined one, so
        its logic (a table's ROM, per-channel slopes) stays out of its neighbours' paths
        (K2C.Pipe.mapP: one register; mapTable: two, a table's read and its block RAM's
        output register; in the hardware model `blocks.has_map_stage`, `blocks.map_depth`)."""
        if self.stream:
            return f"mapS (, ()) |> {self.name} |> mapS fst"
        if self.product_body is not None:  # two register stages: the product, then the rest
            first = self.product_name if self.vector else f"(map {self.product_name})"
            return f"mapP2 {first} (map Relu.reluSelect)"
        if self.table_name is not None:  # the block RAM's read, then its output register
            return f"mapTable (map {self.name})"
        return f"mapP {self.name}" if self.vector else f"mapP (map {self.name})"


BLOCK_RAM_MODES = ((512, 36), (1024, 18), (2048, 9), (4096, 4), (8192, 2), (16384, 1))
"""A block RAM's shapes (words, bits): ECP5's DP16KD (18 Kbit; 36 bits as PDPW16KD)."""
LUT_RAM_WORDS = 16
"""A memory with a write port of at most this many words is built from LUT RAM (TRELLIS_DPR16X4)
by yosys' `synth_ecp5`, not from block RAM."""


def block_rams(words: int, bits: int, rom: bool = False) -> int:
    """DP16KD blocks of a memory of `words` words of `bits` bits as `synth_ecp5` maps it: none
    for a shallow RAM (`LUT_RAM_WORDS`; a ROM goes to block RAM whatever its depth, as `pnr`
    asks), else the fewest blocks of one shape side by side and one above the other, the 36-bit
    shape only for a memory one block deep (measured on the training cores of 784-98-64-10,
    every memory as counted here)."""
    if not rom and words <= LUT_RAM_WORDS:
        return 0
    return min(-(-bits // w) * -(-words // d) for d, w in BLOCK_RAM_MODES if w < BLOCK_RAM_MODES[0][1] or words <= d)


def table_slices(entries: int, bits: int) -> tuple[int, ...]:
    """The bit slices (widths, high first) a table of `entries` words of `bits` bits is stored
    in: slices as wide as the deepest block-RAM shape that holds `entries` words, so each is
    one block RAM read side by side, with no multiplexer after the reads (which a depth split
    needs, after the block RAM's slow output: K2C.Lut, Storage). One slice when the word fits."""
    width = next((w for depth, w in BLOCK_RAM_MODES if entries <= depth), 1)
    if bits <= width:
        return (bits,)
    k = -(-bits // width)
    return (bits - (k - 1) * width,) + (width,) * (k - 1)


def softmax_width(exp: acts.SoftmaxTable, fo: FixedFormat, n: int) -> int:
    """K2C.Softmax's sum and division width over `n` values: wide enough for `2 e 2^fo + S`."""
    return exp.frac + 2 + fo.frac + 4 + math.ceil(math.log2(n + 1))


def _lit(value: int) -> str:
    return f"({value})" if value < 0 else str(value)


def _slope(k: int) -> str:
    width = acts.slope_bits([k])
    return f"(sf (SNat @{acts.SLOPE_FRAC}) ({k} :: Signed {width}))"


def _words(values: tuple[int, ...], bits: int) -> tuple[str, ...]:
    return tuple(format(v & ((1 << bits) - 1), f"0{bits}b") for v in values)


def _fits(value: int, bits: int, what: str, plan: LayerPlan) -> int:
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise K2CError(
            f"layer '{plan.name}': activation '{plan.activation}' has a {what} outside "
            f"the range of its input format {plan.act_in_fmt}"
        )
    return value


def activation_code(plan: LayerPlan, fn: str, type_name: dict[FixedFormat, str]) -> ActivationCode | None:
    """The Haskell of `plan`'s activation (None for linear, which needs none)."""
    act = acts.parse(plan.activation)
    if act.is_linear and not plan.activation_only:
        return None
    fi, fo = plan.act_in_fmt, plan.out_fmt
    a, b = type_name[fi], type_name[fo]
    name = f"{fn}_{act.text.split('(')[0]}"  # the Keras function: dense_1_sigmoid, prelu_1_prelu
    doc = plan.activation_doc
    scalar = f"{a} -> {b}"
    n = plan.output_shape[-1]
    if act.kind == "linear":
        return ActivationCode(name, False, scalar, "requantize", doc)
    if act.text == "relu" and fi == fo:
        return ActivationCode(name, False, scalar, "relu", doc)  # K2C.Activation.relu: max 0
    if act.kind == "relu":
        c = acts.relu_constants(act, fi, fo)
        t_cmp = _fits(c.t_cmp, fi.bits + 2, "threshold", plan)
        t_raw = _fits(c.t_raw, fi.bits + 2, "threshold", plan)
        cap = "Nothing" if c.cap is None else f"(Just (sf (SNat @{fo.frac}) {_lit(c.cap)}))"
        args = f"{_lit(t_cmp)} {_lit(t_raw)} {act.max_value is not None} {cap}"
        vector = acts.per_channel(act, fi, fo)
        slopes = " :> ".join(_slope(k) for k in c.slopes) + " :> Nil"
        signature = f"Vec {n} {a} -> Vec {n} {b}" if vector else scalar
        if acts.multiplies(act, fi, fo):  # a constant multiplication: two register stages
            kb = acts.slope_bits(c.slopes) - acts.SLOPE_FRAC
            (ii, fi_), (oi, fo_) = ((1 + max(f.int, 0), f.raw_frac) for f in (fi, fo))
            mid = f"Relu.ReluProduct {kb} {ii} {fi_} {oi} {fo_}"
            product = (
                f"zipWith (Relu.reluProduct {args}) ({slopes})"
                if vector
                else f"Relu.reluProduct {args} {_slope(c.slopes[0])}"
            )
            body = f"map Relu.reluSelect . {name}_product" if vector else f"Relu.reluSelect . {name}_product"
            return ActivationCode(
                name,
                vector,
                signature,
                body,
                doc + "; in two register stages: the "
                "comparison and the slope's product, then the rounding and the choice",
                product_signature=f"Vec {n} {a} -> Vec {n} ({mid})" if vector else f"{a} -> {mid}",
                product_body=product,
            )
        head = f"Relu.reluFamily {args}"
        if not vector:
            return ActivationCode(name, False, scalar, f"{head} {_slope(c.slopes[0])}", doc)
        return ActivationCode(name, True, signature, f"zipWith ({head}) ({slopes})", doc)
    if act.family == "hard":
        width = fi.bits + fi.frac + fo.frac + 8
        fn_name = "hardSigmoid" if act.kind == "hard_sigmoid" else "hardSilu"
        return ActivationCode(name, False, scalar, f"Relu.{fn_name} @{width}", doc)
    if act.kind == "softmax":
        exp = acts.softmax_table(fi, fo, n, act.scale)
        eb = exp.frac + 2
        width = softmax_width(exp, fo, n)
        # a standalone softmax given knobs of one processing element (an attention's row,
        # which comes once every n scores): one division a cycle; otherwise the n divisions
        # side by side
        serial = plan.activation_only and plan.knobs is not None and plan.knobs.pe == 1
        stage = "softmaxSerialS" if serial else "softmaxS"
        return ActivationCode(
            name,
            True,
            f"(HiddenClockResetEnable dom, NFDataX t) => Stream dom (Vec {n} {a}, t) (Vec {n} {b}, t)",
            f"Softmax.{stage} @{width} (SNat @{exp.shift}) W.{name}",
            doc,
            name,
            f"TableRom {len(exp.values)} (Signed {eb})",
            _words(exp.values, eb),
            stream=True,
        )
    t = acts.table(plan.activation, fi, fo)
    low = f"(SNat @{t.shift}) {_lit(t.low)} W.{name}"
    if t.tail_slope is None:
        body = f"Lut.lut {low}"
    else:
        assert t.tail_from is not None
        body = f"Lut.lutLinear {low} {_lit(t.tail_from)} {_slope(t.tail_slope)}"
    return ActivationCode(
        name, False, scalar, body, doc, name, f"TableRom {len(t.values)} ({fo.clash_type})", _words(t.values, fo.bits)
    )
