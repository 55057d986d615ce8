"""`keras2clash train`: the golden trainer beside Keras float SGD on one model and data set.

Both start from the model's weights (quantized to the trainer's formats), see the samples in
the same order (one seeded permutation per epoch) and use the same learning rate, momentum and
batch size. The result holds both runs' epochs, the formats and the update's scale, as a
table, JSON and a plot.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from keras2clash.data import read_npz
from keras2clash.errors import K2CError
from keras2clash.fpga.devices import Device
from keras2clash.frontend.convert import load_keras_model, to_graph
from keras2clash.quant.formats import parse_format
from keras2clash.train.core import check_core, write_core
from keras2clash.train.golden import Epoch, GoldenTrainer, LayerFormats, Sgd
from keras2clash.train.hardware import TrainCore, parallelism_within
from keras2clash.train.net import TrainNet, train_net
from keras2clash.train.profile import auto_formats
from keras2clash.train.reference import keras_fit

FORMAT_KEYS = ("a", "w", "b", "g", "v")


@dataclass(frozen=True)
class Samples:
    x: np.ndarray
    y: np.ndarray  # class labels (N,) or targets (N, n_out)


@dataclass
class TrainResult:
    model: str
    sizes: list[int]
    loss: str
    sgd: Sgd
    formats: list[str]
    scale: str
    samples: int
    golden: list[Epoch]
    keras: list[Epoch] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    core: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        data["sgd"] = asdict(self.sgd)
        return json.dumps(data, indent=2)


def read_samples(path: Path, net: TrainNet, split: str) -> Samples:
    """`x`/`y` (or `x_<split>`/`y_<split>`) of an .npz, checked against the network."""
    arrays = read_npz(path, f"{split} data")
    keys = [(f"x_{split}", f"y_{split}"), ("x", "y")]
    found = next(((kx, ky) for kx, ky in keys if kx in arrays and ky in arrays), None)
    if found is None:
        raise K2CError(f"{path}: no arrays x/y or x_{split}/y_{split}")
    x, y = arrays[found[0]], arrays[found[1]]
    if len(x) != len(y) or not len(x):
        raise K2CError(f"{path}: {len(x)} samples and {len(y)} targets")
    if int(np.prod(x.shape[1:])) != net.layers[0].n_in:
        raise K2CError(f"{path}: samples of shape {x.shape[1:]}, the model takes {net.input_shape}")
    classes = net.layers[-1].n_out
    if net.loss == "categorical_crossentropy":
        labels = np.argmax(y, axis=-1) if y.ndim == 2 else y.astype(np.int64)
        if labels.min() < 0 or labels.max() >= classes:
            raise K2CError(f"{path}: labels outside 0..{classes - 1}")
        return Samples(x.reshape(len(x), -1).astype(np.float64), labels)
    if y.reshape(len(y), -1).shape[1] != classes:
        raise K2CError(f"{path}: targets of shape {y.shape[1:]}, the model has {classes} outputs")
    return Samples(x.reshape(len(x), -1).astype(np.float64), y.reshape(len(y), -1).astype(np.float64))


@dataclass(frozen=True)
class CoreRequest:
    """A training core to write beside the run (`train --core`): its folder and name, its
    outputs a cycle per layer (`parallelism`, or the shortest step within `dsp_budget`
    multipliers), and how many of the first epoch's steps to simulate against the golden
    trainer; `device`, the part whose block RAM it must fit (`--dsp-budget DEVICE`)."""

    out: Path
    name: str
    parallelism: tuple[int, ...] | None = None
    dsp_budget: int | None = None
    device: Device | None = None
    steps: int = 0
    force: bool = False


def build_core(
    request: CoreRequest,
    trainer: GoldenTrainer,
    samples: Samples,
    order: np.ndarray,
    progress: Callable[[str], object] | None = None,
) -> dict[str, object]:
    """Write the training core of `trainer` (its initial weights, formats and SGD); simulate
    `request.steps` steps of `order` against a golden trainer; what it found."""
    net = trainer.net
    fresh = GoldenTrainer(net, trainer.sgd, trainer.formats, trainer.x_format)
    if request.parallelism is not None:
        pes = request.parallelism
    elif request.dsp_budget is not None:
        pes = parallelism_within(fresh, request.dsp_budget)
    else:
        pes = tuple(1 for _ in net.layers)
    core = TrainCore(fresh, pes)
    if request.device is not None:
        core.check_block_rams(request.device.block_rams, request.device.part)
    if progress is not None:
        progress(f"writing the training core to {request.out}")
    project = write_core(core, request.out, request.name, force=request.force)
    info: dict[str, object] = {
        "project": str(project),
        "parallelism": list(pes),
        "multipliers": core.multipliers,
        "block_rams": core.block_rams,
        "step_cycles": core.step_cycles(),
        "answer_cycles": core.answer_cycle(),
    }
    if request.steps:
        if request.steps > len(order):
            raise K2CError(f"--core-steps {request.steps}: the data has {len(order)} samples")
        idx = order[: request.steps]
        targets = core.loss.targets_of(np.asarray(samples.y)[idx])

        def tell(k: int) -> None:
            if progress is not None:
                progress(f"simulating the training core: step {k} of {request.steps}")

        check = check_core(core, project, samples.x[idx], targets, tell)
        info |= {
            "checked_steps": check.steps,
            "bit_exact": check.exact,
            "mismatches": check.mismatches[:10],
            "cycles_match_model": check.cycles_match,
            "simulated_step_cycles": sorted(set(check.step_cycles)),
        }
    return info


def layer_formats(net: TrainNet, bases: Sequence[LayerFormats], specs: Sequence[str]) -> list[LayerFormats]:
    """Every layer's formats: `bases` (one per layer), then `NAME:KEY=FORMAT;KEY=FORMAT`
    overrides (keys a, w, b, g, v)."""
    by_name = {layer.name: base for layer, base in zip(net.layers, bases)}
    for spec in specs:
        name, _, rest = spec.partition(":")
        if name not in by_name:
            raise K2CError(f"--layer-format {spec!r}: no Dense layer {name!r} (layers: {', '.join(by_name)})")
        changes = {}
        for item in filter(None, (p.strip() for p in rest.split(";"))):
            key, _, text = item.partition("=")
            if key.strip() not in FORMAT_KEYS or not text:
                raise K2CError(f"--layer-format {spec!r}: KEY=FORMAT with KEY one of {', '.join(FORMAT_KEYS)}")
            changes[key.strip()] = parse_format(text)
        if not changes:
            raise K2CError(f"--layer-format {spec!r}: give NAME:KEY=FORMAT[;KEY=FORMAT]")
        by_name[name] = replace(by_name[name], **changes)
    return [by_name[layer.name] for layer in net.layers]


def train(
    model: Path,
    data: Path,
    *,
    test: Path | None = None,
    epochs: int = 10,
    sgd: Sgd | None = None,
    formats: LayerFormats | None = None,
    layer_specs: Sequence[str] = (),
    x_format: str = "1,5,12",
    loss: str | None = None,
    seed: int = 0,
    keras: bool = True,
    auto_bits: int | None = None,
    core: CoreRequest | None = None,
    progress: Callable[[str], object] | None = None,
) -> tuple[TrainResult, GoldenTrainer]:
    if epochs < 1 and core is None:
        raise K2CError(f"--epochs {epochs}: at least 1 (0 only to write a training core)")
    sgd = sgd or Sgd()
    net = train_net(to_graph(load_keras_model(model)), loss)
    samples = read_samples(data, net, "train")
    held = read_samples(test, net, "test") if test is not None else None
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(len(samples.x)) for _ in range(max(epochs, 1))]
    if auto_bits is not None:
        if progress is not None:
            progress("profiling one epoch at 24-bit formats")
        chosen, _ = auto_formats(net, sgd, samples.x, samples.y, orders[:1], auto_bits)
    else:
        chosen = [formats or LayerFormats()] * len(net.layers)
    fmts = layer_formats(net, chosen, layer_specs)
    golden = GoldenTrainer(net, sgd, fmts, x_format=parse_format(x_format))
    start = golden.real_weights()
    core_info = {} if core is None else build_core(core, golden, samples, orders[0], progress)
    pair = (held.x, held.y) if held is not None else None
    seconds = {}
    t0 = time.perf_counter()
    runs = golden.fit(samples.x, samples.y, epochs, orders, pair, progress)
    seconds["golden"] = time.perf_counter() - t0
    theirs: list[Epoch] = []
    if keras and epochs:
        if progress is not None:
            progress(f"Keras float: {epochs} epochs")
        t0 = time.perf_counter()
        theirs, _ = keras_fit(net, start, sgd, samples.x, samples.y, orders[:epochs], pair)
        seconds["keras"] = time.perf_counter() - t0
    scale = golden.scale
    note = f"{float(scale.value):.6g} = {scale.raw} * 2^-{scale.frac}" + (
        "" if scale.exact else f" (asked {float(scale.asked):.6g})"
    )
    result = TrainResult(
        model=net.name,
        sizes=net.sizes,
        loss=net.loss,
        sgd=sgd,
        formats=[f"{layer.name}: {f.describe()}" for layer, f in zip(net.layers, fmts)],
        scale=note,
        samples=len(samples.x),
        golden=runs,
        keras=theirs,
        seconds=seconds,
        core=core_info,
    )
    return result, golden


def plot(result: TrainResult) -> bytes:
    """Loss and accuracy per epoch, the golden trainer beside Keras float, as a PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for runs, label, color in (
        (result.golden, "golden trainer (fixed point)", "C0"),
        (result.keras, "Keras float", "C1"),
    ):
        if not runs:
            continue
        e = [r.epoch for r in runs]
        axes[0].plot(e, [r.loss for r in runs], "-o", color=color, label=label)
        axes[1].plot(e, [r.accuracy for r in runs], "-o", color=color, label=f"{label}, running")
        if runs[0].test_accuracy is not None:
            axes[1].plot(e, [r.test_accuracy for r in runs], ":s", color=color, label=f"{label}, test")
    axes[0].set(xlabel="epoch", ylabel="loss", title=f"{result.model}: loss")
    axes[1].set(xlabel="epoch", ylabel="accuracy", title=f"{result.model}: accuracy")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()


def weights_npz(trainer: GoldenTrainer) -> bytes:
    """The trained weights as an .npz: per layer `<name>/kernel` and `<name>/bias` (real
    values) and `<name>/kernel_raw`, `<name>/bias_raw` (the integers, with their formats)."""
    import io

    arrays: dict[str, np.ndarray] = {}
    for layer, f, (w, b), wr, br in zip(
        trainer.net.layers, trainer.formats, trainer.real_weights(), trainer.weights, trainer.biases
    ):
        arrays[f"{layer.name}/kernel"], arrays[f"{layer.name}/bias"] = w, b
        arrays[f"{layer.name}/kernel_raw"], arrays[f"{layer.name}/bias_raw"] = wr, br
        arrays[f"{layer.name}/formats"] = np.array([str(f.w), str(f.b)])
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]  # numpy stubs type the keywords as allow_pickle
    return buf.getvalue()
