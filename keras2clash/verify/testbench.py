"""HDL testbenches for the AXI4-Stream top entity: Verilog (Icarus, Verilator) and VHDL (GHDL).

`write_testbench` writes DIR/tb/:

- `input.hex`     one line per input beat: `{tlast, s_axis_tdata}` in hex (element 0 in the
                  lowest bits), beats row-major, `k` beats per image;
- `expected.hex`  one line per image: the golden model's `m_axis_tdata`
                  (`{class, score[m-1], ..., score[0]}`);
- `tb.v`, `tb.vhdl`  the testbench module/entity `k2c_tb`;
- `tb.json`       what was written (sizes, widths, seed, cycle limit);
- `golden.npz`    raw inputs, expected raw outputs and classes, labels (for `rtlsim`'s report).

The testbenches drive `s_axis_*` and `m_axis_tready` exactly as the Clash simulation harness
(K2C.Sim) does: with `--gap-max K --seed S`, 0..K idle cycles before each input beat and
`m_axis_tready` low for 0..K cycles before each cycle it is high, drawn from the same
splitmix64 sequence, so RTL and Clash simulation see the same cycles. They check every
output beat against `expected.hex` (and m_axis_tlast, tlast_error, X on the handshake), run
a few cycles past the last output to catch duplicated beats, and print one line per output:

    OUT <sample> <accept_cycle> <output_cycle> <m_axis_tdata hex> <PASS|FAIL>
    DONE <passes> <fails> <cycles>          (or TIMEOUT / ERROR <what>)

They read their data files by a path relative to the HDL folder (`../../../tb/`): run the
simulator from DIR/hdl/<language>/Top.topEntity/, where Clash put the weight files too.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from keras2clash.quant import golden
from keras2clash.data import load_dataset
from keras2clash.errors import K2CError
from keras2clash.fsutil import atomic_directory
from keras2clash.backend.project import Project, load_project

TB_DIR = "tb"
TB_MODULE = "k2c_tb"
DATA_FROM_HDL = "../../../tb/"
"""The testbench's data files seen from DIR/hdl/<language>/Top.topEntity/ (where it runs)."""

GAMMA = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1
OUT_SEED_XOR = 0x5BD1E995
DRAIN_CYCLES = 64
"""Cycles the testbench keeps running after the last expected output, watching for extras."""


@dataclass(frozen=True)
class TbSpec:
    """Everything a testbench needs to know about the design and the run."""

    top: str
    samples: int
    beats: int  # beats per image (k)
    beat_width: int  # values per beat (c)
    in_bits: int  # bits per input value
    n_out: int  # scores (m)
    out_bits: int  # bits per score
    class_bits: int
    gap_max: int
    seed: int
    max_cycles: int

    @property
    def tdata_in(self) -> int:
        return self.beat_width * self.in_bits

    @property
    def tdata_out(self) -> int:
        return self.class_bits + self.n_out * self.out_bits

    @property
    def in_word(self) -> int:
        """Width of one input.hex word ({tlast, tdata}), padded to whole hex digits."""
        return _hex_width(self.tdata_in + 1)

    @property
    def out_word(self) -> int:
        return _hex_width(self.tdata_out)


def _hex_width(bits: int) -> int:
    return 4 * math.ceil(bits / 4)


# --- the random idle cycles, identical to K2C.Sim -------------------------------------


def splitmix64(seed: int):
    """The stream K2C.Sim's `randoms` draws from: 31-bit non-negative integers."""
    state = seed & MASK64
    while True:
        state = (state + GAMMA) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        yield (z ^ (z >> 31)) >> 33


# --- packing (K2C.Axi) -----------------------------------------------------------------


def pack_values(values, bits: int) -> int:
    """Raw integers into one word, element 0 in the lowest bits (two's complement)."""
    mask = (1 << bits) - 1
    word = 0
    for j, v in enumerate(values):
        word |= (int(v) & mask) << (j * bits)
    return word


def pack_result(scores, cls: int, spec: TbSpec) -> int:
    return pack_values(scores, spec.out_bits) | (int(cls) << (spec.n_out * spec.out_bits))


