"""What quantization-aware training buys, and that the hardware equals the quantized model.

Reads what `train.py` wrote (jet_float.keras, jet_qat.keras, test.npz, calib.npz) and writes
a markdown report (default `results.md` beside this script, written aside then renamed):

- accuracy on the 2,000 test samples: the float network in Keras; the same network
  quantized after training to 6 bits (`--format auto --bits 6`, per-layer formats
  calibrated on calib.npz) and to the HGQ2 network's own formats (the same hardware, only
  the training differs), both in the golden model (what their hardware computes); the HGQ2
  network in Keras (its own quantized forward pass) and in the golden model;
- bit-exactness of the HGQ2 network on every output of every test sample (5 x 2,000 values,
  not only the argmax): Keras (HGQ2) vs golden model, golden model vs the Clash simulation,
  golden model vs the generated Verilog in Verilator (`--no-hardware` skips the last two);
- both networks' formats per layer (input x weight operands, the output), multipliers and
  weight memory.

Run: `python examples/jet_hgq/compare.py [--dir DIR] [--build DIR] [--out results.md]
[--no-hardware]` (about two minutes with the hardware runs).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
PTQ_BITS = 6


@dataclass(frozen=True)
class Exactness:
    """How many samples (all outputs equal) and values agree between two runs."""

    samples: int
    of_samples: int
    values: int
    of_values: int

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray) -> Exactness:
        a, b = np.asarray(a).reshape(len(a), -1), np.asarray(b).reshape(len(b), -1)
        return cls(int(np.all(a == b, axis=1).sum()), len(a), int((a == b).sum()), a.size)

    def __str__(self) -> str:
        return f"{self.samples}/{self.of_samples} samples ({self.values}/{self.of_values} values)"


def golden_outputs(network, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The golden model's raw outputs and their real values."""
    from keras2clash.quant import golden

    raw, _ = golden.predict(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    return raw, network.plans[-1].out_fmt.to_real(raw)


def accuracy(outputs: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.argmax(outputs, axis=1) == y))


def _compute(network) -> list:
    return [p for p in network.plans if p.is_compute]


def formats_table(ptq, qat) -> list[str]:
    """Per compute layer: both networks' operand and output formats (container bits)."""

    def cell(p) -> str:
        return f"{p.in_fmt} x {p.w_fmt} -> {p.out_fmt} ({p.in_fmt.hw_bits} x {p.w_fmt.hw_bits} bits)"

    rows = [
        "| layer | multipliers | PTQ 6 bits: input x weight -> output | QAT (HGQ2): input x weight -> output |",
        "|---|---|---|---|",
    ]
    for a, b in zip(_compute(ptq.network), _compute(qat.network)):
        rows.append(f"| {a.name} | {a.multipliers} | {cell(a)} | {cell(b)} |")
    for label, f in (
        ("multipliers", lambda r: str(r.multipliers)),
        ("weight memory (bits)", lambda r: f"{r.weight_bits:,}"),
    ):
        rows.append(f"| **{label}** | | {f(ptq)} | {f(qat)} |")
    return rows


@dataclass
class Built:
    """A planned network and its figures."""

    network: object

    @property
    def multipliers(self) -> int:
        return sum(p.multipliers for p in self.network.plans)

    @property
    def weight_bits(self) -> int:
        return sum(p.n_in * p.n_out * p.w_fmt.hw_bits + p.n_out * p.b_fmt.hw_bits for p in _compute(self.network))


def same_formats(network):
    """The formats of `network` (the HGQ2 one) for the float network: its layers have the
    same names, so the same hardware quantizes the float weights instead of trained ones."""
    from keras2clash.hw.plan import LayerFormats
    from keras2clash.quant.layerformats import FormatConfig

    plans = _compute(network)
    return FormatConfig(
        default=None,
        input=plans[0].in_fmt,
        layers={p.name: LayerFormats(weight=p.w_fmt, bias=p.b_fmt, output=p.out_fmt) for p in plans},
    )


