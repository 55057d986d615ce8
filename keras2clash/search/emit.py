"""`keras2clash search emit DIR --trial N --out PROJECT`: a candidate into the normal flow.

The candidate is rebuilt from its trial's stored parameters (`space.candidate_from_params`,
the same code that sampled it), its trained network is taken from the search folder's
`models/` (or trained again, deterministically, when the trial ran on another machine),
and before anything is written it is checked to be the candidate the search measured: the
same multipliers, II and latency from the exact hardware model, the same test accuracy from
the golden model. Then `api.emit` writes the project, exactly as `keras2clash emit` would
with the candidate's formats, knobs and pipeline; `simulate=True` also runs the Clash
simulation (`api.simulate`), which must be bit-exact with the golden model and take the
hardware model's cycles (first latency, and the mean output interval of the run).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from keras2clash import api
from keras2clash.backend.project import load_project
from keras2clash.errors import K2CError
from keras2clash.fsutil import check_writable_target
from keras2clash.hw.hwmodel import timing
from keras2clash.search.evaluate import (
    Evaluation,
    golden_accuracy,
    hardware_figures,
    load_data,
    plan_candidate,
    plan_options,
    publish,
    trained_network,
)
from keras2clash.search.space import candidate_from_params
from keras2clash.search.study import open_folder, open_storage
from keras2clash.verify import toolchain


@dataclass
class EmitResult:
    trial: int
    project: Path
    data: Path  # the test set shaped for the candidate's input (for simulate/run)
    evaluation: Evaluation
    retrained: bool
    comparison: Any = None  # report.comparison.Comparison when simulated
    model_interval: float | None = None  # the hardware model's mean output interval of that run

    @property
    def confirmed(self) -> bool:
        c = self.comparison
        return (
            c is not None
            and c.bit_exact == c.samples
            and c.first_latency == self.evaluation.latency
            and c.interval == self.model_interval
        )


def _trial(folder: Any, number: int) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=folder.study_name, storage=open_storage(folder.storage))
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if number not in trials:
        raise K2CError(f"no trial {number} in the search {folder.root} (trials 0..{max(trials, default=-1)})")
    t = trials[number]
    ev = t.user_attrs.get("evaluation")
    if t.state.name != "COMPLETE" or not ev:
        raise K2CError(
            f"trial {number} did not finish (state {t.state.name}); choose a finished one "
            f"('keras2clash search show {folder.root}')"
        )
    if not ev.get("trained"):
        broken = ", ".join(f"{k} +{100 * v:.0f}%" for k, v in ev.get("violations", {}).items() if v > 0)
        raise K2CError(f"trial {number} was not trained: its hardware breaks the constraints ({broken})")
    return t


def test_data_file(root: Path, template: str, data: Any) -> Path:
    """The test set as the candidate's network takes it (`SearchData.shaped`: the dense
    template flattens, the recurrent one reads sequences), written once into the search
    folder (atomically)."""
    path = Path(root) / "data" / f"test_{template}.npz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".test.", suffix=".npz", dir=path.parent)
        os.close(fd)
        try:
            np.savez(tmp, x=data.shaped(data.x_test, template).astype(np.float32), y=data.y_test)
            publish(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path


def emit(
    root: str | Path,
    number: int,
    out: str | Path,
    *,
    force: bool = False,
    simulate: bool = False,
    limit: int | None = None,
    storage: str | None = None,
) -> EmitResult:
    """Emit trial `number` of the search in `root` to `out` (and simulate it)."""
    folder = open_folder(root, storage)
    desc = folder.description()
    t = _trial(folder, number)
    ev = Evaluation(**t.user_attrs["evaluation"])
    candidate = candidate_from_params(t.params, desc)
    if candidate.key != t.user_attrs.get("candidate"):
        raise K2CError(f"trial {number}'s parameters no longer give its candidate: was {desc.source} edited?")
    out = Path(out)
    check_writable_target(out, force)
    if simulate:
        toolchain.require_tool("ghc")
    data = load_data(desc.data, desc.seed)
    net = trained_network(candidate.network, data, desc.training, desc.seed, folder.models)
    model, cached = net.model, net.cached
    network = plan_candidate(candidate, model)
    fig = hardware_figures(network)
    template = candidate.network.template
    accuracy = golden_accuracy(network, data.shaped(data.x_test, template), data.y_test)
    measured = (fig.multipliers, float(fig.ii), int(fig.latency), accuracy)
    recorded = (ev.multipliers, ev.ii, ev.latency, ev.test_accuracy)
    if measured != recorded:
        raise K2CError(
            f"trial {number} re-planned gives multipliers, II, latency, test accuracy {measured}, "
            f"the search recorded {recorded}"
            + ("" if cached else " (the network was trained again: is the training deterministic on this machine?)")
        )
    path = test_data_file(folder.root, template, data)
    api.emit(model, plan_options(candidate, network.graph), out, force=force, show=False)
    result = EmitResult(number, out, path, ev, not cached)
    if simulate:
        result.comparison = api.simulate(out, path, limit, show=False)
        project = load_project(out)
        result.model_interval = timing(project.plans, result.comparison.samples).interval
    return result
