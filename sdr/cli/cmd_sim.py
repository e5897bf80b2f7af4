"""``sdr sim``, ``sdr select``, ``sdr sweep`` and ``sdr allreduce-sim``: the simulator's face.

Sizes, rates, times and distances accept the units syntax of :mod:`sdr.units`
("64KiB", "400Gbit/s", "25ms", "3750km").
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sdr.errors import ConfigError, SDRError
from sdr.simulator.link import PAPER_PROPAGATION_SPEED, Link
from sdr.units import format_size, format_time, parse_distance, parse_rate, parse_size, parse_time

console = Console()
err_console = Console(stderr=True)

FIG9_SIZES = ",".join(f"{2**e}" for e in range(17, 34))  # 128 KiB .. 8 GiB
FIG9_DROPS = "1e-7,1e-6,1e-5,1e-4,1e-3,1e-2,1e-1"


class SchemeName(StrEnum):
    sr_rto = "sr-rto"
    sr_nack = "sr-nack"
    ec_mds = "ec-mds"
    ec_xor = "ec-xor"


class DropUnitName(StrEnum):
    chunk = "chunk"
    packet = "packet"


class MethodName(StrEnum):
    analytic = "analytic"
    montecarlo = "montecarlo"
    des = "des"


class ObjectiveName(StrEnum):
    mean = "mean"
    p999 = "p999"


class ExecutorName(StrEnum):
    local = "local"
    serial = "serial"
    dask = "dask"


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"error: {exc}", style="red", markup=False, soft_wrap=True)
    return typer.Exit(2)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(_jsonable(obj), indent=2) + "\n")


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _quantile_cells(
    value: float | None, ci: list[float | None] | None, n: int | None
) -> tuple[str, str]:
    """Table cells (value, CI) for one quantile, honest about intervals that are open.

    A sampled quantile whose interval has an open bound (too few samples beyond it) is
    shown as the bound the samples do give (``>= lo``), or ``n/a`` if they give none.
    """
    if value is None:
        return "n/a", ""
    if ci is None:
        return format_time(value), ""
    lo = ci[0] if _finite(ci[0]) else None
    hi = ci[1] if _finite(ci[1]) else None
    if lo is not None and hi is not None:
        return format_time(value), f"{format_time(lo)} .. {format_time(hi)}"
    note = f"too few samples: n={n}" if n is not None else "too few samples"
    if lo is not None:
        return f">= {format_time(lo)}", note
    if hi is not None:
        return f"<= {format_time(hi)}", note
    return "n/a", note


def _relative_delta(value: float, best: float) -> str:
    """``+0.0048%``: how far ``value`` is above ``best``, relative to it."""
    if best <= 0:
        return f"+{format_time(value - best)}"
    return f"{100 * (value - best) / best:+.2g}%"


@contextmanager
def _des_status(samples: int, size_bytes: int, link: Link, scheme: str) -> Iterator[None]:
    """Tell the user on stderr that a (slow) discrete-event simulation is running.

    A spinner with the elapsed time when stderr is a terminal (removed when done), else one
    line. stdout stays clean for the table or JSON.
    """
    chunks = math.ceil(size_bytes / link.chunk_size)
    text = f"{scheme}: simulating {samples} writes of {format_size(size_bytes)} x {chunks} chunks"
    if not err_console.is_terminal:
        err_console.print(
            text + " (discrete-event, the real protocol) ...",
            markup=False,
            soft_wrap=True,
            highlight=False,
        )
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=err_console, transient=True,
    ) as bar:  # fmt: skip
        bar.add_task(text, total=None)
        yield


def _link(
    bandwidth: str,
    rtt: str | None,
    distance: str | None,
    speed: float,
    mtu: str,
    chunk: str,
    alpha: float,
) -> Link:
    if rtt is not None and distance is not None:
        raise ConfigError("give either --rtt or --distance, not both")
    common = dict(mtu=parse_size(mtu), chunk_size=parse_size(chunk), alpha=alpha)
    if rtt is not None:
        return Link(parse_rate(bandwidth), parse_time(rtt), **common)  # type: ignore[arg-type]
    return Link.from_distance(
        parse_distance(distance or "3750km"),
        parse_rate(bandwidth),
        propagation_speed_mps=speed,
        **common,  # type: ignore[arg-type]
    )


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


# Shared option declarations.
BANDWIDTH = typer.Option("400Gbit/s", "--bandwidth", help="Line rate, e.g. 400Gbit/s.")
RTT = typer.Option(None, "--rtt", help="Round-trip time, e.g. 25ms (or give --distance).")
DISTANCE = typer.Option(None, "--distance", help="Path length, e.g. 3750km (default).")
SPEED = typer.Option(PAPER_PROPAGATION_SPEED, "--speed", help="Propagation speed in m/s.")
MTU = typer.Option("4096", "--mtu", help="Packet payload size.")
CHUNK = typer.Option("64KiB", "--chunk", help="Chunk size (a multiple of the MTU).")
ALPHA = typer.Option(2.0, "--alpha", help="Switch buffering in RTTs (RTO = (1 + alpha) RTT).")
DROP_UNIT = typer.Option(DropUnitName.chunk, "--drop-unit", help="What --drop is per.")


def sim(
    scheme: SchemeName = typer.Option(..., "--scheme", help="Reliability scheme."),
    size: str = typer.Option(..., "--size", help="Write size, e.g. 8MiB."),
    drop: float = typer.Option(..., "--drop", help="Drop probability per --drop-unit."),
    bandwidth: str = BANDWIDTH,
    rtt: str | None = RTT,
    distance: str | None = DISTANCE,
    speed: float = SPEED,
    drop_unit: DropUnitName = DROP_UNIT,
    chunk: str = CHUNK,
    mtu: str = MTU,
    alpha: float = ALPHA,
    ec: str = typer.Option("32,8", "--ec", help="EC data,parity chunks per submessage."),
    rto_rtts: float | None = typer.Option(
        None, "--rto-rtts", help="RTO in RTTs (default: sr-rto 1+alpha = 3, sr-nack 1)."
    ),
    method: MethodName = typer.Option(MethodName.analytic, "--method"),
    samples: int | None = typer.Option(
        None, "--samples", help="Samples (default: 10000 Monte Carlo, 100 simulated writes)."
    ),
    seed: int = typer.Option(0, "--seed", help="Monte Carlo / simulation seed."),
    burst: float | None = typer.Option(
        None,
        "--burst",
        help="Gilbert-Elliott bursts of this mean length (packets); --drop is "
        "the long-run packet loss rate. Monte Carlo, packet by packet.",
    ),
    trace: str | None = typer.Option(None, "--trace", help="Replay a 0/1 packet loss trace file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Predict the completion time of one write with one reliability scheme."""
    from sdr.simulator.evaluate import evaluate, evaluate_loss_model
    from sdr.simulator.loss import GilbertElliott, TraceReplay
    from sdr.simulator.schemes import SchemeSpec, parse_ec

    try:
        link = _link(bandwidth, rtt, distance, speed, mtu, chunk, alpha)
        k, m = parse_ec(ec)
        spec = SchemeSpec(scheme.value, rto_rtts=rto_rtts, k=k, m=m)
        if samples is None:
            samples = 100 if method == MethodName.des else 10_000
        status = (
            _des_status(samples, parse_size(size), link, scheme.value)
            if method == MethodName.des
            else nullcontext()
        )
        if burst is not None or trace is not None:
            if method == MethodName.analytic:
                raise ConfigError("--burst and --trace need --method montecarlo or des")
            model = TraceReplay.from_file(trace) if trace else GilbertElliott.from_rate(drop, burst)
            if method == MethodName.des:
                from sdr.simulator.des_estimate import estimate_des

                with status:
                    est = estimate_des(
                        link, parse_size(size), model, spec, samples=samples, seed=seed
                    )
            else:
                est = evaluate_loss_model(
                    link, parse_size(size), model, spec, samples=samples, seed=seed
                )
        else:
            with status:
                est = evaluate(
                    link,
                    parse_size(size),
                    drop,
                    spec,
                    drop_unit=drop_unit.value,  # type: ignore[arg-type]
                    method=method.value,  # type: ignore[arg-type]
                    samples=samples,
                    seed=seed,
                )
    except (SDRError, OSError) as exc:
        raise _fail(exc) from None
    out = est.to_dict()
    out.update(
        bandwidth_bps=link.bandwidth_bps, rtt_s=link.rtt_s, drop=drop, drop_unit=drop_unit.value
    )
    if as_json:
        _emit_json(out)
        return
    table = Table(
        title=f"{scheme.value}: {format_size(est.size_bytes)} write, "
        f"drop {drop:g}/{drop_unit.value}"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    exact = est.quantile_method == "analytic-cdf"
    for key in ("mean", "p50", "p99", "p999"):
        value, ci = out[f"{key}_s"], out.get(f"{key}_ci_s")
        if exact and key != "mean":
            table.add_row(key, format_time(value), "exact")
            continue
        table.add_row(key, *_quantile_cells(value, ci, est.samples))
    if not exact and est.analytic_p999_s is not None:
        # exact for the sampled model itself; for bursts/traces or the real protocol only
        # the i.i.d. model's value, for comparison
        if out.get("analytic_is_iid_equivalent"):
            label, note = "p999, analytic (i.i.d. losses, same rate)", "model"
        elif est.method == "des":
            label, note = "p999, analytic model", "model"
        else:
            label, note = "p999, exact (analytic)", "exact"
        table.add_row(label, format_time(est.analytic_p999_s), note)
    table.add_row("ideal", format_time(est.ideal_s), "")
    slow_p999 = est.slowdown_p999
    slow_text = "n/a" if slow_p999 is None else f"{slow_p999:.3f}"
    if not exact and est.p999_ci_s is not None and not _finite(est.p999_ci_s[1]):
        lo = est.p999_ci_s[0]
        slow_text = f">= {lo / est.ideal_s:.3f}" if _finite(lo) else "n/a"
    table.add_row("slowdown mean / p99.9", f"{est.slowdown_mean:.3f} / {slow_text}", "")
    fb = est.fallback_probability
    table.add_row("fallback probability", "-" if fb is None else f"{fb:.3g}", "")
    table.add_row("quantiles from", est.quantile_method, "")
    console.print(table)


def select(
    size: str = typer.Option(..., "--size", help="Write size, e.g. 8MiB."),
    drop: float = typer.Option(..., "--drop", help="Drop probability per --drop-unit."),
    bandwidth: str = BANDWIDTH,
    rtt: str | None = RTT,
    distance: str | None = DISTANCE,
    speed: float = SPEED,
    drop_unit: DropUnitName = DROP_UNIT,
    chunk: str = CHUNK,
    mtu: str = MTU,
    alpha: float = ALPHA,
    objective: ObjectiveName = typer.Option(ObjectiveName.mean, "--objective"),
    schemes: str = typer.Option("sr-rto,sr-nack,ec-mds,ec-xor", "--schemes"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    as_toml: bool = typer.Option(False, "--toml", help="Print a [reliability] config snippet."),
) -> None:
    """Pick the best scheme and parameters for a link and write size."""
    from sdr.simulator.select import select_scheme

    try:
        link = _link(bandwidth, rtt, distance, speed, mtu, chunk, alpha)
        choice = select_scheme(
            link,
            parse_size(size),
            drop,
            drop_unit=drop_unit.value,  # type: ignore[arg-type]
            objective=objective.value,  # type: ignore[arg-type]
            schemes=_split(schemes),
        )
    except SDRError as exc:
        raise _fail(exc) from None
    if as_toml:
        sys.stdout.write(choice.to_toml())
        return
    if as_json:
        _emit_json(choice.to_dict())
        return
    key = "p999_s" if objective == ObjectiveName.p999 else "mean_s"
    label = "p99.9" if objective == ObjectiveName.p999 else "mean"
    table = Table(
        title=f"candidates by {objective.value} (best first)",
        caption="p99.9 is computed for every row only with --objective p999"
        if objective == ObjectiveName.mean
        else None,
    )
    for col in ("scheme", "params", "mean", "p99.9", f"{label} vs best"):
        table.add_column(col, justify="left" if col in ("scheme", "params") else "right")
    best = choice.ranking[0]
    for i, row in enumerate(choice.ranking[:10]):
        p999 = row["p999_s"]
        if i == 0:
            vs_best = "best"
        elif row[key] == best[key]:
            vs_best = "tie"
            if key != "mean_s":
                vs_best += f" (mean {_relative_delta(row['mean_s'], best['mean_s'])})"
        else:
            vs_best = _relative_delta(row[key], best[key])
        table.add_row(
            row["scheme"],
            ", ".join(f"{k}={v}" for k, v in row["params"].items()),
            format_time(row["mean_s"]),
            "-" if p999 is None else format_time(p999),
            vs_best,
        )
    console.print(table)


def sweep(
    sizes: str = typer.Option(FIG9_SIZES, "--sizes", help="Comma list of write sizes."),
    drops: str = typer.Option(FIG9_DROPS, "--drops", help="Comma list of drop probabilities."),
    schemes: str = typer.Option("sr-rto,sr-nack,ec-mds,ec-xor", "--schemes"),
    bandwidths: str = typer.Option("400Gbit/s", "--bandwidths", help="Comma list of rates."),
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
        "sweep.csv", "--out", help="CSV file to write, rows as points finish ('-': stdout)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Keep the rows already in --out; evaluate only the rest."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --out."),
    plot: str | None = typer.Option(None, "--plot", help="PNG of Fig-9 style speedup heatmaps."),
) -> None:
    """Sweep sizes x drops x schemes (x distances, bandwidths) and write a CSV.

    Rows are appended to --out as the points finish, so Ctrl-C (exit 130) or a kill keeps
    every finished row; run the same command with --resume to evaluate only the rest.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from sdr.simulator.plots import plot_speedup_heatmaps
    from sdr.simulator.schemes import parse_ec
    from sdr.simulator.sweep import SweepInterrupted, make_grid, sweep_to_csv

    try:
        to_stdout = out == "-"
        _check_sweep_out(out, resume=resume, force=force)
        if samples is None:
            samples = 100 if method == MethodName.des else 1000
        if executor == ExecutorName.dask and not scheduler:
            raise ConfigError("--executor dask needs --scheduler tcp://HOST:8786")
        k, m = parse_ec(ec)
        points = make_grid(
            [parse_size(x) for x in _split(sizes)],
            [float(x) for x in _split(drops)],
            _split(schemes),
            bandwidths=[parse_rate(x) for x in _split(bandwidths)],
            rtts=[parse_time(x) for x in _split(rtts)] if rtts else None,
            distances=[parse_distance(x) for x in _split(distances)] if distances else None,
            propagation_speed_mps=speed,
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
                rows = sweep_to_csv(
                    points,
                    sys.stdout if to_stdout else out,
                    resume=resume,
                    executor=executor.value,
                    workers=workers,
                    scheduler=scheduler,
                    progress=lambda n: bar.advance(task, n),
                )
            except SweepInterrupted as stop:
                bar.stop()
                err_console.print(_interrupted_line(stop, to_stdout), markup=False, soft_wrap=True)
                raise typer.Exit(130) from None
        err_console.print(f"wrote {len(rows)} rows to {'stdout' if to_stdout else out}")
        if plot:
            first = rows[0]
            same_path = [
                r
                for r in rows
                if r["bandwidth_bps"] == first["bandwidth_bps"] and r["rtt_s"] == first["rtt_s"]
            ]
            plot_speedup_heatmaps(same_path, plot, title="speedup of EC over SR (>1: EC faster)")
            err_console.print(f"wrote {plot}")
    except SDRError as exc:
        raise _fail(exc) from None


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


def _interrupted_line(stop: Any, to_stdout: bool) -> str:
    """The one line printed on Ctrl-C: how far the sweep got and how to go on."""
    done = f"interrupted: {stop.finished} of {stop.total} points finished"
    if to_stdout:
        return f"{done} (written to stdout); rerun with --out FILE to be able to --resume"
    return f"{done} and saved in {stop.path}; run the same command with --resume to finish"


def allreduce_sim(
    dcs: int = typer.Option(..., "--dcs", help="Datacenters in the ring."),
    size: str = typer.Option(..., "--size", help="Allreduce buffer size, e.g. 1GiB."),
    drop: float = typer.Option(1e-3, "--drop", help="Drop probability per --drop-unit."),
    bandwidth: str = BANDWIDTH,
    rtt: str | None = RTT,
    distance: str | None = DISTANCE,
    speed: float = SPEED,
    drop_unit: DropUnitName = DROP_UNIT,
    chunk: str = CHUNK,
    mtu: str = MTU,
    alpha: float = ALPHA,
    ec: str = typer.Option("32,8", "--ec"),
    schemes: str = typer.Option("sr-rto,sr-nack,ec-mds,ec-xor", "--schemes"),
    samples: int = typer.Option(10_000, "--samples"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Monte Carlo ring allreduce over N datacenters, one row per scheme."""
    from sdr.simulator.collective import simulate_ring_allreduce
    from sdr.simulator.schemes import SchemeSpec, parse_ec

    try:
        link = _link(bandwidth, rtt, distance, speed, mtu, chunk, alpha)
        k, m = parse_ec(ec)
        results = [
            simulate_ring_allreduce(
                link,
                parse_size(size),
                dcs,
                drop,
                SchemeSpec(name, k=k, m=m),
                drop_unit=drop_unit.value,  # type: ignore[arg-type]
                samples=samples,
                seed=seed,
            ).to_dict()
            for name in _split(schemes)
        ]
    except SDRError as exc:
        raise _fail(exc) from None
    if as_json:
        _emit_json({"dcs": dcs, "size_bytes": parse_size(size), "drop": drop, "results": results})
        return
    table = Table(title=f"ring allreduce of {size} over {dcs} DCs, drop {drop:g}/{drop_unit.value}")
    for col in ("scheme", "mean", "p99.9", "p99.9 95% CI", "bound", "slowdown p99.9"):
        table.add_column(col, justify="right")
    for r in results:
        p999_text, ci_text = _quantile_cells(r["p999_s"], r["p999_ci_s"], samples)
        slowdown = f"{r['slowdown_p999']:.2f}"
        if p999_text.startswith(">= "):
            slowdown = f">= {r['p999_ci_s'][0] / r['ideal_s']:.2f}"
        table.add_row(
            r["scheme"],
            format_time(r["mean_s"]),
            p999_text,
            ci_text,
            format_time(r["lower_bound_s"]),
            slowdown,
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add the simulator commands to the ``sdr`` app."""
    app.command("sim")(sim)
    app.command("select")(select)
    app.command("sweep")(sweep)
    app.command("allreduce-sim")(allreduce_sim)