def unpack_result(word: int, spec: TbSpec) -> tuple[np.ndarray, int]:
    """m_axis_tdata -> (raw scores, class)."""
    mask = (1 << spec.out_bits) - 1
    half = 1 << (spec.out_bits - 1)
    scores = []
    for j in range(spec.n_out):
        v = (word >> (j * spec.out_bits)) & mask
        scores.append(v - (1 << spec.out_bits) if v >= half else v)
    return np.array(scores, dtype=np.int64), word >> (spec.n_out * spec.out_bits)


# --- estimates and limits ----------------------------------------------------------------


def cycles_per_image(project: Project) -> int:
    """A conservative estimate of one image's cycles with nothing overlapping: every compute
    layer walks its ROM once per window, plus a couple of cycles per layer."""
    total = 0
    for plan in project.plans:
        if getattr(plan, "is_compute", plan.type == "dense"):
            depth = getattr(plan, "rom_depth", None) or plan.groups
            windows = getattr(plan, "windows_per_image", 1) or 1
            total += depth * windows + 2
        else:
            total += 1
    return total


def estimate_cycles(project: Project, samples: int, gap_max: int) -> int:
    """Cycles a run of `samples` images should take at most (before the stalls stretch it)."""
    beats = math.prod(project.input_shape[:-1])
    per_image = max(cycles_per_image(project), beats) * (1 + gap_max)
    return samples * per_image + cycles_per_image(project) + 10


def cycle_budget(project: Project, samples: int, gap_max: int) -> int:
    """The testbench's timeout: far above the estimate, so only a hang reaches it."""
    return 1000 + 4 * estimate_cycles(project, samples, gap_max)


# --- writing ------------------------------------------------------------------------------


def spec_for(project: Project, samples: int, gap_max: int, seed: int) -> TbSpec:
    first, last = project.plans[0], project.plans[-1]
    return TbSpec(
        top=project.top,
        samples=samples,
        beats=math.prod(project.input_shape[:-1]),
        beat_width=project.input_shape[-1],
        in_bits=first.in_fmt.bits,
        n_out=project.n_out,
        out_bits=last.out_fmt.bits,
        class_bits=(project.n_out - 1).bit_length(),
        gap_max=gap_max,
        seed=seed,
        max_cycles=cycle_budget(project, samples, gap_max),
    )


@dataclass(frozen=True)
class Testbench:
    """A written testbench: where, what, and the golden data it checks against."""

    directory: Path
    spec: TbSpec
    x_raw: np.ndarray  # (N, *input_shape)
    expected: np.ndarray  # (N, n_out) raw
    classes: np.ndarray  # (N,)
    labels: np.ndarray  # (N,)


def prepare(project: Project, data: str | Path, limit: int | None):
    """Load and check the test set against the project; the golden model's answers."""
    dataset = load_dataset(data, project.input_shape, project.n_out).head(limit)
    x_raw = golden.quantize_inputs(project.plans, dataset.x)
    expected = np.asarray(golden.run(project.plans, project.params, x_raw), dtype=np.int64)
    return dataset, np.asarray(x_raw, dtype=np.int64), expected, golden.predict_classes(expected)


def write_testbench(
    project_dir: str | Path,
    data: str | Path,
    limit: int | None = None,
    *,
    gap_max: int = 0,
    seed: int = 1,
) -> Testbench:
    """Write DIR/tb/ (replacing an older one whole) for the first `limit` samples of `data`."""
    if gap_max < 0:
        raise K2CError(f"--gap-max must be >= 0, got {gap_max}")
    if limit is not None and limit < 1:
        raise K2CError(f"-n must be >= 1, got {limit}")
    project = load_project(project_dir)
    dataset, x_raw, expected, classes = prepare(project, data, limit)
    spec = spec_for(project, len(dataset), gap_max, seed)
    target = project.root / TB_DIR
    with atomic_directory(target, force=True) as tmp:
        _write_files(tmp, spec, x_raw, expected, classes, dataset.y)
    return Testbench(target, spec, x_raw, expected, classes, dataset.y)


