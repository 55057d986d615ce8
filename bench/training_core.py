#!/usr/bin/env python3
"""The training core on the FPGA against Keras on this machine's CPU (a script, not a test):
writes bench/training_core.json.

    .venv/bin/python bench/training_core.py [--cores digits28=14,8,5,digits28@132,digits8=2,5]
        [--fpga ecp5-85k] [--work DIR] [--out bench/training_core.json]

Each core (a network of examples/train_digits at the given outputs a cycle per layer, or at the
most a multiplier budget `@N` affords, as `--dsp-budget` chooses) is written, its Verilog
placed and routed through the flow of `pnr` (yosys `synth_ecp5`, nextpnr-ecp5), and its
training speed is a sample a step at the routed clock: `fmax / step cycles`, the step's cycles
from the exact hardware model (equal to the simulation's: tests/test_train_core.py). Beside it,
in the same run, Keras trains the same network with the same SGD (batch 1, float32 on
TensorFlow, one epoch of the same samples) on this machine's CPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from keras2clash.train.core import write_core  # noqa: E402
from keras2clash.train.golden import GoldenTrainer, Sgd  # noqa: E402
from keras2clash.train.hardware import TrainCore, parallelism_within  # noqa: E402
from keras2clash.train.pnr import pnr_core  # noqa: E402
from keras2clash.train.reference import keras_fit  # noqa: E402
from keras2clash.train.run import read_samples  # noqa: E402

TRAIN = ROOT / "examples" / "train_digits"
LEARNING_RATE = 2.0**-7
"""bench/training.py's learning rate (a power of two: the update is a shift)."""
SEED = 0


def _net(name: str):  # type: ignore[no-untyped-def]
    from keras2clash.frontend.convert import load_keras_model, to_graph
    from keras2clash.train.net import train_net

    return train_net(to_graph(load_keras_model(TRAIN / f"{name}.keras")))


def _specs(text: str) -> list[tuple[str, tuple[int, ...] | None, int | None]]:
    """`name=a,b,c` (outputs a cycle per layer) or `name@N` (a multiplier budget), comma
    separated: a parallelism's numbers follow its `=`."""
    specs: list[tuple[str, tuple[int, ...] | None, int | None]] = []
    for part in text.split(","):
        if "=" in part:
            name, first = part.split("=")
            specs.append((name, (int(first),), None))
        elif "@" in part:
            name, budget = part.split("@")
            specs.append((name, None, int(budget)))
        else:
            name, pes, budget = specs[-1]
            specs[-1] = (name, (*(pes or ()), int(part)), budget)
    return specs


def keras_speed(name: str) -> dict:
    """Keras float32 SGD (batch 1) over one epoch of the network's training samples."""
    net = _net(name)
    train = read_samples(TRAIN / f"train_{name}.npz", net, "train")
    sgd = Sgd(LEARNING_RATE, 0.0, 1)
    order = np.random.default_rng(SEED).permutation(len(train.x))
    start = GoldenTrainer(net, sgd).real_weights()
    t0 = time.perf_counter()
    keras_fit(net, start, sgd, train.x, train.y, [order], None)
    seconds = time.perf_counter() - t0
    return {"samples": len(train.x), "seconds": seconds, "samples_per_second": len(train.x) / seconds}


def bench_core(name: str, pes: tuple[int, ...] | None, budget: int | None, fpga: str, work: Path) -> dict:
    net = _net(name)
    trainer = GoldenTrainer(net, Sgd(LEARNING_RATE, 0.0, 1))
    if pes is None:
        assert budget is not None
        pes = parallelism_within(trainer, budget)
    core = TrainCore(trainer, pes)
    top = f"{name}_train"
    folder = work / f"{name}_{'_'.join(map(str, pes))}"
    project = write_core(core, folder / "core", top, force=True)
    t0 = time.perf_counter()

    def tell(*words: object) -> None:
        print(
            f"  {name} {','.join(map(str, pes))} [{time.perf_counter() - t0:5.0f} s] {' '.join(map(str, words))}",
            flush=True,
        )

    placed = pnr_core(core, project, top, folder / "pnr", fpga, force=True, progress=tell)
    report = placed.report
    cells = {u.cell: u.used for u in report.utilisation}
    path = report.critical_path
    return {
        "example": name,
        "sizes": net.sizes,
        "parallelism": list(pes),
        "dsp_budget": budget,
        "multipliers": core.multipliers,
        "step_cycles": core.step_cycles(),
        "answer_cycles": core.answer_cycle(),
        "fmax_mhz": report.fmax_mhz,
        "routed": report.routed,
        "samples_per_second": placed.samples_per_second,
        "step_us": None if not report.fmax_mhz else core.step_cycles() / report.fmax_mhz,
        "cells": cells,
        "critical_path": None
        if path is None
        else {
            "ns": path.delay_ns,
            "logic_ns": path.logic_ns,
            "levels": path.logic_levels,
            "from": path.start,
            "to": path.end,
        },
        "seconds": report.seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", default="digits28=14,8,5,digits28@132,digits8=2,5")
    parser.add_argument("--fpga", default="ecp5-85k")
    parser.add_argument(
        "--work", type=Path, default=None, help="where the cores and their logs go (default: a temporary folder)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "training_core.json")
    args = parser.parse_args()
    specs = _specs(args.cores)
    with tempfile.TemporaryDirectory(prefix="k2c-train-pnr-") as tmp:
        work = args.work or Path(tmp)
        cores = []
        for name, pes, budget in specs:
            print(
                f"{name}: the training core ({'parallelism ' + ','.join(map(str, pes)) if pes else f'budget {budget}'})",
                flush=True,
            )
            cores.append(bench_core(name, pes, budget, args.fpga, work))
            print(f"  {cores[-1]['fmax_mhz']} MHz, {cores[-1]['samples_per_second']} samples/s", flush=True)
    keras = {}
    for name in sorted({name for name, _, _ in specs}):
        print(f"{name}: Keras float SGD, one epoch", flush=True)
        keras[name] = keras_speed(name)
    data = {
        "date": time.strftime("%Y-%m-%d"),
        "fpga": args.fpga,
        "learning_rate": LEARNING_RATE,
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "cores": cores,
        "keras": keras,
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
