"""Options shared by the simulator commands: names, units and the link they describe.

Sizes, rates, times and distances accept the units syntax of :mod:`sdr.units`
("64KiB", "400Gbit/s", "25ms", "3750km").
"""

from __future__ import annotations

from enum import StrEnum

import typer

from sdr.cli.defaults import DEFAULT_MTU, DEFAULT_RATE
from sdr.errors import ConfigError
from sdr.simulator.link import PAPER_PROPAGATION_SPEED, Link
from sdr.units import format_size, parse_distance, parse_rate, parse_size, parse_time

FIG9_SIZES = ",".join(format_size(2**e) for e in range(17, 34))  # 128KiB .. 8GiB
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


def link_from_options(
    rate: str,
    rtt: str | None,
    distance: str | None,
    speed: float,
    mtu: str,
    chunk: str,
    alpha: float,
) -> Link:
    if rtt is not None and distance is not None:
        raise ConfigError("give either --rtt or --distance, not both")
    mtu_bytes, chunk_bytes = parse_size(mtu), parse_size(chunk)
    if rtt is not None:
        return Link(
            parse_rate(rate),
            parse_time(rtt),
            mtu=mtu_bytes,
            chunk_size=chunk_bytes,
            alpha=alpha,
        )
    return Link.from_distance(
        parse_distance(distance or "3750km"),
        parse_rate(rate),
        propagation_speed=speed,
        mtu=mtu_bytes,
        chunk_size=chunk_bytes,
        alpha=alpha,
    )


def resolve_drop(
    drop: float | None, loss: float | None, drop_unit: DropUnitName
) -> tuple[float, DropUnitName]:
    """The probability and its unit from ``--drop P [--drop-unit U]`` or ``--loss P``.

    ``--loss`` is what the network commands (send, demo, emulate) call it: a probability
    per packet, so ``--loss P`` is ``--drop P --drop-unit packet``.
    """
    if drop is not None and loss is not None:
        raise ConfigError("give either --drop (per --drop-unit) or --loss (per packet), not both")
    if loss is not None:
        return loss, DropUnitName.packet
    if drop is None:
        raise ConfigError("give --drop P (per chunk, or per --drop-unit) or --loss P (per packet)")
    return drop, drop_unit


def probability_text(p: float, unit: str) -> str:
    """``1e-3 per chunk``: a probability with what it is per."""
    from sdr.simulator.plots import format_probability

    return f"{format_probability(p)} per {unit}"


def split_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


# Shared option declarations.
RATE = typer.Option(
    DEFAULT_RATE,
    "--rate",
    help="Line rate of the link, e.g. 10Gbit/s or 10G (as sdr send's --rate, and its "
    "default); the paper's figures: 400Gbit/s.",
)
RTT = typer.Option(None, "--rtt", help="Round-trip time, e.g. 25ms (or give --distance).")
DISTANCE = typer.Option(
    None,
    "--distance",
    help="Path length, e.g. 3750km (default); the RTT is 2 x distance / --speed "
    "(3000km at the default speed: 20ms).",
)
SPEED = typer.Option(
    PAPER_PROPAGATION_SPEED,
    "--speed",
    help="Propagation speed in m/s: the paper's 3e8 (light in vacuum); light in fibre "
    "is about 2e8 (3000km: 30ms).",
)
MTU = typer.Option(str(DEFAULT_MTU), "--mtu", help="Packet payload size.")
CHUNK = typer.Option("64KiB", "--chunk", help="Chunk size (a multiple of the MTU).")
ALPHA = typer.Option(2.0, "--alpha", help="Switch buffering in RTTs (RTO = (1 + alpha) RTT).")
DROP_UNIT = typer.Option(DropUnitName.chunk, "--drop-unit", help="What --drop is per.")
DROP = typer.Option(
    None, "--drop", help="Drop probability per --drop-unit (default: per chunk), e.g. 1e-3."
)
LOSS = typer.Option(
    None, "--loss", help="Loss probability per packet, as in send/demo/emulate (instead of --drop)."
)