def _write_files(root: Path, spec: TbSpec, x_raw, expected, classes, labels) -> None:
    digits_in, digits_out = spec.in_word // 4, spec.out_word // 4
    lines = []
    for image in x_raw.reshape(spec.samples, spec.beats, spec.beat_width):
        for b, beat in enumerate(image):
            word = pack_values(beat, spec.in_bits) | (int(b == spec.beats - 1) << spec.tdata_in)
            lines.append(f"{word:0{digits_in}x}")
    (root / "input.hex").write_text("\n".join(lines) + "\n")
    outs = [f"{pack_result(s, c, spec):0{digits_out}x}" for s, c in zip(expected, classes)]
    (root / "expected.hex").write_text("\n".join(outs) + "\n")
    (root / "tb.v").write_text(verilog_tb(spec))
    (root / "tb.vhdl").write_text(vhdl_tb(spec))
    (root / "tb.json").write_text(json.dumps(asdict(spec), indent=2) + "\n")
    np.savez(root / "golden.npz", x_raw=x_raw, expected=expected, classes=classes, labels=labels)


def read_spec(project_root: Path) -> TbSpec:
    return TbSpec(**json.loads((Path(project_root) / TB_DIR / "tb.json").read_text()))


# --- the testbench texts --------------------------------------------------------------------


