"""``sdr sweep``: sizes x drops x schemes (x distances or RTTs, rates) to CSV/JSONL, resumable."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from sdr.cli.sim_options import (
    ALPHA,
    CHUNK,
    DROP_UNIT,
    FIG9_DROPS,
    FIG9_SIZES,
    MTU,
    SPEED,
    DropUnitName,
    ExecutorName,
    MethodName,
    split_list,
)
from sdr.cli.sim_output import err_console, fail
from sdr.errors import ConfigError, SDRError
from sdr.units import parse_distance, parse_rate, parse_size, parse_time


def sweep(
    ctx: typer.Context,
    grid: str | None = typer.Option(
        None,
        "--grid",
        help='TOML (or YAML) file of these options, e.g. rtts = ["10ms", "100ms"]; '
        "a flag given overrides the file.",
    ),
    sizes: str = typer.Option(FIG9_SIZES, "--sizes", help="Comma list of write sizes."),
    drops: str = typer.Option(FIG9_DROPS, "--drops", help="Comma list of drop probabilities."),
    schemes: str = typer.Option("sr-rto,sr-nack,ec-mds,ec-xor", "--schemes"),
    rates: str = typer.Option(
        "400Gbit/s", "--rates", help="Comma list of line rates (e.g. 10Gbit/s,100G)."
    ),
    distances: str | None = typer.Option(None, "--distances", help="Comma list (default 3750km)."),
    rtts: str | None = typer.Option(
        None, "--rtts", help="Comma list of RTTs (not with distances)."
    ),
    speed: float = SPEED,
    drop_unit: DropUnitName = DROP_UNIT,
    chunk: str = CHUNK,
    mtu: str = MTU,
    alpha: float = ALPHA,
    ec: str = typer.Option("32,8", "--ec", help="EC data,parity chunks per submessage."),
    method: MethodName = typer.Option(MethodName.montecarlo, "--method"),
    samples: int | None = typer.Option(
        None, "--samples", help="Samples per point (default 1000, 100 with --method des)."
    ),
    seed: int = typer.Option(0, "--seed"),
    executor: ExecutorName = typer.Option(ExecutorName.local, "--executor"),
    scheduler: str | None = typer.Option(None, "--scheduler", help="Dask scheduler address."),
    workers: int | None = typer.Option(None, "--workers", help="Local worker processes."),
    out: str = typer.Option(
        "sweep.csv", "--out", help="File to write, rows as points finish ('-': stdout)."
    ),
    fmt: str | None = typer.Option(
        None,
        "--format",
        metavar="csv|jsonl|parquet",
        help="Output format (default: by the --out suffix, else csv; parquet needs pyarrow).",
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Keep the rows already in --out; evaluate only the rest."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --out."),
    plot: str | None = typer.Option(
        None,
        "--plot",
        help="PNG of the answer: with more than one RTT or rate, the EC/SR crossover "
        "size against each swept one; with one path, the speedup heatmaps.",
    ),
    panels: str | None = typer.Option(
        None,
        "--panels",
        help="PNG of Fig-9 style speedup heatmaps, a row of panels per path (slow to draw "
        "for many paths).",
    ),
) -> None:
    """Sweep sizes x drops x schemes (x distances or RTTs, rates) and write CSV or JSON Lines.

    Rows are appended to --out as the points finish, so Ctrl-C (exit 130), SIGTERM (exit
    143) or a kill keeps every finished row; run the same command with --resume to evaluate
    only the rest.
    """
    from sdr.cli.sweep_file import apply_grid_file

    try:
        opts = apply_grid_file(ctx, grid) if grid else dict(ctx.params)
    except SDRError as exc:
        raise fail(exc) from None
    opts.pop("grid", None)
    try:
        _run_sweep(**opts)
    except KeyboardInterrupt:  # before the sweep started (imports, the grid's checks)
        where = "" if opts["out"] == "-" else f"; {opts['out']} is as it was"
        err_console.print(
            f"interrupted before any point ran{where}; run the same command to go on",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(128 + signal.SIGINT) from None


def _run_sweep(
    *,
    sizes: str,
    drops: str,
    schemes: str,
    rates: str,
    distances: str | None,
    rtts: str | None,
    speed: float,
    drop_unit: DropUnitName,
    chunk: str,
    mtu: str,
    alpha: float,
    ec: str,
    method: MethodName,
    samples: int | None,
    seed: int,
    executor: ExecutorName,
    scheduler: str | None,
    workers: int | None,
    out: str,
    fmt: str | None,
    resume: bool,
    force: bool,
    plot: str | None,
    panels: str | None,
) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from sdr.simulator.plots import plot_speedup_heatmaps
    from sdr.simulator.schemes import parse_ec
    from sdr.simulator.sweep import SweepInterrupted, format_for, make_grid, sweep_to_csv
    from sdr.simulator.sweep_summary import plot_sweep_summary, swept_dimensions

    try:
        to_stdout = out == "-"
        fmt = format_for(None if to_stdout else out, fmt)
        if to_stdout and fmt == "parquet":
            raise ConfigError("--format parquet needs an --out file, not stdout ('-')")
        _check_sweep_out(out, resume=resume, force=force)
        if samples is None:
            samples = 100 if method == MethodName.des else 1000
        if executor == ExecutorName.dask and not scheduler:
            raise ConfigError("--executor dask needs --scheduler tcp://HOST:8786")
        k, m = parse_ec(ec)
        points = make_grid(
            [parse_size(x) for x in split_list(sizes)],
            [float(x) for x in split_list(drops)],
            split_list(schemes),
            rates=[parse_rate(x) for x in split_list(rates)],
            rtts=[parse_time(x) for x in split_list(rtts)] if rtts else None,
            distances=[parse_distance(x) for x in split_list(distances)] if distances else None,
            propagation_speed=speed,
            seed=seed,
            drop_unit=drop_unit.value,
            chunk_size=parse_size(chunk),
            mtu=parse_size(mtu),
            alpha=alpha,
            k=k,
            m=m,
            method=method.value,
            samples=samples,
        )
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
                        resume=resume,
                        fmt=fmt,
                        executor=executor.value,
                        workers=workers,
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
