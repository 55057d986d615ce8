"""mkdocs-gen-files script: the pages generated at build time (none of them is committed).

- reference/cli.md: Typer's own Markdown for the `keras2clash` app (`typer keras2clash.cli utils docs`);
- reference/api.md: mkdocstrings entries for the public Python API;
- benchmarks/index.md and its PNG plots: tables and plots from bench/*.json;
- changelog.md: the repository's CHANGELOG.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchdocs  # noqa: E402

ROOT = benchdocs.ROOT

API = [
    {
        "title": "Compile, simulate, run",
        "text": "The steps of the flow, each a function; the design knobs in one record.",
        "entries": [
            "keras2clash.emit",
            "keras2clash.hdl",
            "keras2clash.simulate",
            "keras2clash.run",
            "keras2clash.DesignOptions",
            "keras2clash.api.testbench",
            "keras2clash.api.rtlsim",
            "keras2clash.api.synth",
        ],
    },
    {
        "title": "Golden model and debugging",
        "text": "The golden model's outputs (= the hardware's) and a layer-by-layer comparison with Keras.",
        "entries": ["keras2clash.predict", "keras2clash.Prediction", "keras2clash.trace"],
    },
    {
        "title": "Formats and errors",
        "text": "",
        "entries": ["keras2clash.FixedFormat", "keras2clash.parse_format", "keras2clash.K2CError"],
    },
    {
        "title": "The comparison table",
        "text": "What `simulate` and `run` return.",
        "entries": ["keras2clash.report.comparison.Comparison"],
    },
    {
        "title": "Networks and the IR",
        "text": "The loading path every command uses, and the typed graph.",
        "entries": [
            "keras2clash.network.Network",
            "keras2clash.network.load_network",
            "keras2clash.network.plan_network",
            "keras2clash.ir.graph.Graph",
        ],
    },
]
"""The public API, in reading order: a section per topic, an entry per object."""


def cli_page() -> str:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        TERM="dumb",
        NO_COLOR="1",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "typer",
            "keras2clash.cli",
            "utils",
            "docs",
            "--name",
            "keras2clash",
            "--title",
            "Command line",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"typer utils docs failed:\n{result.stderr}")
    intro = (
        "Generated from the Typer app (`keras2clash.cli`) with `typer keras2clash.cli utils docs`: "
        "`keras2clash COMMAND --help` prints the same.\n"
    )
    title, _, rest = result.stdout.partition("\n")
    return f"{title}\n\n{intro}{rest}"


def write(path: str, text: str, source: str) -> None:
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(text)
    mkdocs_gen_files.set_edit_path(path, source)


def benchmarks() -> None:
    import benchplots

    devices = [{"name": d, "part": benchdocs.part(d), "table": benchdocs.fpga_table(d)} for d in benchdocs.devices()]
    sweeps = [d for d in benchdocs.devices() if benchdocs.sweep(d)]
    page = benchdocs.render(
        "benchmarks.md.j2",
        headline=benchdocs.headline_table(),
        devices=devices,
        sweep=benchdocs.sweep_table(sweeps[0]) if sweeps else "",
        da4ml=benchdocs.da4ml_table() if (benchdocs.BENCH / "da4ml.json").is_file() else "",
        accuracy=benchdocs.accuracy_table(),
        widths=benchdocs.widths_table(),
        width_examples=[
            {"example": e["example"], "table": benchdocs.widths_table(e["example"])}
            for e in benchdocs.widths_examples()
        ],
        configurations=benchdocs.configurations_table(),
        training=benchdocs.training_table(),
        training_core=benchdocs.training_core_table() if (benchdocs.BENCH / "training_core.json").is_file() else "",
        toolchain=benchdocs.toolchain_table(),
    )
    write("benchmarks/index.md", page, "../bench/")
    for name, plot in benchplots.PLOTS.items():
        if name == "pipeline.png":
            if not sweeps:
                continue
            figure = plot(sweeps[0])
        else:
            figure = plot()
        with mkdocs_gen_files.open(f"benchmarks/{name}", "wb") as f:
            figure.savefig(f, format="png")


write("reference/cli.md", cli_page(), "../keras2clash/cli/")
write("reference/api.md", benchdocs.render("api.md.j2", sections=API), "../keras2clash/__init__.py")
write("changelog.md", (ROOT / "CHANGELOG.md").read_text(), "../CHANGELOG.md")
benchmarks()
