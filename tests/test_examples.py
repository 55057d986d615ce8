"""The shipped examples with branches, depthwise or 1-D layers, each on its whole test set:
golden == Clash simulation (back to back, and under random input gaps and output stalls),
the Verilog in Verilator equal too, the hardware model's accept and output cycles equal the
simulation's, and hardware accuracy within 0.5 pt of Keras float.

Each example costs minutes (one Clash build, one Verilator build, 360 images three times):
inception_digits (branches joined by a Concatenate) and mobilenet_digits (depthwise, separable,
ReLU6, BatchNorm, zero padding, global pooling, softmax) run by default; resnet_digits (its
residual Adds are in the random graphs of tests/test_graph.py by default), mlp_tanh and
conv1d_waves with `-m slow`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from keras2clash.hw import hwmodel
from keras2clash.quant import golden

from helpers import needs_toolchain

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@needs_toolchain
@pytest.mark.parametrize(("example", "parallelism"), [
    pytest.param("resnet_digits", [4, 4, 4, 6, 6, 6, 5], marks=pytest.mark.slow),
    ("inception_digits", [4, 3, 3, 5, 2, 5]),
    ("mobilenet_digits", [4, 4, 8, 4, 6, 5]),
    pytest.param("mlp_tanh", [8, 6, 5], marks=pytest.mark.slow),
    pytest.param("conv1d_waves", [4, 6, 4, 2], marks=pytest.mark.slow),
])
def test_example_whole_test_set(tmp_path: Path, example: str, parallelism: list[int]) -> None:
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.data import load_dataset
    from keras2clash.verify import toolchain
    from keras2clash.verify.simulate import run_simulator

    out = tmp_path / example
    api.emit(EXAMPLES / example / f"{example}.keras", "1,7,8", out, parallelism, show=False)
    data = EXAMPLES / example / "test.npz"
    comparison = api.simulate(out, data, show=False)
    assert comparison.samples == 360 and comparison.bit_exact == 360
    assert comparison.keras_float_accuracy - comparison.sim_accuracy <= 0.005
    project = load_project(out)
    t = hwmodel.timing(project.plans, 360)
    x_raw = golden.quantize_inputs(project.plans, load_dataset(data, project.input_shape, project.n_out).x)
    exe = toolchain.build_simulator(project.root)
    sim = run_simulator(exe, project.root, x_raw, project.n_out)
    assert np.array_equal(sim.accept_cycle, t.accept_cycle) and np.array_equal(sim.output_cycle, t.output_cycle)
    stressed = api.simulate(out, data, gap_max=5, seed=7, keras=False, show=False)
    assert stressed.bit_exact == 360
    rtl = api.rtlsim(out, data, "verilator", gap_max=3, seed=11, show=False)
    assert rtl.ok and len(rtl.samples) == rtl.passed == 360