def hardware_runs(qat_model_path: Path, test: Path, build: Path) -> tuple[Exactness, Exactness, str]:
    """Emit the HGQ2 network, simulate it in Clash and its Verilog in Verilator against the
    golden model; (Clash vs golden, Verilator vs golden, the interval text)."""
    import keras2clash as k2c
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden

    project_dir = k2c.emit(str(qat_model_path), out=build / "jet_qat", force=True, show=False)
    k2c.hdl(project_dir, ("verilog",))
    project = load_project(project_dir)
    x = np.load(test)["x"]
    gold, _ = golden.predict(project.plans, project.params, golden.quantize_inputs(project.plans, x))
    comp = k2c.simulate(project_dir, test, keras=False, show=False)
    clash = Exactness(comp.bit_exact, comp.samples, comp.bit_exact * gold.shape[1], gold.size)
    rtl = api.rtlsim(project_dir, test, "verilator", show=False)
    got = np.array([s.got for s in rtl.samples])
    verilator = Exactness.of(got, gold) if rtl.ok or len(got) else Exactness(0, len(x), 0, gold.size)
    return clash, verilator, f"{comp.interval} cycles per sample, first result after {comp.first_latency} cycles"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=HERE, help="Where train.py wrote its files.")
    parser.add_argument("--build", type=Path, default=None, help="Where to build the hardware (default: a temp dir).")
    parser.add_argument("--out", type=Path, default=HERE / "results.md")
    parser.add_argument("--no-hardware", action="store_true", help="Skip the Clash and Verilator runs.")
    args = parser.parse_args()

    import hgq  # noqa: F401  (registers HGQ2's layers for loading)
    import keras

    from keras2clash.network import load_network

    test = np.load(args.dir / "test.npz")
    x, y = test["x"], test["y"]
    float_model = keras.models.load_model(args.dir / "jet_float.keras")
    qat_model = keras.models.load_model(args.dir / "jet_qat.keras")
    float_out = np.asarray(float_model.predict(x, verbose=0), dtype=np.float64)
    qat_keras = np.asarray(qat_model.predict(x, verbose=0, batch_size=len(x)), dtype=np.float64)

    ptq = Built(load_network(float_model, "auto", bits=PTQ_BITS, calibration=args.dir / "calib.npz"))
    qat = Built(load_network(qat_model))
    same = load_network(float_model, layer_formats=same_formats(qat.network))
    _, ptq_gold = golden_outputs(ptq.network, x)
    _, same_gold = golden_outputs(same, x)
    _, qat_gold = golden_outputs(qat.network, x)
    keras_vs_golden = Exactness.of(qat_keras, qat_gold)

    lines = [
        "# jet_hgq: quantization-aware (HGQ2) vs quantized after training, 16 -> 64 -> 32 -> 32 -> 5",
        "",
        f"{len(x):,} test samples of the synthetic jet-tagging-shaped set (`train.py`).",
        "",
        "| network | where | test accuracy |",
        "|---|---|---|",
        f"| float | Keras | {accuracy(float_out, y):.2%} |",
        f"| float, quantized after training to {PTQ_BITS} bits (`--format auto --bits {PTQ_BITS}`) | golden model "
        f"(= its hardware) | {accuracy(ptq_gold, y):.2%} |",
        f"| float, quantized after training to the HGQ2 network's formats (same hardware) | golden model "
        f"| {accuracy(same_gold, y):.2%} |",
        f"| HGQ2, quantization-aware (~6 bits) | Keras (HGQ2's quantized forward pass) | {accuracy(qat_keras, y):.2%} |",
        f"| HGQ2, quantization-aware (~6 bits) | golden model (= its hardware) | {accuracy(qat_gold, y):.2%} |",
        "",
        "Bit-exactness of the HGQ2 network, every output of every test sample:",
        "",
        "| compared | equal |",
        "|---|---|",
        f"| Keras (HGQ2) vs golden model | {keras_vs_golden} |",
    ]
    if not args.no_hardware:
        with tempfile.TemporaryDirectory() as tmp:
            build = args.build or Path(tmp)
            clash, verilator, timing = hardware_runs(args.dir / "jet_qat.keras", args.dir / "test.npz", build)
        lines += [
            f"| golden model vs Clash simulation | {clash} |",
            f"| golden model vs Verilog in Verilator | {verilator} |",
            "",
            f"Hardware (one processing element per layer): {timing}.",
        ]
    lines += (
        [
            "",
            "Formats (`S,I,F[,modes]`: sign, integer and fraction bits; the hardware holds each in the "
            "container whose width is shown):",
            "",
        ]
        + formats_table(ptq, qat)
        + [""]
    )
    text = "\n".join(lines)
    tmp_out = args.out.with_name(f".{args.out.name}.tmp")
    tmp_out.write_text(text)
    tmp_out.replace(args.out)
    print(text)


if __name__ == "__main__":
    main()
