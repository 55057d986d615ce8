"""The co-design search: description validation, a candidate's figures against
the hardware and golden models, resume without re-running, two workers on one study,
results and emit; the slow test simulates the emitted top candidate in Clash."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from helpers import needs_toolchain, run_cli

ROOT = Path(__file__).resolve().parent.parent

TINY = """\
name: tiny
seed: 7
trials: 3
population: 2
data: {dataset: digits, validation: 0.2}
training: {epochs: 1, batch_size: 64}
networks:
  dense:
    layers: [1, 1]
    units: [4, 8]
    base: {layers: [8]}
hardware:
  formats: ["1,7,8", "1,4,6"]
  parallelism: [1, 2]
  cycles: [1, 2]
  pipeline: [1, 2]
constraints: {multipliers: 100}
goals: {pareto: [accuracy, multipliers]}
"""


def write(tmp: Path, text: str, name: str = "search.yaml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("constraints: {multipliers: 100}", "constriants: {multipliers: 100}", "top level: unknown key 'constriants'"),
        ('formats: ["1,7,8", "1,4,6"]', 'formats: ["1,7,8", "1,4"]', "hardware.formats[1]: bad format '1,4'"),
        (
            "base: {layers: [8]}",
            "base: {layers: [9]}",
            "networks.dense.base.layers[0]: 9 is not in the space's choices",
        ),
        ("layers: [1, 1]", "layers: [2, 1]", "networks.dense.layers: [2, 1]: need 0 <= min <= max"),
        (
            "base: {layers: [8]}",
            "base: {layers: [8], activation: [relu]}",
            "networks.dense.base.activation: one value for the whole network, got the list ['relu']",
        ),
        (
            "goals: {pareto: [accuracy, multipliers]}",
            "goals: {pareto: [accuracy, luts]}",
            "goals.pareto[1]: expected one of accuracy",
        ),
        (
            "goals: {pareto: [accuracy, multipliers]}",
            "goals: {weights: {accuracy: 1, ii: 0}}",
            "goals.weights.ii: expected a non-zero number",
        ),
        ("constraints: {multipliers: 100}", "constraints: {device: ecp5-999k}", "constraints.device: unknown FPGA"),
        ("epochs: 1", "epochs: 0", "training.epochs: 0 out of range"),
        ("parallelism: [1, 2]", "parallelism: [1, 1]", "hardware.parallelism[1]: 1 appears twice"),
        (
            "pipeline: [1, 2]",
            "pipeline: [1, 2]\n  strategies: [resource, auto]",
            "hardware.strategies: auto is chosen with a multiplier budget: use it with knobs: balanced",
        ),
        (
            "pipeline: [1, 2]",
            "pipeline: [1, 2]\n  strategies: [resource, fast]",
            "hardware.strategies[1]: expected one of resource, latency, auto, got 'fast'",
        ),
        (
            "pipeline: [1, 2]",
            "pipeline: [1, 2]\n  strategies: [latency]\n  logic_budget: 1000",
            "hardware.logic_budget: logic_budget is what auto layers' adder graphs may take",
        ),
        (
            "constraints: {multipliers: 100}",
            "constraints: {logic_cells: ecp5-999k}",
            "constraints.logic_cells: bad --logic-budget",
        ),
    ],
)
def test_description_errors_name_the_key(tmp_path: Path, capsys, old: str, new: str, message: str) -> None:
    assert old in TINY
    desc = write(tmp_path, TINY.replace(old, new))
    out = tmp_path / "out"
    code, text = run_cli(["search", "run", str(desc), "--out", str(out)], capsys)
    assert code == 2
    assert f"search description {desc}: {message}" in " ".join(text.split())
    assert "Traceback" not in text and not out.exists()  # nothing half-written


def test_description_reads_everything(tmp_path: Path) -> None:
    from keras2clash.search.description import load_description
    from keras2clash.search.space import base_params

    text = TINY.replace("constraints: {multipliers: 100}", "constraints: {device: ecp5-25k, multipliers: 100, ii: 50}")
    desc = load_description(write(tmp_path, text))
    assert desc.constraints.multipliers == 28 and desc.constraints.ii == 50.0  # the device's 28 are fewer
    assert desc.goals.directions == ["maximize", "minimize"] and desc.max_compute == 2
    assert [str(f) for f in desc.hardware.formats] == ["1,7,8", "1,4,6"]
    assert base_params(desc) == [
        {
            "dense.layers": 1,
            "dense.units_0": 8,
            "hw.format": "1,7,8",
            "hw.pe_0": 1,
            "hw.pe_1": 1,
            "hw.cycles_0": 1,
            "hw.cycles_1": 1,
        }
    ]


def _candidate(desc, params: dict):
    """The candidate a trial with these parameters samples (optuna's enqueue, then ask)."""
    import optuna

    from keras2clash.search.space import sample

    study = optuna.create_study(directions=desc.goals.directions)
    study.enqueue_trial(params)
    return sample(study.ask(), desc)


def test_candidate_figures_are_the_hardware_and_golden_models(tmp_path: Path) -> None:
    """A candidate's figures equal hwmodel's for the plans `emit` would build, and its
    accuracy the golden model's; the digits test set is examples/digits_dense's."""

    from keras2clash.hw import hwmodel
    from keras2clash.network import load_network
    from keras2clash.quant import golden
    from keras2clash.search import evaluate as ev_module
    from keras2clash.search.description import load_description

    desc = load_description(write(tmp_path, TINY))
    data = ev_module.load_data(desc.data, desc.seed)
    with np.load(ROOT / "examples/digits_dense/test.npz") as ref:
        assert np.array_equal(data.shaped(data.x_test, "dense"), ref["x"]) and np.array_equal(data.y_test, ref["y"])
    candidate = _candidate(
        desc,
        {
            "dense.units_0": 8,
            "hw.format": "1,4,6",
            "hw.pe_0": 2,
            "hw.pe_1": 2,
            "hw.cycles_0": 2,
            "hw.cycles_1": 1,
            "hw.pipeline": 1,
        },
    )
    models = tmp_path / "models"
    ev = ev_module.evaluate(candidate, desc, data, models)
    assert ev.trained and ev.feasible and (models / f"{candidate.network.key}.keras").is_file()

    import keras

    model = keras.models.load_model(models / f"{candidate.network.key}.keras")
    network = load_network(model, "1,4,6", parallelism=[2, 2], cycles=[2, 1], pipeline=1, softmax="argmax")
    fig = hwmodel.figures(network.plans)
    assert (ev.multipliers, ev.ii, ev.latency, ev.memory_bits) == (
        fig.multipliers,
        fig.ii,
        fig.latency,
        fig.memory_bits,
    )
    assert ev.multipliers == 2 * 32 + 2 * 8 and ev.parallelism == [2, 2] and ev.cycles == [2, 1]
    assert ev.images_per_second == pytest.approx(100e6 / fig.ii)
    x = data.x_test.reshape(len(data.x_test), -1)
    classes = golden.predict(network.plans, network.params, golden.quantize_inputs(network.plans, x))[1]
    assert ev.test_accuracy == float(np.mean(classes == data.y_test))
    assert ev.violations == {"multipliers": pytest.approx(80 / 100 - 1)}


@pytest.fixture(scope="module")
def finished_search(tmp_path_factory):
    """A tiny search interrupted after two trials (Ctrl-C in the third), then resumed to 4."""
    import optuna

    from keras2clash.search import evaluate as ev_module
    from keras2clash.search import study as study_module
    from keras2clash.search.description import load_description

    tmp = tmp_path_factory.mktemp("search")
    desc = load_description(write(tmp, TINY))
    out = tmp / "run"
    calls: list[str] = []
    real = ev_module.evaluate

    def interrupted(candidate, *args):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(candidate.key)
        return real(candidate, *args)

    ev_module.evaluate = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            study_module.run(desc, out, trials=4, show=False)
    finally:
        ev_module.evaluate = real
    folder = study_module.open_folder(out)
    first = optuna.load_study(study_name="tiny", storage=folder.storage).get_trials()
    resumed_calls: list[str] = []

    def counting(candidate, *args):
        resumed_calls.append(candidate.key)
        return real(candidate, *args)

    ev_module.evaluate = counting
    try:
        summary = study_module.run(desc, out, trials=4, show=False)
    finally:
        ev_module.evaluate = real
    return desc, out, first, summary, resumed_calls


def test_resume_does_not_rerun_finished_trials(finished_search) -> None:
    import optuna

    desc, out, first, summary, resumed_calls = finished_search
    assert [t.state.name for t in first] == ["COMPLETE", "COMPLETE", "FAIL"]
    assert summary.resumed and summary.finished_before == 2 and summary.finished == 4
    trials = optuna.load_study(study_name="tiny", storage=summary.folder.storage).get_trials()
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 4 and len(resumed_calls) == 2  # only the two missing ones ran
    for before in first[:2]:  # the finished trials are untouched
        after = trials[before.number]
        assert (after.values, after.params, after.datetime_complete) == (
            before.values,
            before.params,
            before.datetime_complete,
        )
    assert trials[0].user_attrs.get("base") and trials[0].params["dense.units_0"] == 8  # the base design first
    assert trials[3].user_attrs["retry_of"] == 2 and trials[3].params == first[2].params  # the interrupted one again


def test_show_and_emit(finished_search, tmp_path: Path, capsys) -> None:
    from keras2clash.backend.project import load_project
    from keras2clash.hw import hwmodel

    desc, out, _, summary, _ = finished_search
    code, text = run_cli(["search", "show", str(out)], capsys)
    assert code == 0 and "search tiny: 4 finished trials" in " ".join(text.split())
    data = json.loads((out / "results.json").read_text())
    assert (out / "pareto.png").stat().st_size > 10_000 and len(data["trials"]) == 5 and data["best"]
    trials = {t["number"]: t for t in data["trials"]}
    top = trials[data["best"][0]]
    code, text = run_cli(
        ["search", "emit", str(out), "--trial", str(top["number"]), "--out", str(tmp_path / "p")], capsys
    )
    assert code == 0, text
    project = load_project(tmp_path / "p")
    fig = hwmodel.figures(project.plans)
    ev = top["evaluation"]
    assert (fig.multipliers, fig.ii, fig.latency) == (ev["multipliers"], ev["ii"], ev["latency"])
    assert [p.knobs.pe for p in project.compute_plans] == ev["parallelism"]
    code, text = run_cli(["search", "emit", str(out), "--trial", "99", "--out", str(tmp_path / "q")], capsys)
    assert code == 2 and "no trial 99" in text and not (tmp_path / "q").exists()
    untrained = [t for t in data["trials"] if t["evaluation"] and not t["evaluation"]["trained"]]
    if untrained:
        code, text = run_cli(
            ["search", "emit", str(out), "--trial", str(untrained[0]["number"]), "--out", str(tmp_path / "r")], capsys
        )
        assert code == 2 and "was not trained: its hardware breaks the constraints" in text


def test_resume_refuses_another_description(finished_search, tmp_path: Path, capsys) -> None:
    _, out, _, _, _ = finished_search
    other = write(tmp_path, TINY.replace("seed: 7", "seed: 8"))
    code, text = run_cli(["search", "run", str(other), "--out", str(out)], capsys)
    assert code == 2 and "holds a search with another description" in text


def test_two_workers_share_one_study(tmp_path: Path) -> None:
    import optuna

    from keras2clash.search import study as study_module
    from keras2clash.search.description import load_description

    desc = load_description(write(tmp_path, TINY.replace("epochs: 1", "epochs: 3")))  # trials long enough for both
    summary = study_module.run(desc, tmp_path / "run", workers=2, trials=4, show=False)
    trials = optuna.load_study(study_name="tiny", storage=summary.folder.storage).get_trials()
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert 4 <= len(complete) <= 5  # a worker busy when the 4th finished completes its trial
    assert len({t.user_attrs["worker"] for t in complete}) == 2  # both processes evaluated trials
    assert len({t.number for t in trials}) == len(trials)


@pytest.mark.slow
@pytest.mark.toolchain
@needs_toolchain
def test_emitted_top_candidate_is_bit_exact_in_clash(finished_search, tmp_path: Path) -> None:
    """The top candidate, emitted, equals the golden model in the Clash simulation, back to
    back and under stalls, with the hardware model's accept and output cycles."""
    from helpers import assert_clash_matches_golden
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden
    from keras2clash.search.emit import emit
    from keras2clash.search.results import collect
    from keras2clash.search.study import open_folder

    desc, out, _, _, _ = finished_search
    top = collect(open_folder(out), desc).best[0]
    result = emit(out, top.number, tmp_path / "top", simulate=True, limit=40)
    assert result.confirmed and result.comparison.bit_exact == 40
    project = load_project(tmp_path / "top")
    with np.load(result.data) as data:
        x_raw = golden.quantize_inputs(project.plans, data["x"][:24])
    assert_clash_matches_golden(project, x_raw, seed=3)


def test_candidate_key_of_the_resource_space_is_stable(tmp_path: Path) -> None:
    """A space without strategies samples the candidates (and keys) it always has: stored
    trials of earlier searches still emit."""
    from keras2clash.search.description import load_description

    desc = load_description(write(tmp_path, TINY))
    params = {"dense.units_0": 8, "hw.format": "1,4,6", "hw.pe_0": 2, "hw.pe_1": 2, "hw.cycles_0": 2}
    candidate = _candidate(desc, {**params, "hw.cycles_1": 1, "hw.pipeline": 1})
    assert candidate.key == "951760b16694" and candidate.hardware.strategies == ()
    assert candidate.hardware.describe() == "1,4,6; pe:cycles 2:2,2:1; pipeline 1"


def test_the_search_varies_each_layers_strategy(tmp_path: Path) -> None:
    """strategies: [resource, latency] samples one per compute layer; a latency layer's
    figures come from the trained network's solved adder graph (its LUT4 cells, no
    multiplier), equal to the hardware model's for the plans `emit` builds, and a
    logic_cells constraint weighs them; the base design stays at resource; the results
    table labels the latency layer L."""
    import keras

    from keras2clash.hw import hwmodel
    from keras2clash.network import load_network
    from keras2clash.quant import golden
    from keras2clash.search import evaluate as ev_module
    from keras2clash.search.description import load_description
    from keras2clash.search.space import base_params

    text = TINY.replace("pipeline: [1, 2]", "pipeline: [1, 2]\n  strategies: [resource, latency]").replace(
        "constraints: {multipliers: 100}", "constraints: {multipliers: 100, logic_cells: 400}"
    )
    desc = load_description(write(tmp_path, text))
    assert desc.hardware.strategies == ("resource", "latency") and desc.constraints.logic_cells == 400
    assert {k: v for k, v in base_params(desc)[0].items() if "strategy" in k} == {
        "hw.strategy_0": "resource",
        "hw.strategy_1": "resource",
    }
    params = {"dense.units_0": 8, "hw.format": "1,4,6", "hw.pe_0": 2, "hw.pe_1": 2, "hw.cycles_0": 2}
    params |= {"hw.cycles_1": 1, "hw.pipeline": 1, "hw.strategy_0": "latency", "hw.strategy_1": "resource"}
    candidate = _candidate(desc, params)
    assert candidate.hardware.strategies == ("latency", "resource")
    data = ev_module.load_data(desc.data, desc.seed)
    models = tmp_path / "models"
    ev = ev_module.evaluate(candidate, desc, data, models)
    model = keras.models.load_model(models / f"{candidate.network.key}.keras")
    network = load_network(
        model,
        "1,4,6",
        parallelism=[2, 2],
        cycles=[2, 1],
        pipeline=1,
        softmax="argmax",
        strategy=("latency", "resource"),
    )
    fig = hwmodel.figures(network.plans)
    assert ev.trained and ev.strategies == ["latency", "resource"] == fig.strategies
    assert (ev.multipliers, ev.ii, ev.latency, ev.memory_bits, ev.logic_cells) == (
        fig.multipliers,
        fig.ii,
        fig.latency,
        fig.memory_bits,
        fig.logic_cells,
    )
    assert ev.multipliers == 2 * 8 and ev.logic_cells > 0  # only the output layer multiplies
    assert ev.violations == {
        "multipliers": pytest.approx(16 / 100 - 1),
        "logic_cells": pytest.approx(ev.logic_cells / 400 - 1),
    }
    x = data.x_test.reshape(len(data.x_test), -1)
    classes = golden.predict(network.plans, network.params, golden.quantize_inputs(network.plans, x))[1]
    assert ev.test_accuracy == float(np.mean(classes == data.y_test))  # the golden model's, as at resource
    row = _row(ev)
    assert row["pe:cycles"] == "L,2:1" and row["logic"] == f"{ev.logic_cells:,}"


def _row(ev) -> dict[str, str]:
    from keras2clash.search.results import HEADER, TrialRow, table_rows

    return dict(
        zip(HEADER, table_rows([TrialRow(number=0, state="COMPLETE", base=False, params={}, evaluation=ev)])[0])
    )


def test_auto_strategies_are_the_allocators_choice(tmp_path: Path) -> None:
    """knobs: balanced with strategies: [auto]: each candidate's layers are built as the
    allocator chooses for its budget within logic_budget, on the trained weights."""
    import keras

    from keras2clash.design import DesignOptions
    from keras2clash.hw import hwmodel
    from keras2clash.network import load_model, plan_network
    from keras2clash.search import evaluate as ev_module
    from keras2clash.search.description import load_description

    text = TINY.replace(
        "  parallelism: [1, 2]\n  cycles: [1, 2]\n", "  knobs: balanced\n  budgets: [8]\n  strategies: [auto]\n"
    ).replace("pipeline: [1, 2]", "pipeline: [1, 2]\n  logic_budget: 100000")
    desc = load_description(write(tmp_path, text))
    assert desc.hardware.logic_budget == 100000 and desc.hardware.weights_matter
    candidate = _candidate(desc, {"dense.units_0": 8, "hw.format": "1,4,6", "hw.budget": 8, "hw.pipeline": 1})
    assert candidate.hardware.strategies == ("auto", "auto")
    models = tmp_path / "models"
    ev = ev_module.evaluate(candidate, desc, ev_module.load_data(desc.data, desc.seed), models)
    model = keras.models.load_model(models / f"{candidate.network.key}.keras")
    _, graph = load_model(model)
    options = DesignOptions.of("1,4,6", pipeline=1, softmax="argmax")
    chosen = plan_network(
        graph, replace(options, strategy="auto", dsp_budget=8, logic_budget=100000), keras_model=model
    )
    fig = hwmodel.figures(chosen.plans)
    assert ev.strategies == fig.strategies == ["latency", "latency"]  # both fit: II 1
    assert (ev.multipliers, ev.ii, ev.logic_cells) == (0, fig.ii, fig.logic_cells) and fig.ii == 1


def test_balanced_knobs_and_weighted_goal(tmp_path: Path) -> None:
    """knobs: balanced takes the allocator's knobs for the sampled budget; a weighted goal
    is one fitness, the weighted sum."""

    from keras2clash.hw.allocate import balanced
    from keras2clash.network import load_network
    from keras2clash.search import evaluate as ev_module
    from keras2clash.search.description import load_description
    from keras2clash.search.space import build_model

    text = TINY.replace(
        "  parallelism: [1, 2]\n  cycles: [1, 2]\n", "  knobs: balanced\n  budgets: [24, ecp5-25k]\n"
    ).replace("goals: {pareto: [accuracy, multipliers]}", "goals: {weights: {accuracy: 1, multipliers: -0.01}}")
    desc = load_description(write(tmp_path, text))
    assert desc.hardware.budgets == (24, 23) and desc.goals.directions == ["maximize"]  # 85% of ecp5-25k's 28
    candidate = _candidate(desc, {"dense.units_0": 8, "hw.format": "1,7,8", "hw.budget": 24, "hw.pipeline": 2})
    data = ev_module.load_data(desc.data, desc.seed)
    ev = ev_module.evaluate(candidate, desc, data, None)
    plans = load_network(build_model(candidate.network, (64,), 10), "1,7,8", softmax="argmax").plans
    alloc = balanced(plans, 24)
    assert (ev.parallelism, ev.cycles) == (alloc.parallelism, alloc.cycles) and ev.multipliers <= 24
    assert ev_module.objective_values(ev, desc.goals) == [pytest.approx(ev.accuracy - 0.01 * ev.multipliers)]


def test_a_search_folder_can_move(finished_search, tmp_path: Path, capsys) -> None:
    """The default storage is found relative to the folder: a moved (or copied) search
    still shows its own trials."""
    import shutil

    _, out, _, _, _ = finished_search
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    assert json.loads((moved / "search.json").read_text())["storage"] is None
    code, text = run_cli(["search", "show", str(moved)], capsys)
    assert code == 0 and "search tiny: 4 finished trials" in " ".join(text.split())


def test_cross_validation_accuracy(tmp_path: Path) -> None:
    """folds: K selects on every training image predicted by the fold model that did not
    train on it; the candidate's own model trains on the whole training set."""
    import keras

    from keras2clash.search import evaluate as ev_module
    from keras2clash.search.description import load_description

    desc = load_description(write(tmp_path, TINY.replace("validation: 0.2", "folds: 2")))
    assert (desc.data.folds, desc.data.validation) == (2, 0.0)
    data = ev_module.load_data(desc.data, desc.seed)
    assert len(data.x_train) == 1437 and len(data.x_val) == 0
    held = np.sort(np.concatenate([h for _, h in data.folds]))
    assert np.array_equal(held, np.arange(1437))  # every training image held out once
    candidate = _candidate(
        desc,
        {
            "dense.units_0": 4,
            "hw.format": "1,7,8",
            "hw.pe_0": 1,
            "hw.pe_1": 1,
            "hw.cycles_0": 1,
            "hw.cycles_1": 1,
            "hw.pipeline": 2,
        },
    )
    models = tmp_path / "models"
    ev = ev_module.evaluate(candidate, desc, data, models)
    key = candidate.network.key
    right = 0
    for i, (_, h) in enumerate(data.folds):
        network = ev_module.plan_candidate(candidate, keras.models.load_model(models / f"{key}.fold{i}.keras"))
        right += ev_module.golden_accuracy(network, data.x_train[h].reshape(len(h), -1), data.y_train[h]) * len(h)
    assert ev.accuracy == pytest.approx(right / 1437)
    again = ev_module.evaluate(candidate, desc, data, models)  # every model from models/
    assert again.cached and (again.accuracy, again.test_accuracy) == (ev.accuracy, ev.test_accuracy)
    assert json.loads((models / f"{key}.json").read_text())["epochs"] == [1, 1, 1]


def test_docs_example_is_the_example_description() -> None:
    """The docs' complete description (docs/guide/search.md) parses, and says what
    examples/search_digits runs."""
    from dataclasses import replace

    from keras2clash.search.description import load_description, parse_description

    page = (ROOT / "docs/guide/search.md").read_text()
    block = page[page.index("```yaml\n", page.index("## The description")) + 8 :]
    shown = parse_description(block[: block.index("```")], "docs/guide/search.md")
    example = load_description(ROOT / "examples/search_digits/search.yaml")
    assert replace(shown, text="", source="") == replace(example, text="", source="")


def test_bad_storage_leaves_nothing(tmp_path: Path, capsys) -> None:
    desc = write(tmp_path, TINY)
    out = tmp_path / "out"
    code, text = run_cli(["search", "run", str(desc), "--out", str(out), "--storage", "nosuchdb://x"], capsys)
    assert code == 2 and "cannot open the search storage nosuchdb://x" in text and not out.exists()
    code, text = run_cli(["search", "show", str(tmp_path)], capsys)
    assert code == 2 and "is not a search folder" in text


def test_npz_data_relative_to_the_description(tmp_path: Path) -> None:
    """train:/test: files are found relative to the description, also from the search
    folder's copy of it (workers and emit read that one)."""
    from sklearn.datasets import load_digits

    from keras2clash.search import study as study_module
    from keras2clash.search.description import load_description

    digits = load_digits()
    (tmp_path / "spec" / "data").mkdir(parents=True)
    x, y = (digits.data / 16).astype(np.float32), digits.target
    np.savez(tmp_path / "spec/data/train.npz", x=x[:400], y=y[:400])
    np.savez(tmp_path / "spec/data/test.npz", x=x[400:500], y=y[400:500])
    text = TINY.replace(
        "data: {dataset: digits, validation: 0.2}",
        "data: {train: data/train.npz, test: data/test.npz, validation: 0.25}",
    )
    desc = load_description(write(tmp_path / "spec", text))
    summary = study_module.run(desc, tmp_path / "elsewhere" / "run", trials=1, show=False)
    again = study_module.open_folder(tmp_path / "elsewhere" / "run").description()
    assert again.data.train == tmp_path / "spec/data/train.npz" and summary.finished == 1


def test_one_worker_search_is_reproducible(tmp_path: Path) -> None:
    """Seeded, one worker: the same candidates in the same order with the same figures."""
    import optuna

    from keras2clash.search import study as study_module
    from keras2clash.search.description import load_description

    desc = load_description(write(tmp_path, TINY))
    runs = []
    for name in ("a", "b"):
        summary = study_module.run(desc, tmp_path / name, trials=3, show=False)
        trials = optuna.load_study(study_name="tiny", storage=summary.folder.storage).get_trials()
        runs.append([(t.params, t.values, t.user_attrs["evaluation"]["test_accuracy"]) for t in trials])
    assert runs[0] == runs[1] and len(runs[0]) == 3


SEQ = """\
name: seq
seed: 7
trials: 3
population: 2
data: {dataset: digits, validation: 0.2}
training: {epochs: 1, batch_size: 32}
networks:
  recurrent:
    cells: [lstm, gru]
    layers: [1, 2]
    units: [4, 6]
    dense_layers: [0, 1]
    dense_units: [8]
    base: {cell: lstm, layers: [6]}
hardware:
  formats: ["1,7,8", "1,4,6"]
  parallelism: [1, 2]
  cycles: [1, 2]
  pipeline: [1, 2]
constraints: {multipliers: 100}
goals: {pareto: [accuracy, multipliers]}
"""
"""A search of recurrent networks, small enough to train a few candidates in seconds."""


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("cells: [lstm, gru]", "cells: [lstm, transformer]", "networks.recurrent.cells[1]: expected one of"),
        ("layers: [1, 2]", "layers: [0, 2]", "networks.recurrent.layers: [0, 2]: need 1 <= min <= max"),
        ("units: [4, 6]", "unit: [4, 6]", "networks.recurrent: unknown key 'unit'"),
        ("  recurrent:", "  rnn:", "networks: unknown key 'rnn'; known keys: dense, cnn, recurrent"),
        (
            "base: {cell: lstm, layers: [6]}",
            "base: {cell: simple_rnn, layers: [6]}",
            "networks.recurrent.base.cell: 'simple_rnn' is not in the space's choices ['lstm', 'gru']",
        ),
        (
            "base: {cell: lstm, layers: [6]}",
            "base: {cell: [lstm], layers: [6]}",
            "networks.recurrent.base.cell: one value for the whole network, got the list ['lstm']",
        ),
        (
            "base: {cell: lstm, layers: [6]}",
            "base: {cell: lstm, layers: [6, 6, 6]}",
            "networks.recurrent.base.layers: 3 layers, outside the space's [1, 2]",
        ),
        (
            "base: {cell: lstm, layers: [6]}",
            "base: {cell: lstm, layers: [6], dense: [8, 8]}",
            "networks.recurrent.base.dense: 2 dense layers, outside dense_layers [0, 1]",
        ),
        ("dense_units: [8]", "dense_units: [8, 8]", "networks.recurrent.dense_units[1]: 8 appears twice"),
    ],
)
def test_recurrent_description_errors_name_the_key(tmp_path: Path, capsys, old: str, new: str, message: str) -> None:
    assert old in SEQ
    desc = write(tmp_path, SEQ.replace(old, new))
    out = tmp_path / "out"
    code, text = run_cli(["search", "run", str(desc), "--out", str(out)], capsys)
    assert code == 2
    assert f"search description {desc}: {message}" in " ".join(text.split())
    assert "Traceback" not in text and not out.exists()


