"""Co-design search: the network and its hardware together (keras2clash.search), a command
group of its own (`keras2clash search run|show|emit`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from keras2clash.cli import params
from keras2clash.cli.common import app, err
from keras2clash.errors import K2CError

search_app = typer.Typer(
    no_args_is_help=True,
    help="Co-design search: evolve the network and its hardware together (optuna NSGA-II, exact hardware "
    "model, golden model), then emit a candidate.",
)
app.add_typer(search_app, name="search")

# Each command imports keras2clash.search when it runs: optuna and the training code behind it
# would slow every other command's start-up.


@search_app.command("run")
def search_run(
    description: Annotated[Path, typer.Argument(help="The search description (YAML, or JSON by its .json suffix).")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="The search folder: created, or resumed if it holds this search.")
    ],
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Worker processes on this machine.")] = 1,
    storage: params.Storage = None,
    trials: Annotated[
        int | None, typer.Option("--trials", min=1, help="Finished trials to stop at (default: the description's).")
    ] = None,
    top: params.Top = 15,
) -> None:
    """Run (or resume) a co-design search; results.md/.json and pareto.png land in --out."""
    from keras2clash.search import results, study
    from keras2clash.search.description import load_description

    desc = load_description(description)
    summary = study.run(desc, out, workers=workers, storage=storage, trials=trials)
    res = results.collect(summary.folder, desc)
    results.render(res, Console(), limit=top)
    results.write_results(res, summary.folder.root)
    err.print(
        f"[green]✓[/green] {summary.finished} finished trials ({summary.finished - summary.finished_before} "
        f"this run, {summary.seconds:.0f} s); wrote {', '.join(str(out / n) for n in results.RESULT_FILES)}"
    )


@search_app.command("show")
def search_show(
    folder: params.SearchFolder,
    storage: params.FolderStorage = None,
    top: params.Top = 15,
) -> None:
    """The best candidates of a search (running or finished); rewrites results.md/.json and pareto.png."""
    from keras2clash.search import results, study

    found = study.open_folder(folder, storage)
    res = results.collect(found, found.description())
    results.render(res, Console(), limit=top)
    results.write_results(res, found.root)
    err.print(f"[green]✓[/green] wrote {', '.join(str(folder / n) for n in results.RESULT_FILES)}")


@search_app.command("emit")
def search_emit(
    folder: params.SearchFolder,
    trial: Annotated[int, typer.Option("--trial", "-t", min=0, help="The candidate's trial number (search show).")],
    out: params.ProjectOut,
    simulate: Annotated[
        bool, typer.Option("--simulate", help="Also run the Clash simulation: bit-exact and the model's cycles?")
    ] = False,
    n: Annotated[int | None, typer.Option("-n", min=1, help="Simulate only the first N test samples.")] = None,
    storage: params.FolderStorage = None,
    force: params.Force = False,
) -> None:
    """Emit a candidate of a search as a Clash project (the normal flow: hdl, simulate, pnr)."""
    from keras2clash.search.emit import emit as emit_candidate

    result = emit_candidate(folder, trial, out, force=force, simulate=simulate, limit=n, storage=storage)
    ev = result.evaluation
    err.print(
        f"[green]✓[/green] trial {trial} ({escape(ev.network)}; {escape(ev.hardware)}) emitted to {out}: "
        f"{ev.multipliers} multipliers, II {ev.ii:g}, latency {ev.latency} cycles, golden test accuracy "
        f"{100 * ev.test_accuracy:.2f}%" + (" (network trained again)" if result.retrained else "")
    )
    comp = result.comparison
    if comp is None:
        err.print(f"next: keras2clash simulate {out} --data {result.data}; keras2clash hdl {out}")
        return
    err.print(
        f"Clash simulation: {comp.bit_exact}/{comp.samples} bit-exact with the golden model, accuracy "
        f"{100 * comp.sim_accuracy:.2f}%; first latency {comp.first_latency} cycles (model {ev.latency}), "
        f"mean interval {comp.interval:g} (model {result.model_interval:g}, steady-state II {ev.ii:g})"
    )
    if not result.confirmed:
        raise K2CError("the Clash simulation differs from the golden model or the hardware model", exit_code=1)
