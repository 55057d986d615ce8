"""The plots of the benchmarks page, drawn from bench/*.json (docs/benchdocs.py reads them).

Each function returns a matplotlib Figure (no pyplot: no window, no global state); the page
generator (docs/gen_pages.py) writes them as PNG.
"""

from __future__ import annotations

import benchdocs
from matplotlib.figure import Figure

DPI = 110
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")


def _all_designs() -> list[benchdocs.Design]:
    return [d for device in benchdocs.devices() for d in benchdocs.designs(device)]


def _label(d: benchdocs.Design) -> str:
    return f"{d.label} [{d.part}]"


def _device_colours() -> dict[str, str]:
    return {device: COLOURS[i % len(COLOURS)] for i, device in enumerate(benchdocs.devices())}


def _barh(
    values: list[float],
    labels: list[str],
    colours: list[str],
    xlabel: str,
    title: str,
    text: list[str],
    log: bool = False,
) -> Figure:
    fig = Figure(figsize=(8, 0.35 * len(values) + 1.2), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    y = range(len(values))
    ax.barh(y, values, color=colours)
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    for i, (value, label) in enumerate(zip(values, text)):
        ax.text(value, i, f" {label}", va="center", fontsize=8)
    ax.margins(x=0.15)
    return fig


def _legend(fig: Figure, ax) -> None:
    from matplotlib.patches import Patch

    parts = {d.device: d.part for d in _all_designs()}
    ax.legend(
        handles=[Patch(color=c, label=f"{parts.get(dev, dev)} ({dev})") for dev, c in _device_colours().items()],
        loc="lower right",
        fontsize=8,
    )


def fmax() -> Figure:
    rows = _all_designs()
    colours = _device_colours()
    fig = _barh(
        [d.fmax_mhz for d in rows],
        [_label(d) for d in rows],
        [colours[d.device] for d in rows],
        "Fmax after routing (MHz)",
        "Fmax per design and part",
        [benchdocs.mhz(d.fmax_mhz) for d in rows],
    )
    _legend(fig, fig.axes[0])
    return fig


def latency() -> Figure:
    rows = _all_designs()
    colours = _device_colours()
    fig = _barh(
        [d.latency_ns for d in rows],
        [_label(d) for d in rows],
        [colours[d.device] for d in rows],
        "latency at Fmax (ns, log scale)",
        "Latency per design and part",
        [f"{benchdocs.ns(d.latency_ns)} ({benchdocs.thousands(d.latency_cycles)} cycles)" for d in rows],
        log=True,
    )
    _legend(fig, fig.axes[0])
    return fig


def resources() -> Figure:
    rows = _all_designs()
    kinds = [("lut", "LUT4"), ("ff", "flip-flops"), ("mult", "multipliers"), ("bram", "block RAM")]
    fig = Figure(figsize=(8, 0.55 * len(rows) + 1.4), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    height = 0.8 / len(kinds)
    for k, (key, name) in enumerate(kinds):
        shares = [100 * d.used.get(key, 0) / d.available[key] if d.available.get(key) else 0 for d in rows]
        ax.barh(
            [i + (k - (len(kinds) - 1) / 2) * height for i in range(len(rows))],
            shares,
            height=height,
            label=name,
            color=COLOURS[k],
        )
    ax.set_yticks(range(len(rows)), [_label(d) for d in rows])
    ax.invert_yaxis()
    ax.set_xlabel("share of the part (%)")
    ax.set_xlim(0, 100)
    ax.set_title("Resources per design")
    fig.legend(loc="outside lower center", ncols=len(kinds), fontsize=8)
    return fig


def pipeline(device: str = "ecp5-85k") -> Figure:
    rows = benchdocs.sweep(device)
    levels = [d.pipeline[0] for d in rows]
    fig = Figure(figsize=(6.5, 3.6), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    ax.plot(levels, [d.fmax_mhz for d in rows], "o-", color=COLOURS[0], label="Fmax")
    ax.set_xlabel("--pipeline (adder-tree levels per register stage; 0: none)")
    ax.set_ylabel("Fmax (MHz)", color=COLOURS[0])
    ax.set_xticks(levels)
    right = ax.twinx()
    right.plot(levels, [d.latency_ns for d in rows], "s--", color=COLOURS[1], label="latency")
    right.set_ylabel("latency at Fmax (ns)", color=COLOURS[1])
    ax.set_title(f"{rows[0].example} on {rows[0].part}: the pipeline knob")
    return fig


def accuracy() -> Figure:
    rows = benchdocs.accuracy_rows()
    rungs = [("keras_float", "Keras float"), ("fit", "hardware, weights fit"), ("same", "hardware, weights same")]
    fig = Figure(figsize=(8, 3.8), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(rungs)
    lowest = 100.0
    for k, (key, name) in enumerate(rungs):
        values = [100 * r["test"]["right"][key] / r["test"]["images"] for r in rows]
        lowest = min(lowest, *values)
        ax.bar(
            [i + (k - (len(rungs) - 1) / 2) * width for i in range(len(rows))],
            values,
            width=width,
            label=name,
            color=COLOURS[k],
        )
    ax.set_xticks(range(len(rows)), [r["example"] for r in rows], rotation=30, ha="right")
    ax.set_ylim(max(0.0, lowest - 3), 100)
    ax.set_ylabel("test set accuracy (%)")
    ax.set_title(f"Accuracy at format {benchdocs.load('accuracy.json')['format']}")
    fig.legend(loc="outside lower center", ncols=len(rungs), fontsize=8)
    return fig


def widths() -> Figure:
    """The golden model's accuracy against total bits, a line per example; each line ends in a
    dotted step to its Keras float accuracy, at the right. Two panels: the whole range, and
    the top of it, where the examples level off."""
    import matplotlib

    rows = benchdocs.widths_examples()
    colours = matplotlib.colormaps["tab10"].colors
    bits = sorted({r["bits"] for e in rows for r in e["rows"]})
    float_x = bits[-1] + 3
    floats = [100 * e["keras_float"] / e["images"] for e in rows]
    fig = Figure(figsize=(10, 4.6), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, 2)
    for k, e in enumerate(rows):
        points = sorted((r["bits"], 100 * r["golden"] / e["images"]) for r in e["rows"])
        for ax in axes:
            ax.plot(
                [b for b, _ in points],
                [a for _, a in points],
                marker=".",
                ms=5,
                lw=1.2,
                color=colours[k % len(colours)],
                label=e["example"] if ax is axes[0] else None,
            )
            ax.plot([points[-1][0], float_x], [points[-1][1], floats[k]], ":", color=colours[k % len(colours)])
            ax.plot([float_x], [floats[k]], "*", ms=9, color=colours[k % len(colours)])
    ticks = [b for b in bits if b % 4 == 0 or b == bits[0]] + [float_x]
    for ax in axes:
        ax.set_xticks(ticks, [str(b) for b in ticks[:-1]] + ["float"])
        ax.set_xlabel("total bits (uniform format)")
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, 100)
    axes[0].set_ylabel("test set accuracy (%)")
    axes[0].set_title("golden model (= hardware) against Keras float (★)")
    low = min(floats) - 5
    axes[1].set_ylim(low, 100)
    axes[1].set_title(f"zoom: the top {100 - low:.0f} points")
    fig.legend(loc="outside lower center", ncols=min(len(rows), 5), fontsize=8)
    return fig


def toolchain() -> Figure:
    data = benchdocs.load("results.json")
    tools = data["tools"]
    steps = [
        ("emit", tools["emit_seconds"]),
        ("clash --verilog", tools["clash_verilog_seconds"]),
        ("ghc -O2 simulator", tools["ghc_build_seconds"]),
        (f"Clash simulation, {tools['clash_sim']['images']} images", tools["clash_sim"]["seconds"]),
    ]
    if "verilator" in tools:
        steps += [
            ("Verilator build", tools["verilator"]["build_seconds"]),
            (f"Verilator, {tools['verilator']['images']} images", tools["verilator"]["seconds"]),
        ]
    return _barh(
        [s for _, s in steps],
        [name for name, _ in steps],
        [COLOURS[0]] * len(steps),
        "seconds (log scale)",
        f"Toolchain: {data['model']} at {data['format']}",
        [benchdocs.seconds(s) for _, s in steps],
        log=True,
    )


def training() -> Figure:
    """Left: the running loss per epoch, the golden trainer (solid) beside Keras float (dashed),
    a colour per network. Right: the test accuracy after the last epoch against the
    gradients' width, Keras float as a dashed line."""
    import matplotlib

    rows = benchdocs.training_examples()
    colours = matplotlib.colormaps["tab10"].colors
    fig = Figure(figsize=(10, 4.2), dpi=DPI, layout="constrained")
    loss, acc = fig.subplots(1, 2)
    for k, row in enumerate(rows):
        c = colours[k % len(colours)]
        for runs, style, who in (
            (row["golden"]["epochs"], "-o", "golden"),
            (row["keras_float"]["epochs"], "--s", "Keras float"),
        ):
            loss.plot(
                [r["epoch"] for r in runs],
                [r["loss"] for r in runs],
                style,
                ms=4,
                color=c,
                label=f"{row['example']}, {who}",
            )
        widths = row["gradient_widths"]
        acc.plot(
            [r["g_bits"] for r in widths],
            [100 * r["epochs"][-1]["test_accuracy"] for r in widths],
            "-o",
            ms=4,
            color=c,
            label=row["example"],
        )
        acc.axhline(100 * row["keras_float"]["epochs"][-1]["test_accuracy"], ls="--", lw=1, color=c)
    loss.set(xlabel="epoch", ylabel="running loss", title="loss per epoch (batch 1)")
    loss.set_yscale("log")
    acc.set(
        xlabel="gradient format's total bits (1,0,F)",
        ylabel="test accuracy after the last epoch (%)",
        title="test accuracy against the gradients' width (dashed: Keras)",
    )
    for ax in (loss, acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


PLOTS = {
    "fmax.png": fmax,
    "latency.png": latency,
    "resources.png": resources,
    "pipeline.png": pipeline,
    "accuracy.png": accuracy,
    "widths.png": widths,
    "toolchain.png": toolchain,
    "training.png": training,
}
