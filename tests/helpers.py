"""Helpers shared by the tests: toolchain detection and small Keras models built in-process."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

TOOLS = ("clash", "ghc", "verilator")

FLOW_COMMANDS = [
    (["emit", "MODEL", "--out", "OUT"], "emit"),
    (["hdl", "PROJECT"], "hdl"),
    (["simulate", "PROJECT", "--data", "DATA"], "simulate"),
    (["rtlsim", "PROJECT", "--data", "DATA"], "rtlsim"),
    (["run", "MODEL", "--data", "DATA", "--out", "OUT"], "run"),
]
"""The commands of the main flow as (CLI words with placeholders, the api function they call)."""


def have_toolchain() -> bool:
    return all(shutil.which(tool) for tool in TOOLS)


needs_toolchain = pytest.mark.skipif(
    not have_toolchain() and os.environ.get("CI") != "true",
    reason="needs the Debian Clash toolchain (scripts/setup.sh installs it)",
)
"""In CI the toolchain is installed by .ci/run, so a missing tool fails instead of skipping."""


def random_dense_model(layers: list[tuple[int, str]], n_in: int, seed: int, scale: float = 1.0):
    """A Sequential dense network with random weights (no training): fast and arbitrary."""
    import keras

    rng = np.random.default_rng(seed)
    model = keras.Sequential(
        [keras.Input((n_in,))]
        + [keras.layers.Dense(units, activation=act, name=f"dense_{i}") for i, (units, act) in enumerate(layers)]
    )
    model.set_weights([rng.normal(0, scale, w.shape).astype("float32") for w in model.get_weights()])
    return model


def run_cli(args: list, capsys) -> tuple[int, str]:
    """The console entry point in-process: (exit code, stderr + stdout). Arguments may be
    paths. An exception that escapes main() is what a user sees as a traceback with exit
    code 1: it is returned that way, as a `Traceback: ...` line."""
    import sys

    from keras2clash import cli

    old = sys.argv
    sys.argv = ["keras2clash", *map(str, args)]
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    except Exception as exc:  # noqa: BLE001 - a traceback is what the tests rule out
        code = 1
        print(f"Traceback: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


def listing(folder: Path) -> list[str]:
    """Everything under `folder` (hidden names too), to show nothing was left behind."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def cli_command(*args: str) -> list[str]:
    """The command line as a separate Python process (same interpreter, same package)."""
    import sys

    return [
        sys.executable,
        "-c",
        "import sys; from keras2clash.cli import main; sys.argv[0] = 'keras2clash'; main()",
        *args,
    ]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of such a process: it imports the keras2clash the tests import."""
    import keras2clash

    package_root = Path(keras2clash.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(package_root), "TF_CPP_MIN_LOG_LEVEL": "3", **extra}
    env.pop("COLUMNS", None)
    return env


def assert_clash_matches_golden(project, x_raw, seed: int):
    """The Clash simulation of an emitted project equals the golden model bit for bit, back to
    back and under random input gaps and output stalls, and its accept and output cycles equal
    the hardware model's. Returns the golden outputs and the simulator executable."""
    import numpy as np

    from keras2clash.hw import hwmodel
    from keras2clash.quant import golden
    from keras2clash.verify import toolchain
    from keras2clash.verify.simulate import run_simulator

    want = golden.run(project.plans, project.params, x_raw)
    exe = toolchain.build_simulator(project.root)
    sim = run_simulator(exe, project.root, x_raw, project.n_out, classifies=project.classifies)
    assert np.array_equal(sim.outputs, want)
    t = hwmodel.timing(project.plans, len(x_raw))
    assert np.array_equal(sim.accept_cycle, t.accept_cycle) and np.array_equal(sim.output_cycle, t.output_cycle)
    stressed = run_simulator(
        exe, project.root, x_raw, project.n_out, ["--gap-max", "4", "--seed", str(seed)], classifies=project.classifies
    )
    assert np.array_equal(stressed.outputs, want)
    return want, exe


