"""The backend: a plan and quantized parameters -> a Clash project directory.

Python decides (names, types, sizes, file contents); the jinja2 templates in
`templates/` hold the Haskell text. The emitted project is self-contained: it carries a
copy of the `clash_lib` blocks it uses, so it can be read, changed and built on its own.
"""

from __future__ import annotations

import keyword
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from . import __version__
from .formats import FixedFormat
from .golden import QuantizedLayer
from .memfiles import memfile_text
from .plan import LayerPlan

CLASH_LIB = Path(__file__).resolve().parent.parent / "clash_lib"
"""The predefined blocks, beside the package in the repository (editable install)."""

HASKELL_RESERVED = {
    "case", "class", "data", "default", "deriving", "do", "else", "foreign", "if", "import",
    "in", "infix", "infixl", "infixr", "instance", "let", "module", "newtype", "of", "then",
    "type", "where",
    # names the generated modules define or import unqualified
    "network", "topEntity", "main", "pe", "activation", "flattenS", "linear", "relu",
    "requantize", "sigmoidPlan", "argmax", "mapS", "romWords", "simMain", "flatTop",
}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("keras2clash", "templates"),
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)
_env.filters["prefix"] = lambda text, prefix: f"{prefix}{text}"


def unflatten_expr(rank: int) -> str:
    """Haskell turning a flat row-major Vec into the nested Vec of a rank-`rank` shape."""
    expr = "id"
    for _ in range(rank - 1):
        expr = "unconcatI" if expr == "id" else f"map ({expr}) . unconcatI"
    return expr


def haskell_names(names: Sequence[str]) -> list[str]:
    """Keras layer names as unique Haskell function names (`dense_1` stays `dense_1`)."""
    used: set[str] = set()
    result = []
    for name in names:
        ident = re.sub(r"[^0-9A-Za-z_']", "_", name)
        ident = ident[:1].lower() + ident[1:]
        if not ident or not (ident[0].isalpha() or ident[0] == "_") or ident[0].isdigit():
            ident = "layer_" + ident
        if ident in HASKELL_RESERVED or keyword.iskeyword(ident):
            ident = ident + "_layer"
        base, k = ident, 1
        while ident in used:
            ident, k = f"{base}_{k}", k + 1
        used.add(ident)
        result.append(ident)
    return result


def cabal_package_name(name: str) -> str:
    """A valid cabal package name: dash-separated parts, none all digits (`net_2` -> `net2`)."""
    parts: list[str] = []
    for part in re.split(r"[^0-9A-Za-z]+", name):
        if not part:
            continue
        if part.isdigit() and parts:
            parts[-1] += part
        else:
            parts.append(part if not part.isdigit() else "net" + part)
    return "-".join(parts) or "net"


def format_type_name(fmt: FixedFormat) -> str:
    return f"Q{fmt.sign}_{fmt.int}_{fmt.frac}"


def _vec_type(shape: Sequence[int], elem: str) -> str:
    """Nested Vec for a shape, row-major: (8, 8) -> Vec 8 (Vec 8 e)."""
    inner = elem
    for dim in reversed(shape):
        inner = f"Vec {dim} ({inner})" if " " in inner else f"Vec {dim} {inner}"
    return inner


def _activation_doc(plan: LayerPlan) -> str:
    if plan.activation == "softmax":
        return "softmax in Keras; here linear (argmax-preserving: scores are the logits)"
    if plan.activation == "sigmoid":
        return "sigmoid (PLAN piecewise-linear approximation)"
    return plan.activation


