"""``sdr allreduce-sim``: Monte Carlo ring allreduce over N datacenters."""

from __future__ import annotations

import typer
from rich.table import Table

from sdr.cli.sim_options import (
    ALPHA,
    CHUNK,
    DISTANCE,
    DROP_UNIT,
    MTU,
    RATE,
    RTT,
    SPEED,
    DropUnitName,
    link_from_options,
    split_list,
)
from sdr.cli.sim_output import console, emit_json, fail, quantile_cells
from sdr.errors import SDRError
from sdr.units import format_time, parse_size


def allreduce_sim(
    dcs: int = typer.Option(..., "--dcs", help="Datacenters in the ring."),
    size: str = typer.Option(..., "--size", help="Allreduce buffer size, e.g. 1GiB."),
    drop: float = typer.Option(1e-3, "--drop", help="Drop probability per --drop-unit."),
    rate: str = RATE,
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
        link = link_from_options(rate, rtt, distance, speed, mtu, chunk, alpha)
        k, m = parse_ec(ec)
        runs = [
            simulate_ring_allreduce(
                link,
                parse_size(size),
                dcs,
                drop,
                SchemeSpec(name, k=k, m=m),
                drop_unit=drop_unit.value,
                samples=samples,
                seed=seed,
            )
            for name in split_list(schemes)
        ]
    except SDRError as exc:
        raise fail(exc) from None
    if as_json:
        results = [r.to_dict() for r in runs]
        emit_json({"dcs": dcs, "size_bytes": parse_size(size), "drop": drop, "results": results})
        return
    table = Table(title=f"ring allreduce of {size} over {dcs} DCs, drop {drop:g}/{drop_unit.value}")
    for col in ("scheme", "mean", "p99.9", "p99.9 95% CI", "bound", "slowdown p99.9"):
        table.add_column(col, justify="right")
    for r in runs:
        p999, p999_ci = r.summary.quantiles["p999"], r.summary.quantile_cis["p999"]
        p999_text, ci_text = quantile_cells(p999, p999_ci, samples)
        slowdown = f"{p999 / r.ideal_s:.2f}"
        if p999_text.startswith(">= "):
            slowdown = f">= {p999_ci[0] / r.ideal_s:.2f}"
        table.add_row(
            r.scheme,
            format_time(r.summary.mean),
            p999_text,
            ci_text,
            format_time(r.lower_bound_s),
            slowdown,
        )
    console.print(table)
