"""``sdr sim``, ``sdr select``, ``sdr sweep`` and ``sdr allreduce-sim``: the simulator's face.

``sim`` and ``select`` live here; ``sweep`` in :mod:`sdr.cli.sim_sweep`, ``allreduce-sim``
in :mod:`sdr.cli.sim_allreduce`, the shared options in :mod:`sdr.cli.sim_options` and the
output helpers in :mod:`sdr.cli.sim_output`. Sizes, rates, times and distances accept the
units syntax of :mod:`sdr.units` ("64KiB", "400Gbit/s", "25ms", "3750km").
"""

from __future__ import annotations

import sys
from contextlib import nullcontext

import typer
from rich.table import Table

from sdr.cli.sim_allreduce import allreduce_sim
from sdr.cli.sim_options import (
    ALPHA,
    CHUNK,
    DISTANCE,
    DROP,
    DROP_UNIT,
    FIG9_DROPS,
    FIG9_SIZES,
    LOSS,
    MTU,
    RATE,
    RTT,
    SPEED,
    DropUnitName,
    ExecutorName,
    MethodName,
    ObjectiveName,
    SchemeName,
    link_from_options,
    probability_text,
    resolve_drop,
    split_list,
)
from sdr.cli.sim_output import (
    console,
    des_status,
    emit_json,
    err_console,
    fail,
    finite,
    quantile_cells,
    relative_delta,
)
from sdr.cli.sim_sweep import sweep
from sdr.errors import ConfigError, SDRError
from sdr.units import format_rate, format_size, format_time, parse_size

__all__ = [
    "FIG9_DROPS",
    "FIG9_SIZES",
    "DropUnitName",
    "ExecutorName",
    "MethodName",
    "ObjectiveName",
    "SchemeName",
    "allreduce_sim",
    "console",
    "err_console",
    "register",
    "select",
    "sim",
    "sweep",
]


