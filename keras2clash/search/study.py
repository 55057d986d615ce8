"""The search: optuna's NSGA-II sampler over a shared storage, a pool of worker processes.

Why optuna, and its storage: the genetic operators (crossover, mutation, non-dominated
sorting with constraints), the database of results and the coordination of workers are
optuna's, a maintained library; keras2clash adds the objective only. Every trial is
written to the storage as it finishes (SQLite in the search folder by default), so a
search can be watched (`keras2clash search show`) while it runs, stopped (Ctrl-C: the
running trials are marked failed) and resumed: `search run` on the same folder loads the
study, enqueues the interrupted trials' candidates again, and runs until it has `trials`
finished trials, never re-running a finished one.

Workers: `--workers N` starts N processes on this machine (spawned, each TensorFlow
single-threaded), each `optuna.load_study` + `study.optimize` on the same storage, with
NSGA-II seeded per worker; `--storage URL` (e.g. postgresql://..., or an SQLite file on
a shared disk) lets `search run` on other machines join the same study. A worker stops
when the study has `trials` finished trials (optuna's MaxTrialsCallback); workers that
were already running a trial finish it, so N workers can overshoot by up to N - 1. A
worker that dies without a word (power cut, kill -9) stops its heartbeat; its trial is
marked failed and retried once by the next worker (optuna's RetryFailedTrialCallback).

Reproducibility: with one worker and a seed the search is deterministic (the sampler
and the training are seeded); with several, the order in which trials finish (and so
what NSGA-II breeds from) depends on timing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keras2clash.errors import K2CError, os_error_text
from keras2clash.fsutil import check_writable_target, write_output_file
from keras2clash.search import evaluate as evaluation
from keras2clash.search.description import Description, parse_description
from keras2clash.search.space import base_params, sample

MANIFEST = "search.json"
"""Marks a search folder: the storage URL (null: the folder's own search.db, found relative
to the folder so that it can be moved) and the study's name (so `show`/`emit` find it)."""
DATABASE = "search.db"
MODELS = "models"
HEARTBEAT_SECONDS = 20
"""A worker writes a heartbeat this often; one silent for 10 beats (a loaded machine can starve
a niced worker for a while) has its trial failed and retried."""


@dataclass(frozen=True)
class SearchFolder:
    """A search's folder: the description it was started with, its storage, its models."""

    root: Path
    storage: str
    study_name: str
    description_file: str
    base_dir: Path | None = None  # where the description was: its relative data paths start there

    @property
    def models(self) -> Path:
        return self.root / MODELS

    def description(self) -> Description:
        path = self.root / self.description_file
        return parse_description(path.read_text(), str(path), base_dir=self.base_dir or self.root)


def _sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def open_folder(root: str | Path, storage: str | None = None) -> SearchFolder:
    """An existing search folder (`search show`, `search emit`)."""
    root = Path(root)
    manifest = root / MANIFEST
    if not manifest.is_file():
        raise K2CError(f"{root} is not a search folder (no {MANIFEST}); start one with 'keras2clash search run'")
    try:
        data = json.loads(manifest.read_text())
        url = storage or data["storage"] or _sqlite_url(root / DATABASE)  # null: the folder's own (it may move)
        base = data.get("base_dir")
        return SearchFolder(root, url, data["study"], data["description"], Path(base) if base else None)
    except (OSError, ValueError, KeyError) as exc:
        raise K2CError(f"{manifest} is unreadable ({exc})") from None


def prepare_folder(root: str | Path, desc: Description, storage: str | None) -> tuple[SearchFolder, bool]:
    """The folder for `search run`: a new one is created (checked first: fsutil's policy);
    an existing search folder is resumed only with the same description. Returns (folder,
    resumed)."""
    root = Path(root)
    if (root / MANIFEST).is_file():
        folder = open_folder(root, storage)
        stored = (root / folder.description_file).read_text()
        if stored != desc.text:
            raise K2CError(
                f"{root} holds a search with another description ({root / folder.description_file}); "
                "resume it with that file, or give a new --out"
            )
        return folder, True
    check_writable_target(root, force=False)
    suffix = ".json" if desc.source.endswith(".json") else ".yaml"
    base = Path(desc.source).resolve().parent if desc.source and Path(desc.source).exists() else None
    folder = SearchFolder(root, storage or _sqlite_url(root / DATABASE), desc.name, f"description{suffix}", base)
    write_output_file(root / folder.description_file, desc.text)
    write_output_file(
        root / MANIFEST,
        json.dumps(
            {
                "storage": storage,
                "study": folder.study_name,
                "description": folder.description_file,
                "base_dir": None if base is None else str(base),
            },
            indent=2,
        )
        + "\n",
        force=True,
    )
    return folder, False


