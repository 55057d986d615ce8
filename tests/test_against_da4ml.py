"""bench/against_da4ml.py's pieces on a tiny HGQ2 network: da4ml's Verilog is generated, its
pipeline has the registers the bench counts, and da4ml's own Verilator emulator of it equals
HGQ2 on every output (the place and route is `pnr_verilog`'s, tests/test_fpga.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

hgq = pytest.importorskip("hgq")
keras = pytest.importorskip("keras")
pytest.importorskip("da4ml")

from helpers import script_module  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    return script_module(ROOT / "bench" / "against_da4ml.py", "bench_against_da4ml")


def tiny_hgq2(path: Path) -> np.ndarray:
    """A 4-6-3 HGQ2 network saved to `path`; returns 40 inputs for it."""
    from hgq.config import QuantizerConfig
    from hgq.layers import QDense

    keras.utils.set_random_seed(5)
    inp = keras.Input((4,))
    conf = QuantizerConfig("kif", "datalane", heterogeneous_axis=(), k0=1, i0=2, f0=3)
    h = QDense(6, activation="relu", iq_conf=conf, name="h1")(inp)
    keras.Model(inp, QDense(3, name="h2")(h)).save(path)
    rng = np.random.default_rng(3)
    return (np.round(rng.normal(0, 2, (40, 4)) * 8) / 8).astype(np.float32)


@pytest.mark.skipif(shutil.which("verilator") is None, reason="needs verilator")
def test_da4ml_verilog_equals_hgq2_in_its_own_emulator(tmp_path: Path, bench) -> None:
    x = tiny_hgq2(tmp_path / "tiny.keras")
    rtl = bench.da4ml_generate(tmp_path / "tiny.keras", tmp_path / "da4ml", levels=3, freq_mhz=100)
    stages = bench.da4ml_stages(rtl)
    # S stages, S + 1 registers from port to port: the latency the bench reports
    top = (tmp_path / "da4ml" / "src" / f"{bench.DA4ML_TOP}.v").read_text()
    assert stages > 1 and len(re.findall(r"<=", top)) == stages + 1
    sources = bench.da4ml_sources(tmp_path / "da4ml")
    assert f"{bench.DA4ML_TOP}.v" in sources and "static/shift_adder.v" in sources
    assert "static/lookup_table.v" not in sources  # not instantiated: yosys is not given it
    bench.da4ml_emulator(rtl, tmp_path / "da4ml")
    got = np.asarray(rtl.predict(x, n_threads=1), dtype=np.float64)
    want = bench._hgq2_outputs(tmp_path / "tiny.keras", x)
    assert got.shape == want.shape == (40, 3) and np.any(want != 0)
    np.testing.assert_array_equal(got, want)