def build_context(name: str, plans: Sequence[LayerPlan]) -> dict[str, Any]:
    """Everything the templates need, computed here so the templates stay declarative."""
    fns = haskell_names([p.name for p in plans])
    formats = sorted({p.in_fmt for p in plans} | {p.out_fmt for p in plans}
                     | {p.w_fmt for p in plans if p.w_fmt is not None})
    format_types = [
        {"name": format_type_name(f), "clash": f.clash_type, "label": str(f), "bits": f.bits}
        for f in formats
    ]
    layers = []
    for plan, fn in zip(plans, fns):
        in_elem = format_type_name(plan.in_fmt)
        out_elem = format_type_name(plan.out_fmt)
        entry: dict[str, Any] = {
            "name": plan.name, "fn": fn, "type": plan.type, "n_in": plan.n_in, "n_out": plan.n_out,
            "in_type": _vec_type(plan.input_shape, in_elem),
            "out_type": _vec_type(plan.output_shape, out_elem),
            "out_elem": out_elem,
            "in_shape_text": "x".join(map(str, plan.input_shape)),
        }
        if plan.is_compute:
            assert plan.acc_fmt is not None and plan.w_fmt is not None
            entry.update(
                pe=plan.pe, pe_var=f"p_{fn}", groups=plan.rom_depth, chunk=plan.chunk, cycles=plan.cycles,
                acc_clash=plan.acc_fmt.clash_type, w_clash=plan.w_fmt.clash_type, w_label=str(plan.w_fmt),
                hw_activation={"linear": "linear", "relu": "relu", "sigmoid": "sigmoidPlan"}[plan.hw_activation],
                activation_doc=_activation_doc(plan),
                pe_doc=(
                    f"{plan.pe} processing element(s) x {plan.n_in} multipliers; {plan.groups} ROM word(s)"
                    + (f", the last with {plan.pad} padding neuron(s)" if plan.pad else "")
                ),
            )
        else:
            entry["flatten_depth"] = len(plan.input_shape) - 1
        layers.append(entry)
    dense_layers = [entry for entry in layers if entry["type"] == "dense"]
    stages = []
    for entry in layers:
        if entry["type"] == "dense":
            stages.append(f"{entry['fn']} {entry['pe_var']}")
        else:
            stages.append(entry["fn"])
    first, last = plans[0], plans[-1]
    return {
        "name": name,
        "package": cabal_package_name(name),
        "version": __version__,
        "format_types": format_types,
        "layers": layers,
        "dense_layers": dense_layers,
        "composition": "\n  |> ".join(stages),
        "input_type": _vec_type(first.input_shape, format_type_name(first.in_fmt)),
        "input_shape_text": "x".join(map(str, first.input_shape)),
        "input_rank": len(first.input_shape),
        "unflatten": unflatten_expr(len(first.input_shape)),
        "n_in": first.n_in,
        "n_out": last.n_out,
        "output_type": _vec_type(last.output_shape, format_type_name(last.out_fmt)),
        "output_note": ", requantized logits (softmax replaced by identity)" if last.activation == "softmax" else "",
        "in_fmt": first.in_fmt,
        "out_fmt": last.out_fmt,
        "pe_literals": " ".join(f"(SNat @{entry['pe']})" for entry in dense_layers),
    }


TEMPLATES = {
    "Network.hs": "Network.hs.j2",
    "Weights.hs": "Weights.hs.j2",
    "Top.hs": "Top.hs.j2",
    "Sim.hs": "Sim.hs.j2",
    "cabal.project": "cabal.project.j2",
    "README.md": "README.md.j2",
    "bin/Clash.hs": "Clash.hs.j2",
}


def write_project(
    root: Path, name: str, plans: Sequence[LayerPlan], params: dict[str, QuantizedLayer]
) -> None:
    """Render the Haskell modules, copy the blocks, write the weight memory files."""
    context = build_context(name, plans)
    (root / "bin").mkdir()
    for target, template in TEMPLATES.items():
        (root / target).write_text(_env.get_template(template).render(**context))
    (root / f"{context['package']}.cabal").write_text(
        _env.get_template("project.cabal.j2").render(**context)
    )
    blocks = root / "clash_lib" / "K2C"
    blocks.mkdir(parents=True)
    for source in sorted((CLASH_LIB / "K2C").glob("*.hs")):
        shutil.copy2(source, blocks / source.name)
    weights = root / "weights"
    weights.mkdir()
    for plan, entry in zip(plans, context["layers"]):
        if plan.type == "dense":
            (weights / f"{entry['fn']}.mem").write_text(memfile_text(plan, params[plan.name]))