def test_recurrent_description_reads_everything(tmp_path: Path) -> None:
    """The recurrent template's fields and defaults, its base design as trial parameters, the
    digits as sequences (examples/digits_lstm's rows), and the docs' example description."""
    from keras2clash.search import evaluate as ev_module
    from keras2clash.search.description import RecurrentSpace, load_description, parse_description
    from keras2clash.search.space import base_params

    desc = load_description(write(tmp_path, SEQ))
    assert desc.networks["recurrent"] == RecurrentSpace(
        cells=("lstm", "gru"),
        layers=(1, 2),
        units=(4, 6),
        dense_layers=(0, 1),
        dense_units=(8,),
        activations=("tanh",),
        base={"cell": "lstm", "layers": [6]},
    )
    assert desc.max_compute == 4  # two recurrent layers, a hidden Dense, the output
    assert base_params(desc) == [
        {
            "recurrent.cell": "lstm",
            "recurrent.layers": 1,
            "recurrent.units_0": 6,
            "recurrent.dense_layers": 0,
            "hw.format": "1,7,8",
            **{f"hw.pe_{i}": 1 for i in range(2)},
            **{f"hw.cycles_{i}": 1 for i in range(2)},
        }
    ]
    defaults = parse_description(SEQ.replace(SEQ[SEQ.index("    cells") : SEQ.index("hardware:")], "    {}\n"))
    assert defaults.networks["recurrent"] == RecurrentSpace(("lstm",), (1, 1), (8, 16), (0, 0), (16,), ("tanh",))
    data = ev_module.load_data(desc.data, desc.seed)
    with np.load(ROOT / "examples/digits_lstm/test.npz") as ref:
        assert np.array_equal(data.shaped(data.x_test, "recurrent"), ref["x"])
    assert data.input_shape("recurrent") == (8, 8)
    assert ev_module.SearchData.shaped(np.zeros((5, 12)), "recurrent").shape == (5, 12, 1)  # a value a step
    page = (ROOT / "docs/guide/search.md").read_text()
    block = page[page.index("```yaml\n", page.index("## Sequences: the recurrent template")) + 8 :]
    shown = parse_description(block[: block.index("```")], "docs/guide/search.md")
    assert shown.networks["recurrent"].cells == ("simple_rnn", "lstm", "gru") and shown.max_compute == 4