def open_storage(url: str) -> Any:
    """optuna's RDB storage: a generous SQLite lock timeout (several workers write), a
    heartbeat, and a retry of trials whose worker vanished."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    kwargs = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}
    try:
        return optuna.storages.RDBStorage(
            url,
            engine_kwargs=kwargs,
            heartbeat_interval=HEARTBEAT_SECONDS,
            grace_period=10 * HEARTBEAT_SECONDS,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1),
        )
    except Exception as exc:  # sqlalchemy: bad URL, missing driver, unreachable server
        raise K2CError(f"cannot open the search storage {url}: {' '.join(str(exc).split())[:300]}") from None


def make_sampler(desc: Description, worker: int) -> Any:
    """NSGA-II, seeded per worker (two workers with one seed would breed the same children).
    Constraints reach it through `trial.set_constraint` (constrained domination)."""
    import optuna

    return optuna.samplers.NSGAIISampler(population_size=desc.population, seed=desc.seed + 1000 * worker)


def _constraint_names(desc: Description) -> list[str]:
    c = desc.constraints
    return [
        name
        for name in ("multipliers", "logic_cells", "memory_bits", "latency", "ii", "images_per_second", "accuracy")
        if getattr(c, name) is not None
    ]


def create_study(folder: SearchFolder, desc: Description) -> Any:
    """Create (or load) the study; a new one gets the base designs enqueued first."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(folder.storage)
    study = optuna.create_study(
        storage=storage,
        study_name=folder.study_name,
        directions=desc.goals.directions,
        sampler=make_sampler(desc, 0),
        load_if_exists=True,
    )
    if [d.name.lower() for d in study.directions] != desc.goals.directions:
        raise K2CError(
            f"the study {folder.study_name!r} in {folder.storage} has other goals; use a new name or storage"
        )
    if "objectives" not in study.user_attrs:
        study.set_user_attr("objectives", list(desc.goals.objectives))
        study.set_user_attr("description", desc.text)
        if not study.trials:
            for params in base_params(desc):
                study.enqueue_trial(params, user_attrs={"base": True})
    elif study.user_attrs.get("description") != desc.text:
        raise K2CError(f"the study {folder.study_name!r} in {folder.storage} was started from another description")
    else:
        requeue_interrupted(study)
    return study


def requeue_interrupted(study: Any) -> list[int]:
    """On resume, the trials an interrupted run left failed (Ctrl-C marks the running ones
    FAIL) are enqueued again with their parameters, once each: an interrupted base design
    is still evaluated, and the evolution loses no candidate it had bred."""
    from optuna.trial import TrialState

    done = set(study.user_attrs.get("requeued", []))
    failed = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
        if t.number not in done and "retry_of" not in t.user_attrs
    ]
    for t in failed:
        attrs = {"retry_of": t.number, **({"base": True} if t.user_attrs.get("base") else {})}
        study.enqueue_trial(dict(t.params), user_attrs=attrs, skip_if_exists=False)
    if failed:
        study.set_user_attr("requeued", sorted(done | {t.number for t in failed}))
    return [t.number for t in failed]


def finished(study: Any) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


class Objective:
    """One trial: sample the candidate, evaluate it, record everything with the trial."""

    def __init__(
        self, desc: Description, data: Any, models: Path | None, worker: int, evaluate: Callable[..., Any] | None = None
    ) -> None:
        self.desc, self.data, self.models, self.worker = desc, data, models, worker
        self.evaluate = evaluate or evaluation.evaluate  # read from the module here: tests put their own there
        self.names = _constraint_names(desc)

    def __call__(self, trial: Any) -> list[float]:
        candidate = sample(trial, self.desc)
        ev = self.evaluate(candidate, self.desc, self.data, self.models)
        trial.set_user_attr("candidate", candidate.key)
        trial.set_user_attr("evaluation", ev.to_json())
        trial.set_user_attr("worker", f"{os.uname().nodename}:{os.getpid()}")
        for name in self.names:  # NSGA-II's constrained domination: <= 0 is met
            trial.set_constraint(name, float(ev.violations.get(name, 0.0)))
        return evaluation.objective_values(ev, self.desc.goals)