def script_module(path: Path, name: str):
    """A Python script that is not in a package (an example's training script, a bench) as a module."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def small_weights(model, rng: np.random.Generator):
    """Uniform weights in [-0.6, 0.6]: small enough to keep values inside the tests' formats."""
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([rng.uniform(-0.6, 0.6, size=w.shape).astype(np.float32) for w in weights])
    return model


def random_graph(
    seed: int,
    nodes: int,
    *,
    image: bool = False,
    inputs: int = 1,
    heads: int = 1,
    merges: tuple[str, ...] = ("add",),
    widest_merge: int = 2,
    merge_share: float = 0.5,
    head_activations: tuple[str, ...] = ("linear",),
):
    """A random DAG of Keras layers on tensors of one shape, with random weights.

    Each input (an image (4, 4, 2), or a vector: of 5 values when alone, of 2 to 5 otherwise)
    goes through a layer of its own (`stem`, or `trunk<k>` for several inputs). Then each of
    `nodes` steps adds a tensor: a merge (one of `merges`, of 2 to `widest_merge` earlier
    tensors in random order, chosen with probability `merge_share`; a Concatenate is followed by
    a layer that brings the shape back) or a layer (Conv2D 1x1 or 3x3 'same', or Dense 4) on any
    earlier tensor. Head k < heads - 1 reads a random tensor; the last head reads the last
    tensor with every tensor nobody reads added to it. A head is a Dense (after a Flatten for images) with an
    activation from `head_activations`.
    """
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    merge_layers = {
        "add": layers.Add,
        "concatenate": layers.Concatenate,
        "maximum": layers.Maximum,
        "average": layers.Average,
        "multiply": layers.Multiply,
    }

    if image:
        sources = [keras.Input((4, 4, 2), name=f"in{k}" if inputs > 1 else None) for k in range(inputs)]

        def unit(x, name):
            k = int(rng.choice([1, 3]))
            return layers.Conv2D(3, k, padding="same", activation=str(rng.choice(["relu", "linear"])), name=name)(x)
    else:
        widths = [int(rng.integers(2, 6)) for _ in range(inputs)] if inputs > 1 else [5]
        sources = [keras.Input((w,), name=f"in{k}" if inputs > 1 else None) for k, w in enumerate(widths)]

        def unit(x, name):
            return layers.Dense(4, activation=str(rng.choice(["relu", "linear"])), name=name)(x)

    tensors = [unit(x, f"trunk{k}" if inputs > 1 else "stem") for k, x in enumerate(sources)]
    read = [False] * len(tensors)
    for k in range(nodes):
        if len(tensors) >= 2 and rng.random() < merge_share:
            size = min(len(tensors), int(rng.integers(2, widest_merge + 1)))
            picks = [int(i) for i in rng.choice(len(tensors), size=size, replace=False)]
            op = str(rng.choice(list(merges)))
            x = merge_layers[op](name=f"m{k}")([tensors[i] for i in picks])
            if op == "concatenate":
                x = unit(x, f"u{k}")
        else:
            picks = [int(rng.integers(len(tensors)))]
            x = unit(tensors[picks[0]], f"u{k}")
        for i in picks:
            read[i] = True
        tensors.append(x)
        read.append(False)
    outputs = []
    for h in range(heads):
        x = tensors[int(rng.integers(len(tensors)))] if h < heads - 1 else tensors[-1]
        if h == heads - 1:
            ends = [t for t, r in zip(tensors[:-1], read[:-1]) if not r]
            if ends:
                x = layers.Add(name="ends")([x, *ends])
        if image:
            x = layers.Flatten(name=f"flat{h}" if heads > 1 else "flat")(x)
        activation = str(rng.choice(list(head_activations)))
        units = int(rng.integers(2 if activation == "softmax" else 1, 4)) if heads > 1 else 3
        outputs.append(layers.Dense(units, activation=activation, name=f"head{h}" if heads > 1 else "out")(x))
    model = keras.Model(
        sources if inputs > 1 else sources[0], outputs if heads > 1 else outputs[0], name=f"graph_{seed}"
    )
    return small_weights(model, rng)