@pytest.mark.parametrize(
    "cell,keras_class,gates", [("simple_rnn", "SimpleRNN", 1), ("lstm", "LSTM", 4), ("gru", "GRU", 4)]
)
def test_a_recurrent_trial_builds_its_model_and_knobs(tmp_path: Path, cell: str, keras_class: str, gates: int) -> None:
    """A trial's cell, depth and units give the stacked Keras layers (every state but the
    last layer's returned); its knobs are clamped to each recurrent layer's sums (gates x
    units) and window (features + units) when planned; with strategies [resource, latency]
    the recurrent layers stay at resource."""
    from keras2clash.search import evaluate as ev_module
    from keras2clash.search.description import load_description
    from keras2clash.search.space import NetworkSpec, build_model

    text = (
        SEQ.replace("cells: [lstm, gru]", "cells: [simple_rnn, lstm, gru]")
        .replace("parallelism: [1, 2]", "parallelism: [1, 2, 32]")
        .replace("cycles: [1, 2]", "cycles: [1, 2, 16]")
        .replace("pipeline: [1, 2]", "pipeline: [1, 2]\n  strategies: [resource, latency]")
    )
    desc = load_description(write(tmp_path, text))
    params = {
        "recurrent.cell": cell,
        "recurrent.layers": 2,
        "recurrent.units_0": 6,
        "recurrent.units_1": 4,
        "recurrent.dense_layers": 1,
        "recurrent.dense_units_0": 8,
        "hw.format": "1,4,6",
        "hw.pipeline": 1,
    }
    params |= {f"hw.pe_{i}": pe for i, pe in enumerate([32, 2, 2, 1])}
    params |= {f"hw.cycles_{i}": c for i, c in enumerate([16, 16, 2, 1])}
    params |= {f"hw.strategy_{i}": s for i, s in enumerate(["latency", "latency", "resource", "latency"])}
    candidate = _candidate(desc, params)
    assert candidate.network == NetworkSpec("recurrent", dense=(8,), activation="tanh", cell=cell, recurrent=(6, 4))
    assert candidate.network.describe() == f"recurrent: {cell}6-{cell}4-d8-out tanh"
    hw = candidate.hardware
    assert hw.strategies == ("resource", "resource", "resource", "latency")
    assert (hw.parallelism, hw.cycles) == ((32, 2, 2, 1), (16, 16, 2, 1))  # the latency layer's knobs inactive
    model = build_model(candidate.network, (8, 8), 10)
    assert [type(layer).__name__ for layer in model.layers] == [keras_class, keras_class, "Dense", "Dense"]
    rnn = model.layers[:2]
    assert [layer.units for layer in rnn] == [6, 4] and [layer.return_sequences for layer in rnn] == [True, False]
    assert {layer.activation.__name__ for layer in model.layers[:3]} == {"tanh"}
    assert model.output_shape == (None, 10)
    network = ev_module.plan_candidate(candidate, model)
    plans = [p for p in network.plans if p.is_compute]
    assert [p.knobs.pe for p in plans[:3]] == [min(32, gates * 6), 2, 2]
    assert [p.knobs.cycles for p in plans[:3]] == [8 + 6, 6 + 4, 2]
    assert [p.knobs.strategy for p in plans] == ["resource", "resource", "resource", "latency"]


