#!/usr/bin/env python3
"""Benchmarks of keras2clash (a script, not a timed test): writes bench/results.json.

    .venv/bin/python bench/run.py [--images N] [--out bench/results.json] [--skip-verilator]

What it measures, on the thesis CNN (examples/thesis_cnn, format 1,7,8):

- tool times: `emit` (model load to project), Clash to Verilog, GHC build of the Clash
  simulation, Verilator build;
- simulation speed: the GHC-compiled Clash simulation and Verilator, cycles/s and
  images/s, images back to back;
- the hardware: latency, II, multipliers and multiplier efficiency (MACs / (multipliers x
  II)) for the thesis' configurations (1,1,1), (2,2,2), (4,4,2), (8,8,5) and the balanced
  allocation within 217 multipliers (--dsp-budget 217), each from the exact model and
  measured in the Clash simulation (bit-exact against the golden model);
- the model's own speed: `options` over every useful configuration, and with the cycles
  knob too (the configurations its search of the fronts evaluates).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

THESIS = ROOT / "examples" / "thesis_cnn"
CONFIGS = [(1, 1, 1), (2, 2, 2), (4, 4, 2), (8, 8, 5)]
BUDGET = 217


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - t0


def _clash_sim(project, data: Path, n: int):
    from keras2clash.data import load_dataset
    from keras2clash.quant import golden
    from keras2clash.verify import toolchain
    from keras2clash.verify.simulate import run_simulator

    ds = load_dataset(data, project.input_shape, project.n_out).head(n)
    x_raw = golden.quantize_inputs(project.plans, ds.x)
    exe, build = _timed(toolchain.build_simulator, project.root)
    sim, seconds = _timed(run_simulator, exe, project.root, x_raw, project.n_out)
    gold = golden.run(project.plans, project.params, x_raw)
    exact = int(np.sum(np.all(sim.outputs == gold, axis=1)))
    return sim, exact, build, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=100, help="images per simulation-speed run (default 100)")
    parser.add_argument("--config-images", type=int, default=8, help="images per configuration check (default 8)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    parser.add_argument("--skip-verilator", action="store_true")
    args = parser.parse_args()

    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.hw import hwmodel, options
    from keras2clash.hw.allocate import balanced
    from keras2clash.network import load_network
    from keras2clash.verify import toolchain

    fmt = "1,7,8"
    data = THESIS / "test.npz"
    model_path = THESIS / "thesis_cnn.keras"
    work = Path(tempfile.mkdtemp(prefix="k2c-bench-"))
    results: dict = {
        "model": "thesis_cnn",
        "format": fmt,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
        },
    }
    try:
        # -- the model's speed
        base = load_network(model_path, fmt).plans
        opts = options.explore(base, "thesis_cnn")
        opts_c = options.explore(base, "thesis_cnn", cycles_too=True)
        alloc, alloc_s = _timed(balanced, base, BUDGET)
        results["model_speed"] = {
            "options_configurations": len(opts.options),
            "options_seconds": opts.seconds,
            "options_cycles_too_configurations": opts_c.configurations,
            "options_cycles_too_evaluated": len(opts_c.options),
            "options_cycles_too_seconds": opts_c.seconds,
            "dsp_budget_seconds": alloc_s,
        }

        # -- tool times and simulation speed on (8,8,5)
        out = work / "cnn_885"
        project_dir, emit_s = _timed(k2c.emit, model_path, fmt, out, [8, 8, 5])
        _, verilog_s = _timed(toolchain.generate_hdl, project_dir, "verilog")
        project = load_project(project_dir)
        sim, exact, build_s, sim_s = _clash_sim(project, data, args.images)
        cycles = int(sim.output_cycle[-1]) + 1
        speed = {
            "emit_seconds": emit_s,
            "clash_verilog_seconds": verilog_s,
            "ghc_build_seconds": build_s,
            "clash_sim": {
                "images": args.images,
                "bit_exact": exact,
                "cycles": cycles,
                "seconds": sim_s,
                "cycles_per_second": cycles / sim_s,
                "images_per_second": args.images / sim_s,
            },
        }
        if not args.skip_verilator and shutil.which("verilator"):
            rtl = k2c.api.rtlsim(project_dir, data, "verilator", args.images, show=False)
            model_t = hwmodel.timing(project.plans, args.images)
            speed["verilator"] = {
                "images": args.images,
                "passed": rtl.passed,
                "cycles": rtl.cycles,
                "seconds": rtl.seconds,
                "build_seconds": rtl.build_seconds,
                "cycles_per_second": rtl.cycles_per_second,
                "images_per_second": args.images / rtl.seconds if rtl.seconds else None,
                "model_equals_verilator_cycles": bool(
                    np.array_equal(rtl.accept_cycles(), model_t.accept_cycle)
                    and np.array_equal(rtl.output_cycles(), model_t.output_cycle)
                ),
            }
        results["tools"] = speed

        # -- the configurations: model vs Clash simulation
        rows = []
        todo = [(list(c), [1, 1, 1], False) for c in CONFIGS] + [(alloc.parallelism, alloc.cycles, True)]
        for pes, cyc, is_budget in todo:
            plans = load_network(model_path, fmt, parallelism=pes, cycles=cyc).plans
            fig = hwmodel.figures(plans)
            model_t = hwmodel.timing(plans, args.config_images)
            root = k2c.emit(
                model_path, fmt, work / f"cfg_{'_'.join(map(str, pes))}_{'_'.join(map(str, cyc))}", pes, cycles=cyc
            )
            sim, exact, _, _ = _clash_sim(load_project(root), data, args.config_images)
            rows.append(
                {
                    "config": options.config_label(pes, cyc),
                    "parallelism": pes,
                    "cycles": cyc,
                    "dsp_budget": BUDGET if is_budget else None,
                    "latency": fig.latency,
                    "ii": fig.ii,
                    "multipliers": fig.multipliers,
                    "macs": fig.macs,
                    "efficiency": fig.efficiency,
                    "memory_bits": fig.memory_bits,
                    "images_per_second_at_100MHz": fig.images_per_second(100.0),
                    "sim_latency": sim.first_latency,
                    "sim_interval": sim.interval,
                    "sim_bit_exact": f"{exact}/{args.config_images}",
                    "model_equals_sim": bool(
                        np.array_equal(model_t.accept_cycle, sim.accept_cycle)
                        and np.array_equal(model_t.output_cycle, sim.output_cycle)
                    ),
                }
            )
        results["configurations"] = rows
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