def work(
    folder: SearchFolder,
    target: int,
    worker: int = 0,
    single_thread: bool = False,
    callback: Callable[[Any, Any], None] | None = None,
    evaluate: Callable[..., Any] | None = None,
) -> int:
    """One worker: load the study and optimise until it has `target` finished trials.
    Returns the trials this worker ran."""
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    if single_thread:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    desc = folder.description()
    study = optuna.load_study(
        study_name=folder.study_name, storage=open_storage(folder.storage), sampler=make_sampler(desc, worker)
    )
    remaining = target - finished(study)
    if remaining <= 0:
        return 0
    data = evaluation.load_data(desc.data, desc.seed)
    before = len(study.get_trials(deepcopy=False))
    callbacks = [MaxTrialsCallback(target, states=(TrialState.COMPLETE,))]
    if callback is not None:
        callbacks.append(callback)
    objective = Objective(desc, data, folder.models, worker, evaluate)
    while remaining > 0:
        try:
            study.optimize(objective, n_trials=remaining, callbacks=callbacks, gc_after_trial=True)
            break
        except ValueError as exc:
            # Two workers can pop the same enqueued (WAITING) trial: optuna's SQLite storage does
            # not make that claim atomic across processes. The first to finish has told its
            # values; this worker's equal result is dropped and it goes on with the search.
            if "Cannot tell a COMPLETE trial" not in str(exc):
                raise
            remaining = target - finished(study)
    return len(study.get_trials(deepcopy=False)) - before


def worker_main(argv: list[str] | None = None) -> int:
    """`python -m keras2clash.search.study ROOT STORAGE TARGET WORKER`: one pool worker
    (quiet, TensorFlow single-threaded: the parent shows the progress)."""
    import sys

    root, storage, target, worker = argv if argv is not None else sys.argv[1:]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        work(open_folder(root, storage), int(target), int(worker), single_thread=True)
    except KeyboardInterrupt:
        return 130
    except (K2CError, OSError) as exc:  # one line, as the command line prints it
        text = os_error_text(exc) if isinstance(exc, OSError) else str(exc)
        print(f"error: search worker {worker}: {text}", file=sys.stderr)
        return K2CError.exit_code
    return 0


@dataclass(frozen=True)
class RunSummary:
    folder: SearchFolder
    resumed: bool
    finished_before: int
    finished: int  # finished trials now
    target: int
    seconds: float


def run(
    desc: Description,
    out: str | Path,
    *,
    workers: int = 1,
    storage: str | None = None,
    trials: int | None = None,
    show: bool = True,
) -> RunSummary:
    """`keras2clash search run`: prepare (or resume) the folder, run the workers, show the
    progress; the results are then `results.write_results`."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if workers < 1:
        raise K2CError(f"--workers must be at least 1, got {workers}")
    target = trials if trials is not None else desc.trials
    if target < 1:
        raise K2CError(f"--trials must be at least 1, got {target}")
    started = time.perf_counter()
    if storage is not None:
        open_storage(storage)  # a bad URL is refused before the folder is made
    folder, resumed = prepare_folder(out, desc, storage)
    try:
        study = create_study(folder, desc)
    except BaseException:
        if not resumed:  # nothing half-written: the folder was made just now
            import shutil

            shutil.rmtree(folder.root, ignore_errors=True)
        raise
    before = finished(study)
    console = Console(stderr=True)
    if resumed:
        console.print(f"resuming {folder.study_name}: {before} finished trial(s) in {folder.storage}")
    columns = (
        TextColumn("search {task.fields[name]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[best]}"),
    )
    with Progress(*columns, console=console, disable=not show) as bar:
        task = bar.add_task(
            "trials", total=target, completed=min(before, target), name=folder.study_name, best=_best_text(study, desc)
        )

        def update(study: Any, _trial: Any = None) -> None:
            bar.update(task, completed=min(finished(study), target), best=_best_text(study, desc))

        if workers == 1:
            work(folder, target, 0, callback=update)
        else:
            _pool(folder, target, workers, lambda: update(study))
        update(study)
    return RunSummary(folder, resumed, before, finished(study), target, time.perf_counter() - started)


def _pool(folder: SearchFolder, target: int, workers: int, poll: Callable[[], None]) -> None:
    """N worker processes on one storage (fresh interpreters: TensorFlow does not survive a
    fork); the parent polls the storage for the progress."""
    import subprocess
    import sys

    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "keras2clash.search.study", str(folder.root), folder.storage, str(target), str(i)],
            stdin=subprocess.DEVNULL,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        for i in range(workers)
    ]
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(1.0)
            poll()
    finally:
        for p in procs:  # Ctrl-C reaches the workers too (same process group): they mark their trials failed
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.terminate()
                p.wait()
    failed = [p for p in procs if p.returncode != 0]
    if failed:
        raise K2CError(
            f"{len(failed)} search worker(s) failed (exit code {failed[0].returncode}); "
            "the finished trials are kept: run the same command again to resume"
        )


def _best_text(study: Any, desc: Description) -> str:
    from optuna.trial import TrialState

    best = None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        ev = t.user_attrs.get("evaluation", {})
        if ev.get("trained") and all(v <= 0 for v in ev.get("violations", {}).values()):
            if best is None or ev["accuracy"] > best["accuracy"]:
                best = ev
    if best is None:
        return ""
    return f"best accuracy {100 * best['accuracy']:.2f}% ({best['multipliers']} mult., II {best['ii']:g})"


if __name__ == "__main__":
    raise SystemExit(worker_main())