def verilog_tb(spec: TbSpec) -> str:
    """Verilog-2005 testbench (Icarus; Verilator 5 with --binary --timing)."""
    s = spec
    return f"""// Testbench for {s.top}, generated by keras2clash (see keras2clash/testbench.py).
// Run from the HDL folder (hdl/verilog/Top.topEntity/): it reads {DATA_FROM_HDL}*.hex.
`timescale 1ns/1ps
module {TB_MODULE};
  localparam integer N          = {s.samples};     // images
  localparam integer K          = {s.beats};     // beats per image
  localparam integer IN_W       = {s.tdata_in};    // s_axis_tdata bits
  localparam integer IN_WORD    = {s.in_word};    // input.hex word: {{tlast, tdata}}, padded
  localparam integer OUT_W      = {s.tdata_out};    // m_axis_tdata bits
  localparam integer OUT_WORD   = {s.out_word};
  localparam integer GAP_MAX    = {s.gap_max};
  localparam [63:0]  SEED       = 64'd{s.seed};
  localparam integer MAX_CYCLES = {s.max_cycles};
  localparam integer DRAIN      = {DRAIN_CYCLES};

  reg clk = 1'b0;
  reg rst = 1'b1;
  reg [IN_W-1:0] s_axis_tdata = {{IN_W{{1'b0}}}};
  reg s_axis_tvalid = 1'b0;
  reg s_axis_tlast = 1'b0;
  reg m_axis_tready = 1'b0;
  wire s_axis_tready, m_axis_tvalid, m_axis_tlast, tlast_error;
  wire [OUT_W-1:0] m_axis_tdata;

  {s.top} dut
    ( .clk(clk), .rst(rst), .en(1'b1)
    , .s_axis_tdata(s_axis_tdata), .s_axis_tvalid(s_axis_tvalid), .s_axis_tlast(s_axis_tlast)
    , .m_axis_tready(m_axis_tready)
    , .s_axis_tready(s_axis_tready)
    , .m_axis_tdata(m_axis_tdata), .m_axis_tvalid(m_axis_tvalid), .m_axis_tlast(m_axis_tlast)
    , .tlast_error(tlast_error) );

  reg [IN_WORD-1:0]  in_mem  [0:N*K-1];
  reg [OUT_WORD-1:0] exp_mem [0:N-1];
  integer accept [0:N-1];

  integer cycle = 0, beat = 0, outs = 0, passes = 0, fails = 0, drained = 0;
  integer gap_left = 0, ready_left = 0;
  reg [63:0] in_state = SEED, out_state = SEED ^ 64'h{OUT_SEED_XOR:x};
  reg done = 1'b0;

  always #5 clk = ~clk;

  // splitmix64, as K2C.Sim draws its idle cycles
  function [63:0] mix(input [63:0] z0);
    reg [63:0] z;
    begin
      z = (z0 ^ (z0 >> 30)) * 64'hbf58476d1ce4e5b9;
      z = (z ^ (z >> 27)) * 64'h94d049bb133111eb;
      mix = z ^ (z >> 31);
    end
  endfunction

  task next_in_gap;
    begin
      in_state = in_state + 64'h{GAMMA:x};
      gap_left = (GAP_MAX == 0) ? 0 : ((mix(in_state) >> 33) % (GAP_MAX + 1));
    end
  endtask

  task next_out_gap;
    begin
      out_state = out_state + 64'h{GAMMA:x};
      ready_left = (GAP_MAX == 0) ? 0 : ((mix(out_state) >> 33) % (GAP_MAX + 1));
    end
  endtask

  task show_beat;
    begin
      if (beat < N*K && gap_left == 0) begin
        s_axis_tvalid <= 1'b1;
        s_axis_tdata  <= in_mem[beat][IN_W-1:0];
        s_axis_tlast  <= in_mem[beat][IN_W];
      end else begin
        s_axis_tvalid <= 1'b0;
        s_axis_tdata  <= {{IN_W{{1'b0}}}};
        s_axis_tlast  <= 1'b0;
      end
      m_axis_tready <= (ready_left == 0);
    end
  endtask

  initial begin
    $readmemh("{DATA_FROM_HDL}input.hex", in_mem);
    $readmemh("{DATA_FROM_HDL}expected.hex", exp_mem);
    if (^in_mem[N*K-1] === 1'bx || ^exp_mem[N-1] === 1'bx) begin
      $display("ERROR testbench data files missing or short (run from the HDL folder)");
      $finish;
    end
    #10 rst = 1'b0;  // one reset cycle (the rising edge at 5 ns), as K2C.Sim
    next_in_gap;
    next_out_gap;
    show_beat;
  end

  always @(posedge clk) begin
    if (!rst && !done) begin
      if (s_axis_tready === 1'bx || m_axis_tvalid === 1'bx || tlast_error === 1'bx) begin
        $display("ERROR X on a handshake output in cycle %0d", cycle);
        done = 1'b1;
        $finish;
      end
      if (tlast_error === 1'b1) begin
        $display("ERROR tlast_error rose in cycle %0d", cycle);
        fails = fails + 1;
        done = 1'b1;
      end
      // input side: did the shown beat move?
      if (s_axis_tvalid && s_axis_tready) begin
        if (beat % K == 0) accept[beat / K] = cycle;
        beat = beat + 1;
        next_in_gap;
      end else if (gap_left > 0) begin
        gap_left = gap_left - 1;
      end
      // output side
      if (m_axis_tvalid && m_axis_tready) begin
        if (outs >= N) begin
          $display("ERROR extra output beat in cycle %0d: %h", cycle, m_axis_tdata);
          fails = fails + 1;
          done = 1'b1;
        end else if (m_axis_tdata === exp_mem[outs][OUT_W-1:0] && m_axis_tlast === 1'b1) begin
          $display("OUT %0d %0d %0d %h PASS", outs, accept[outs], cycle, m_axis_tdata);
          passes = passes + 1;
          outs = outs + 1;
        end else begin
          $display("OUT %0d %0d %0d %h FAIL", outs, accept[outs], cycle, m_axis_tdata);
          if (m_axis_tlast !== 1'b1) $display("ERROR m_axis_tlast low on output %0d", outs);
          fails = fails + 1;
          outs = outs + 1;
        end
      end
      if (m_axis_tready) next_out_gap;
      else ready_left = ready_left - 1;
      if (outs >= N) drained = drained + 1;
      cycle = cycle + 1;
      if (done || drained > DRAIN) begin
        $display("DONE %0d %0d %0d", passes, fails, cycle);
        done = 1'b1;
        $finish;
      end else if (cycle >= MAX_CYCLES) begin
        $display("TIMEOUT %0d outputs of %0d after %0d cycles", outs, N, cycle);
        done = 1'b1;
        $finish;
      end
      show_beat;
    end
  end
endmodule
"""


