"""The quantization-aware example (examples/jet_hgq): the committed HGQ2 model ==
golden model bit for bit on every output of the whole test set; the Clash simulation and
the Verilog in Verilator equal the golden model (100 samples in CI, the whole set with
-m slow); and (-m slow) a small HGQ2 network with the formats the example does not reach
(signed WRAP after a ReLU: relu(x) >= 1 wraps negative; TRN; a negative fraction) through
Clash and Verilator. The example's own unsigned WRAP quantizers after ReLUs exercise the
order in CI: a negative accumulator wraps to a large code unless the ReLU acts first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

hgq = pytest.importorskip("hgq")
keras = pytest.importorskip("keras")

from helpers import needs_toolchain, script_module  # noqa: E402
from keras2clash.kinds import engine  # noqa: E402
from keras2clash.network import load_network  # noqa: E402
from keras2clash.quant import golden  # noqa: E402

JET = Path(__file__).resolve().parent.parent / "examples" / "jet_hgq"


@pytest.fixture(scope="module")
def jet():
    model = keras.models.load_model(JET / "jet_qat.keras")
    test = np.load(JET / "test.npz")
    return model, test["x"], test["y"]


def example_module(name: str):
    """A script of examples/jet_hgq as a module."""
    return script_module(JET / f"{name}.py", f"jet_hgq_{name}")


def golden_real(network, x: np.ndarray) -> np.ndarray:
    raw, _ = golden.predict(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    return network.plans[-1].out_fmt.to_real(raw)


def test_qat_example_needs_the_relu_before_the_wrap(jet, monkeypatch):
    """Requantizing first (the order for saturating formats) would wrap negative accumulators
    of the unsigned quantizers to large codes: the example depends on HGQ2's order."""
    model, x, _ = jet
    network = load_network(model)
    monkeypatch.setattr(engine, "relu_before_requantize", lambda plan: False)  # the dense layers' golden step
    swapped = golden_real(network, x)
    want = np.asarray(model.predict(x, verbose=0, batch_size=len(x)), dtype=np.float64)
    assert np.any(swapped != want)


def test_qat_example_equals_golden_on_every_output(jet):
    """HGQ2's own quantized forward pass == the golden model: 2,000 x 5 values, not argmax."""
    model, x, y = jet
    network = load_network(model)
    want = np.asarray(model.predict(x, verbose=0, batch_size=len(x)), dtype=np.float64)
    got = golden_real(network, x)
    assert got.shape == want.shape == (2000, 5)
    np.testing.assert_array_equal(got, want)
    # the formats HGQ2 trained and traced: unsigned, wrapping quantizers after the ReLUs
    outs = [p.out_fmt for p in network.plans if p.is_compute][:-1]
    assert all(f.sign == 0 and f.overflow == "wrap" for f in outs) and network.plans[0].in_fmt.sign == 1
    assert all(p.activation == "relu" for p in network.plans[:-1])
    # the README's claim: the QAT network beats the float one quantized to the same formats
    compare = example_module("compare")
    float_model = keras.models.load_model(JET / "jet_float.keras")
    same = load_network(float_model, layer_formats=compare.same_formats(network))
    assert compare.accuracy(got, y) > compare.accuracy(golden_real(same, x), y) + 0.01


def run_hardware(model_path: Path, data: Path, out: Path, strategy: str = "resource"):
    """Emit, Clash simulation and Verilator against the golden model."""
    import keras2clash as k2c
    from keras2clash import api

    project = k2c.emit(str(model_path), out=out, show=False, strategy=strategy)
    comp = k2c.simulate(project, data, keras=False, show=False)
    k2c.hdl(project, ("verilog",))
    rtl = api.rtlsim(project, data, "verilator", show=False)
    return comp, rtl


@needs_toolchain
def test_qat_example_hardware_subset(tmp_path, jet):
    """Clash simulation and Verilator on the first 100 test samples (about 40 s)."""
    _, x, y = jet
    data = tmp_path / "subset.npz"
    np.savez(data, x=x[:100], y=y[:100])
    comp, rtl = run_hardware(JET / "jet_qat.keras", data, tmp_path / "jet")
    assert comp.samples == comp.bit_exact == 100
    assert rtl.ok and rtl.passed == len(rtl.samples) == 100


@needs_toolchain
@pytest.mark.slow
def test_qat_example_hardware_whole_test_set(tmp_path):
    """Clash simulation and Verilator on all 2,000 samples (about three minutes)."""
    comp, rtl = run_hardware(JET / "jet_qat.keras", JET / "test.npz", tmp_path / "jet")
    assert comp.samples == comp.bit_exact == 2000
    assert rtl.ok and rtl.passed == len(rtl.samples) == 2000


@needs_toolchain
@pytest.mark.slow
def test_qat_example_at_the_latency_strategy_whole_test_set(tmp_path, jet):
    """Every layer an adder graph of its constant weights (--strategy latency): HGQ2 == Clash
    simulation == Verilator on all 10,000 outputs, a vector a cycle, no multiplier (about
    seven minutes: Clash takes most of them for the 2,866 adders' Verilog)."""
    model, x, _ = jet
    comp, rtl = run_hardware(JET / "jet_qat.keras", JET / "test.npz", tmp_path / "jet", strategy="latency")
    assert comp.samples == comp.bit_exact == 2000
    assert comp.multipliers == 0 and comp.interval == 1.0 and comp.first_latency == 26
    assert rtl.ok and rtl.passed == len(rtl.samples) == 2000


@needs_toolchain
@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["resource", "latency"])
def test_small_hgq2_network_wrap_after_relu_in_clash_and_verilator(tmp_path, strategy):
    """A tiny HGQ2 network whose formats wrap where it matters (relu(x) >= 1 into a signed
    0-integer-bit WRAP quantizer), truncate and have a negative fraction: HGQ2 == golden ==
    Clash simulation == Verilator on every output, with weight memories and as adder graphs."""
    from hgq.config import QuantizerConfig
    from hgq.layers import QDense

    def datalane(**kw):
        return QuantizerConfig("kif", "datalane", heterogeneous_axis=(), **kw)

    keras.utils.set_random_seed(11)
    inp = keras.Input((4,))
    h = QDense(5, activation="relu", iq_conf=datalane(k0=1, i0=2, f0=-1, overflow_mode="WRAP"), name="h1")(inp)
    h = QDense(
        4, activation="relu", iq_conf=datalane(k0=1, i0=0, f0=3, overflow_mode="WRAP", round_mode="TRN"), name="h2"
    )(h)
    model = keras.Model(inp, QDense(3, iq_conf=datalane(k0=0, i0=1, f0=2, overflow_mode="SAT"), name="h3")(h))
    rng = np.random.default_rng(3)
    x = (np.round(rng.normal(0, 3, (40, 4)) * 2**10) / 2**10).astype(np.float32)
    path = tmp_path / "small.keras"
    model.save(path)
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=rng.integers(0, 3, len(x)))
    network = load_network(model)
    np.testing.assert_array_equal(golden_real(network, x), np.asarray(model(x), dtype=np.float64))
    values = golden.run_all(network.plans, network.params, golden.quantize_inputs(network.plans, x))
    assert values["h1"].min() < 0  # a relu output wrapped negative: the order is exercised
    comp, rtl = run_hardware(path, data, tmp_path / "net", strategy)
    assert comp.samples == comp.bit_exact == len(x)
    assert rtl.ok and rtl.passed == len(x)