def test_recurrent_layers_stay_at_resource_under_auto(tmp_path: Path) -> None:
    """knobs: balanced with strategies: [auto]: the recurrent layers are built at resource
    (no adder graph builds a step), the Dense layers left to the allocator."""
    import keras

    from keras2clash.search import evaluate as ev_module
    from keras2clash.search.description import load_description
    from keras2clash.search.space import build_model

    text = SEQ.replace(
        "  parallelism: [1, 2]\n  cycles: [1, 2]\n", "  knobs: balanced\n  budgets: [40]\n  strategies: [auto]\n"
    )
    desc = load_description(write(tmp_path, text))
    params = {"recurrent.cell": "gru", "recurrent.layers": 2, "recurrent.units_0": 6, "recurrent.units_1": 4}
    params |= {"recurrent.dense_layers": 1, "recurrent.dense_units_0": 8, "hw.format": "1,7,8", "hw.budget": 40}
    candidate = _candidate(desc, {**params, "hw.pipeline": 2})
    assert candidate.hardware.strategies == ("resource", "resource", "auto", "auto")
    keras.utils.set_random_seed(1)
    network = ev_module.plan_candidate(candidate, build_model(candidate.network, (8, 8), 10))
    fig = ev_module.hardware_figures(network)
    assert fig.strategies[:2] == ["resource", "resource"] and fig.multipliers <= 40


