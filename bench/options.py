#!/usr/bin/env python3
"""How long exploring the space-time trade-off takes (a script, not a timed test): writes
bench/options.json.

    .venv/bin/python bench/options.py [--examples iris,jet_hgq/jet_qat,...] [--budget ecp5-85k]
                                      [--cli jet_hgq/jet_qat,resnet_digits] [--out bench/options.json]

For every example of bench/fpga.py's EXAMPLES (at 1,7,8, the `options` command's default):

- `load`: the model loaded and planned (`report.hwreport.load_source`; the first example's
  includes importing TensorFlow and Keras);
- `options`: `options MODEL` (pe only) and `options MODEL --cycles-too` (`hw.options.explore`):
  seconds, useful configurations, configurations evaluated, whether the fronts' search ended
  by itself or at its time limit, and the points on the interval and latency fronts;
- `balanced`: `--dsp-budget` (`hw.allocate.balanced`) within `--budget`: seconds and the
  chosen allocation's II, latency, multipliers and configuration;

and, for the `--cli` examples, the wall time of the whole command
`keras2clash options MODEL --pareto --cycles-too` in a fresh process (Python start-up,
TensorFlow import and loading included).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fpga import EXAMPLES  # noqa: E402

CLI = ["jet_hgq/jet_qat", "resnet_digits"]


def _model(example: str) -> Path:
    name = example.partition("@")[0]
    return ROOT / "examples" / f"{name if '/' in name else f'{name}/{name}'}.keras"


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, round(time.perf_counter() - t0, 2)


def _options(result) -> dict:
    return {
        "seconds": round(result.seconds, 2),
        "configurations": result.configurations,
        "evaluated": len(result.options),
        "complete": result.complete,
        "search_ended": not result.notes,
        "pareto_ii": sum(o.pareto_ii for o in result.options),
        "pareto_latency": sum(o.pareto_latency for o in result.options),
    }


def _example(example: str, budget: int) -> dict:
    from keras2clash.errors import K2CError
    from keras2clash.hw.allocate import balanced
    from keras2clash.hw.options import explore
    from keras2clash.report.hwreport import load_source

    source, load_seconds = _timed(load_source, _model(example), "1,7,8")
    row: dict = {"example": example.partition("@")[0], "load_seconds": load_seconds}
    row["options"] = _options(explore(source.plans, source.name))
    row["options_cycles_too"] = _options(explore(source.plans, source.name, cycles_too=True))
    try:
        alloc, seconds = _timed(balanced, source.plans, budget)
    except K2CError as exc:
        row["balanced"] = {"budget": budget, "error": str(exc)}
        return row
    f = alloc.figures
    row["balanced"] = {
        "budget": budget,
        "seconds": seconds,
        "ii": f.ii,
        "latency": f.latency,
        "multipliers": f.multipliers,
        "parallelism": f.parallelism,
        "cycles": f.cycles,
        "evaluated": alloc.evaluated,
    }
    return row


def _cli(example: str) -> dict:
    cmd = [sys.executable, "-m", "keras2clash", "options", str(_model(example)), "--pareto", "--cycles-too"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    return {
        "example": example,
        "command": "keras2clash options MODEL --pareto --cycles-too",
        "seconds": round(time.perf_counter() - t0, 2),
        "exit_code": proc.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--budget", default="ecp5-85k")
    parser.add_argument("--cli", default=",".join(CLI))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "options.json")
    args = parser.parse_args()
    from keras2clash.fpga.devices import multiplier_budget

    budget = multiplier_budget(args.budget)
    examples = list(dict.fromkeys(e.partition("@")[0] for e in args.examples.split(",") if e.strip()))
    result: dict = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "budget": {"given": args.budget, "multipliers": budget},
        "examples": [],
        "cli": [],
    }
    for example in examples:
        row = _example(example, budget)
        result["examples"].append(row)
        print(json.dumps(row), flush=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    for example in [e for e in args.cli.split(",") if e.strip()]:
        row = _cli(example)
        result["cli"].append(row)
        print(json.dumps(row), flush=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
