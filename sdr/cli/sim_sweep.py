"""``sdr sweep``: sizes x drops x schemes (x distances or RTTs, rates) to CSV/JSONL, resumable."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from sdr.cli.sim_options import ExecutorName
from sdr.cli.sim_output import err_console, fail
from sdr.cli.sweep_options import grid_arguments, sweep_signature
from sdr.errors import ConfigError, SDRError


def sweep(ctx: typer.Context, **options: Any) -> None:
    """Sweep sizes x drops x schemes (x distances or RTTs, rates) and write CSV or JSON Lines.

    Rows are appended to --out as the points finish, so Ctrl-C (exit 130), SIGTERM (exit
    143) or a kill keeps every finished row; run the same command with --resume to evaluate
    only the rest.
    """
    from sdr.cli.sweep_file import apply_grid_file

    grid = options.get("grid")
    try:
        opts = apply_grid_file(ctx, grid) if grid else dict(ctx.params)
    except SDRError as exc:
        raise fail(exc) from None
    try:
        _run_sweep(opts)
    except KeyboardInterrupt:  # before the sweep started (imports, the grid's checks)
        where = "" if opts["out"] == "-" else f"; {opts['out']} is as it was"
        err_console.print(
            f"interrupted before any point ran{where}; run the same command to go on",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(128 + signal.SIGINT) from None


# typer reads the command's options from its signature: the one table's
vars(sweep)["__signature__"] = sweep_signature()


def _run_sweep(opts: dict[str, Any]) -> None:
    """Run the sweep the options' values (by name, :data:`SWEEP_OPTIONS`) describe."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from sdr.simulator.plots import plot_speedup_heatmaps
    from sdr.simulator.sweep import SweepInterrupted, format_for, make_grid, sweep_to_csv
    from sdr.simulator.sweep_summary import plot_sweep_summary, swept_dimensions

    out: str = opts["out"]
    plot: str | None = opts["plot"]
    panels: str | None = opts["panels"]
    executor: ExecutorName = opts["executor"]
    scheduler: str | None = opts["scheduler"]
    try:
        to_stdout = out == "-"
        fmt = format_for(None if to_stdout else out, opts["fmt"])
        if to_stdout and fmt == "parquet":
            raise ConfigError("--format parquet needs an --out file, not stdout ('-')")
        _check_sweep_out(out, resume=opts["resume"], force=opts["force"])
        if executor == ExecutorName.dask and not scheduler:
            raise ConfigError("--executor dask needs --scheduler tcp://HOST:8786")
        points = make_grid(**grid_arguments(opts))
        columns = [BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
        with Progress(
            "[progress.description]{task.description}", *columns, console=err_console
        ) as bar:
            task = bar.add_task("sweep", total=len(points))
            try:
                with _sigterm_as_interrupt() as caught:
                    rows = sweep_to_csv(
                        points,
                        sys.stdout if to_stdout else out,
                        resume=opts["resume"],
                        fmt=fmt,
                        executor=executor.value,
                        workers=opts["workers"],
                        scheduler=scheduler,
                        progress=lambda n: bar.advance(task, n),
                    )
            except SweepInterrupted as stop:
                bar.stop()
                how = "terminated (SIGTERM)" if caught else "interrupted"
                err_console.print(
                    _interrupted_line(stop, to_stdout, how), markup=False, soft_wrap=True
                )
                # 128 + the signal, as a shell reports a process the signal ended
                raise typer.Exit(128 + (signal.SIGTERM if caught else signal.SIGINT)) from None
        where = "stdout" if to_stdout else out
        err_console.print(f"wrote {len(rows)} rows ({fmt}) to {where}", markup=False)
        if plot and swept_dimensions(rows):
            plot_sweep_summary(rows, plot)
            err_console.print(f"wrote {plot} (crossover size per swept path)", markup=False)
        elif plot:
            plot_speedup_heatmaps(rows, plot)
            err_console.print(f"wrote {plot} (speedup heatmaps)", markup=False)
        if panels:
            plot_speedup_heatmaps(rows, panels)
            err_console.print(f"wrote {panels} (speedup heatmaps)", markup=False)
    except SDRError as exc:
        raise fail(exc) from None


def _check_sweep_out(out: str, *, resume: bool, force: bool) -> None:
    """ConfigError unless writing ``out`` is what was asked: no silent overwrite."""
    if resume and force:
        raise ConfigError("--resume and --force exclude each other")
    if out == "-":
        if resume:
            raise ConfigError("--resume needs an --out file, not stdout ('-')")
        return
    path = Path(out)
    if path.is_dir():
        raise ConfigError(f"--out {out} is a directory")
    if path.exists() and not (resume or force):
        raise ConfigError(
            f"{out} already exists: pass --resume to finish it (skip its points) "
            "or --force to overwrite it"
        )


@contextmanager
def _sigterm_as_interrupt() -> Iterator[list[int]]:
    """Within: SIGTERM stops the sweep as Ctrl-C does (rows kept, resumable); the list
    yielded holds the signal number once one came."""
    caught: list[int] = []

    def on_term(signum: int, _frame: Any) -> None:
        caught.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield caught
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted_line(stop: Any, to_stdout: bool, how: str = "interrupted") -> str:
    """The one line printed on Ctrl-C or SIGTERM: how far the sweep got and how to go on."""
    if stop.finished is None:  # stopped while reading the rows to resume from
        where = "" if to_stdout else f"; {stop.path} is as it was"
        return f"{how} before any point ran{where}; run the same command to go on"
    done = f"{how}: {stop.finished} of {stop.total} points finished"
    if to_stdout:
        return f"{done} (written to stdout); rerun with --out FILE to be able to --resume"
    return f"{done} and saved in {stop.path}; run the same command with --resume to finish"