def _waves(n: int, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` sequences of `steps` steps of 2 features: a sine, square or sawtooth wave (the
    class, 3) of random frequency and phase, beside noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    u = (rng.uniform(0.08, 0.2, (n, 1)) * np.arange(steps) + rng.uniform(0, 1, (n, 1))) % 1.0
    waves = np.stack([np.sin(2 * np.pi * u), np.where(u < 0.5, 1.0, -1.0), 2 * u - 1])
    x = np.stack([waves[y, np.arange(n)], rng.normal(0, 0.1, (n, steps))], axis=-1)
    return x.astype(np.float32), y


@pytest.fixture(scope="module")
def recurrent_search(tmp_path_factory):
    """A search of recurrent networks on sequences of 12 steps of 2 features (npz files): the
    base design, a stacked GRU with a hidden Dense layer, and two bred candidates."""
    from keras2clash.search import study as study_module
    from keras2clash.search.description import load_description

    tmp = tmp_path_factory.mktemp("recurrent")
    x, y = _waves(400, 12, seed=1)
    np.savez(tmp / "train.npz", x=x[:300], y=y[:300])
    np.savez(tmp / "test.npz", x=x[300:], y=y[300:])
    text = (
        SEQ.replace("data: {dataset: digits, validation: 0.2}", "data: {train: train.npz, test: test.npz}")
        .replace("cells: [lstm, gru]", "cells: [simple_rnn, lstm, gru]")
        .replace("base: {cell: lstm, layers: [6]}", "base: {cell: gru, layers: [6, 4], dense: [8]}")
    )
    desc = load_description(write(tmp, text))
    summary = study_module.run(desc, tmp / "run", show=False)
    return desc, summary, x[300:], y[300:]


def test_recurrent_search_end_to_end(recurrent_search, tmp_path: Path, capsys) -> None:
    """Every trained candidate's figures are the hardware model's for the network `emit`
    builds, its accuracies the golden model's on the sequences; the results show it and emit
    writes it with its test set as sequences."""
    import keras
    import optuna

    from keras2clash.backend.project import load_project
    from keras2clash.hw import hwmodel
    from keras2clash.network import load_network
    from keras2clash.quant import golden
    from keras2clash.search.space import candidate_from_params

    desc, summary, x_test, y_test = recurrent_search
    out = summary.folder.root
    trials = optuna.load_study(study_name="seq", storage=summary.folder.storage).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3 and trials[0].user_attrs["base"]
    for t in trials:
        ev = t.user_attrs["evaluation"]
        assert ev["trained"]
        candidate = candidate_from_params(t.params, desc)
        model = keras.models.load_model(summary.folder.models / f"{candidate.network.key}.keras")
        assert model.input_shape == (None, 12, 2)
        hw = candidate.hardware
        engines = [layer for layer in model.layers if layer.__class__.__name__ != "InputLayer"]
        gates = 4 if candidate.network.cell in ("lstm", "gru") else 1
        filters = [gates * layer.units if hasattr(layer, "cell") else layer.units for layer in engines]
        windows = [int(layer.input.shape[-1]) + (layer.units if hasattr(layer, "cell") else 0) for layer in engines]
        assert hw.parallelism is not None and hw.cycles is not None
        network = load_network(
            model,
            str(hw.formats[0]),
            parallelism=[min(p, f) for p, f in zip(hw.parallelism, filters)],
            cycles=[min(c, w) for c, w in zip(hw.cycles, windows)],
            pipeline=hw.pipeline,
            softmax="argmax",
        )
        fig = hwmodel.figures(network.plans)
        assert (ev["multipliers"], ev["ii"], ev["latency"], ev["memory_bits"]) == (
            fig.multipliers,
            fig.ii,
            fig.latency,
            fig.memory_bits,
        )
        assert ev["cycles"] == list(fig.cycles) and ev["network"].startswith(f"recurrent: {candidate.network.cell}")
        classes = golden.predict(network.plans, network.params, golden.quantize_inputs(network.plans, x_test))[1]
        assert ev["test_accuracy"] == float(np.mean(classes == y_test))
    code, text = run_cli(["search", "show", str(out)], capsys)
    assert code == 0 and "recurrent: gru6-gru4-d8-out tanh" in (out / "results.md").read_text()
    assert (out / "pareto.png").stat().st_size > 10_000
    code, text = run_cli(["search", "emit", str(out), "--trial", "0", "--out", str(tmp_path / "p")], capsys)
    assert code == 0, text
    project = load_project(tmp_path / "p")
    fig = hwmodel.figures(project.plans)
    base = trials[0].user_attrs["evaluation"]
    assert (fig.multipliers, fig.ii, fig.latency) == (base["multipliers"], base["ii"], base["latency"])
    with np.load(out / "data/test_recurrent.npz") as data:
        assert np.array_equal(data["x"], x_test) and np.array_equal(data["y"], y_test)


@pytest.mark.slow
@pytest.mark.toolchain
@needs_toolchain
def test_emitted_recurrent_candidate_is_bit_exact_in_clash(recurrent_search, tmp_path: Path) -> None:
    """The recurrent search's top candidate, emitted, equals the golden model in the Clash
    simulation, back to back and under stalls, with the hardware model's cycles."""
    from helpers import assert_clash_matches_golden
    from keras2clash.backend.project import load_project
    from keras2clash.quant import golden
    from keras2clash.search.emit import emit
    from keras2clash.search.results import collect
    from keras2clash.search.study import open_folder

    desc, summary, _, _ = recurrent_search
    top = collect(open_folder(summary.folder.root), desc).best[0]
    result = emit(summary.folder.root, top.number, tmp_path / "top", simulate=True, limit=24)
    assert result.confirmed and result.comparison.bit_exact == 24
    project = load_project(tmp_path / "top")
    with np.load(result.data) as data:
        x_raw = golden.quantize_inputs(project.plans, data["x"][:12])
    assert_clash_matches_golden(project, x_raw, seed=3)