def sim(
    scheme: SchemeName = typer.Option(..., "--scheme", help="Reliability scheme."),
    size: str = typer.Option(..., "--size", help="Write size, e.g. 8MiB."),
    drop: float | None = DROP,
    loss: float | None = LOSS,
    rate: str = RATE,
    rtt: str | None = RTT,
    distance: str | None = DISTANCE,
    speed: float = SPEED,
    drop_unit: DropUnitName = DROP_UNIT,
    chunk: str = CHUNK,
    mtu: str = MTU,
    alpha: float = ALPHA,
    ec: str = typer.Option("32,8", "--ec", help="EC data,parity chunks per submessage."),
    rto_rtts: float | None = typer.Option(
        None,
        "--rto-rtts",
        help="RTO in RTTs (default 1+alpha = 3; a loss costs sr-nack a NACK's RTT).",
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
    from sdr.simulator.bounds import check_samples, check_write_size
    from sdr.simulator.evaluate import evaluate, evaluate_loss_model
    from sdr.simulator.loss_options import loss_model
    from sdr.simulator.schemes import SchemeSpec, parse_ec

    try:
        drop, drop_unit = resolve_drop(drop, loss, drop_unit)
        if burst is not None or trace is not None:
            drop_unit = DropUnitName.packet  # bursts and traces are of packets
        link = link_from_options(rate, rtt, distance, speed, mtu, chunk, alpha)
        k, m = parse_ec(ec)
        spec = SchemeSpec(scheme.value, rto_rtts=rto_rtts, k=k, m=m)
        if samples is None:
            samples = 100 if method == MethodName.des else 10_000
        samples = check_samples(samples)
        check_write_size(parse_size(size))
        status = (
            des_status(samples, parse_size(size), link, scheme.value)
            if method == MethodName.des
            else nullcontext()
        )
        if burst is not None or trace is not None:
            if method == MethodName.analytic:
                raise ConfigError("--burst and --trace need --method montecarlo or des")
            model = loss_model(drop, burst=burst, trace=trace)
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
                    drop_unit=drop_unit.value,
                    method=method.value,
                    samples=samples,
                    seed=seed,
                )
    except (SDRError, OSError) as exc:
        raise fail(exc) from None
    out = est.to_dict()
    out.update(rate=link.rate, rtt=link.rtt, drop=drop, drop_unit=drop_unit.value)
    if as_json:
        emit_json(out)
        return
    table = Table(
        title=f"{scheme.value}: {format_size(est.size_bytes)} write, "
        f"drop {probability_text(drop, drop_unit.value)}"
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
        if key == "mean" and ci is not None and not all(finite(b) for b in ci):
            why = "one sample" if est.samples == 1 else f"all {est.samples} samples equal"
            table.add_row(key, format_time(value), f"cannot be computed: {why}")
            continue
        table.add_row(key, *quantile_cells(value, ci, est.samples))
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
    if not exact and est.p999_ci_s is not None and not finite(est.p999_ci_s[1]):
        lo = est.p999_ci_s[0]
        slow_text = f">= {lo / est.ideal_s:.3f}" if finite(lo) else "n/a"
    table.add_row("slowdown mean / p99.9", f"{est.slowdown_mean:.3f} / {slow_text}", "")
    fb = est.fallback_probability
    table.add_row("fallback probability", "-" if fb is None else f"{fb:.3g}", "")
    table.add_row("quantiles from", est.quantile_method, "")
    console.print(table)


def select(
    size: str = typer.Option(..., "--size", help="Write size, e.g. 8MiB."),
    drop: float | None = DROP,
    loss: float | None = LOSS,
    rate: str = RATE,
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
        drop, drop_unit = resolve_drop(drop, loss, drop_unit)
        link = link_from_options(rate, rtt, distance, speed, mtu, chunk, alpha)
        choice = select_scheme(
            link,
            parse_size(size),
            drop,
            drop_unit=drop_unit.value,
            objective=objective.value,
            schemes=split_list(schemes),
        )
    except SDRError as exc:
        raise fail(exc) from None
    if as_toml:
        sys.stdout.write(choice.to_toml())
        return
    if as_json:
        emit_json(choice.to_dict())
        return
    key = "p999_s" if objective == ObjectiveName.p999 else "mean_s"
    label = "p99.9" if objective == ObjectiveName.p999 else "mean"
    table = Table(
        title=f"candidates by {objective.value} (best first): {format_size(parse_size(size))}, "
        f"drop {probability_text(drop, drop_unit.value)}, {format_rate(link.rate)}, "
        f"RTT {format_time(link.rtt)}"
        + (f" ({distance} at {speed:g} m/s)" if distance and not rtt else ""),
        caption=f"decided by the {label} completion time (ties: the other one), drop per "
        f"{drop_unit.value}; the 10 best and the best of every scheme"
        + ("; p99.9 is computed for every row only with --objective p999" if
           objective == ObjectiveName.mean else ""),
    )  # fmt: skip
    for col in ("scheme", "params", "mean", "p99.9", f"{label} vs best"):
        table.add_column(col, justify="left" if col in ("scheme", "params") else "right")
    best = choice.ranking[0]
    firsts = {r["scheme"]: i for i, r in reversed(list(enumerate(choice.ranking)))}
    shown = sorted(set(range(min(10, len(choice.ranking)))) | set(firsts.values()))
    for i in shown:
        row = choice.ranking[i]
        p999 = row["p999_s"]
        if i == 0:
            vs_best = "best"
        elif row[key] == best[key]:
            vs_best = "tie"
            if key != "mean_s":
                vs_best += f" (mean {relative_delta(row['mean_s'], best['mean_s'])})"
        else:
            vs_best = relative_delta(row[key], best[key])
        table.add_row(
            row["scheme"],
            ", ".join(f"{k}={v}" for k, v in row["params"].items()),
            format_time(row["mean_s"]),
            "-" if p999 is None else format_time(p999),
            vs_best,
        )
    console.print(table)
    if choice.refused:  # the user sees what was not ranked (the model said why)
        sys.stderr.write(
            f"note: {len(choice.refused)} candidates left out, the model refuses them; "
            f"first: {choice.refused[0]}\n"
        )


def register(app: typer.Typer) -> None:
    """Add the simulator commands to the ``sdr`` app."""
    app.command("sim")(sim)
    app.command("select")(select)
    app.command("sweep")(sweep)
    app.command("allreduce-sim")(allreduce_sim)