def vhdl_tb(spec: TbSpec) -> str:
    """VHDL-2008 testbench (GHDL --std=08), the same schedule and checks as the Verilog one."""
    s = spec
    return f"""-- Testbench for {s.top}, generated by keras2clash (see keras2clash/testbench.py).
-- Run from the HDL folder (hdl/vhdl/Top.topEntity/): it reads {DATA_FROM_HDL}*.hex.
library ieee;
use ieee.std_logic_1164.all;
use ieee.numeric_std.all;
use std.textio.all;
use std.env.all;

entity {TB_MODULE} is
end entity;

architecture sim of {TB_MODULE} is
  constant N          : natural := {s.samples};
  constant K          : natural := {s.beats};
  constant IN_W       : natural := {s.tdata_in};
  constant IN_WORD    : natural := {s.in_word};
  constant OUT_W      : natural := {s.tdata_out};
  constant OUT_WORD   : natural := {s.out_word};
  constant GAP_MAX    : natural := {s.gap_max};
  constant SEED       : unsigned(63 downto 0) := to_unsigned({s.seed}, 64);
  constant OUT_XOR    : unsigned(63 downto 0) := x"{OUT_SEED_XOR:016x}";
  constant GAMMA      : unsigned(63 downto 0) := x"{GAMMA:016x}";
  constant MIX1       : unsigned(63 downto 0) := x"bf58476d1ce4e5b9";
  constant MIX2       : unsigned(63 downto 0) := x"94d049bb133111eb";
  constant MAX_CYCLES : natural := {s.max_cycles};
  constant DRAIN      : natural := {DRAIN_CYCLES};

  type in_array  is array (0 to N*K-1) of std_logic_vector(IN_WORD-1 downto 0);
  type out_array is array (0 to N-1) of std_logic_vector(OUT_WORD-1 downto 0);
  type int_array is array (0 to N-1) of integer;

  signal clk           : std_logic := '0';
  signal rst           : std_logic := '1';
  signal s_axis_tdata  : std_logic_vector(IN_W-1 downto 0) := (others => '0');
  signal s_axis_tvalid : std_logic := '0';
  signal s_axis_tlast  : std_logic := '0';
  signal m_axis_tready : std_logic := '0';
  signal s_axis_tready : std_logic;
  signal m_axis_tdata  : std_logic_vector(OUT_W-1 downto 0);
  signal m_axis_tvalid : std_logic;
  signal m_axis_tlast  : std_logic;
  signal tlast_error   : std_logic;
  signal finished      : boolean := false;

  -- splitmix64, as K2C.Sim draws its idle cycles
  function mix(z0 : unsigned(63 downto 0)) return unsigned is
    variable z : unsigned(63 downto 0);
  begin
    z := resize((z0 xor shift_right(z0, 30)) * MIX1, 64);
    z := resize((z xor shift_right(z, 27)) * MIX2, 64);
    return z xor shift_right(z, 31);
  end function;

  procedure draw(state : inout unsigned(63 downto 0); gap : out natural) is
  begin
    state := state + GAMMA;
    if GAP_MAX = 0 then
      gap := 0;
    else
      gap := to_integer(shift_right(mix(state), 33)) mod (GAP_MAX + 1);
    end if;
  end procedure;

  procedure say(text : string) is
    variable l : line;
  begin
    write(l, text);
    writeline(output, l);
  end procedure;
begin
  dut : entity work.{s.top}
    port map
      ( clk => clk, rst => rst, en => true
      , s_axis_tdata => s_axis_tdata, s_axis_tvalid => s_axis_tvalid, s_axis_tlast => s_axis_tlast
      , m_axis_tready => m_axis_tready
      , s_axis_tready => s_axis_tready
      , m_axis_tdata => m_axis_tdata, m_axis_tvalid => m_axis_tvalid, m_axis_tlast => m_axis_tlast
      , tlast_error => tlast_error );

  clk <= not clk after 5 ns when not finished;

  stimulus : process
    file f            : text;
    variable l        : line;
    variable in_mem   : in_array;
    variable exp_mem  : out_array;
    variable accept   : int_array;
    variable cycle, beat, outs, passes, fails, drained : natural := 0;
    variable gap_left, ready_left : natural := 0;
    variable in_state : unsigned(63 downto 0) := SEED;
    variable out_state : unsigned(63 downto 0) := SEED xor OUT_XOR;
    variable done     : boolean := false;
    variable ok       : boolean;

    procedure show_beat is
    begin
      if beat < N*K and gap_left = 0 then
        s_axis_tvalid <= '1';
        s_axis_tdata  <= in_mem(beat)(IN_W-1 downto 0);
        s_axis_tlast  <= in_mem(beat)(IN_W);
      else
        s_axis_tvalid <= '0';
        s_axis_tdata  <= (others => '0');
        s_axis_tlast  <= '0';
      end if;
      if ready_left = 0 then m_axis_tready <= '1'; else m_axis_tready <= '0'; end if;
    end procedure;
  begin
    file_open(f, "{DATA_FROM_HDL}input.hex", read_mode);
    for i in in_mem'range loop
      readline(f, l);
      hread(l, in_mem(i), ok);
      assert ok report "input.hex: bad or missing line" severity failure;
    end loop;
    file_close(f);
    file_open(f, "{DATA_FROM_HDL}expected.hex", read_mode);
    for i in exp_mem'range loop
      readline(f, l);
      hread(l, exp_mem(i), ok);
      assert ok report "expected.hex: bad or missing line" severity failure;
    end loop;
    file_close(f);

    wait until rising_edge(clk);  -- the one reset cycle, as K2C.Sim
    wait until falling_edge(clk);
    rst <= '0';
    draw(in_state, gap_left);
    draw(out_state, ready_left);
    show_beat;

    while not done loop
      wait until rising_edge(clk);
      if is_x(s_axis_tready) or is_x(m_axis_tvalid) or is_x(tlast_error) then
        say("ERROR X on a handshake output in cycle " & integer'image(cycle));
        fails := fails + 1;
        exit;
      end if;
      if tlast_error = '1' then
        say("ERROR tlast_error rose in cycle " & integer'image(cycle));
        fails := fails + 1;
        done := true;
      end if;
      if s_axis_tvalid = '1' and s_axis_tready = '1' then
        if beat mod K = 0 then accept(beat / K) := cycle; end if;
        beat := beat + 1;
        draw(in_state, gap_left);
      elsif gap_left > 0 then
        gap_left := gap_left - 1;
      end if;
      if m_axis_tvalid = '1' and m_axis_tready = '1' then
        if outs >= N then
          say("ERROR extra output beat in cycle " & integer'image(cycle) & ": " & to_hstring(m_axis_tdata));
          fails := fails + 1;
          done := true;
        elsif m_axis_tdata = exp_mem(outs)(OUT_W-1 downto 0) and m_axis_tlast = '1' then
          say("OUT " & integer'image(outs) & " " & integer'image(accept(outs)) & " "
              & integer'image(cycle) & " " & to_hstring(m_axis_tdata) & " PASS");
          passes := passes + 1;
          outs := outs + 1;
        else
          say("OUT " & integer'image(outs) & " " & integer'image(accept(outs)) & " "
              & integer'image(cycle) & " " & to_hstring(m_axis_tdata) & " FAIL");
          if m_axis_tlast /= '1' then
            say("ERROR m_axis_tlast low on output " & integer'image(outs));
          end if;
          fails := fails + 1;
          outs := outs + 1;
        end if;
      end if;
      if m_axis_tready = '1' then
        draw(out_state, ready_left);
      else
        ready_left := ready_left - 1;
      end if;
      if outs >= N then drained := drained + 1; end if;
      cycle := cycle + 1;
      if done or drained > DRAIN then
        done := true;
      elsif cycle >= MAX_CYCLES then
        say("TIMEOUT " & integer'image(outs) & " outputs of " & integer'image(N)
            & " after " & integer'image(cycle) & " cycles");
        finished <= true;
        wait for 1 ns;
        finish;
      else
        show_beat;
      end if;
    end loop;
    say("DONE " & integer'image(passes) & " " & integer'image(fails) & " " & integer'image(cycle));
    finished <= true;
    wait for 1 ns;
    finish;
  end process;
end architecture;
"""
