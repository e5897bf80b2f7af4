"""``sdr write-bw``: a write-bandwidth test in the style of perftest's ib_write_bw.

Run ``sdr write-bw`` on the server and ``sdr write-bw SERVER`` on the client. The client
connects to the server's TCP port to exchange QP info (as perftest does); data then goes
over UDP as RoCEv2 packets. Both sides print perftest's columns.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from backends.udp.roce import ROCE_PORT
from backends.udp.write_bw import (
    DEFAULT_TCP_PORT,
    WriteBwParams,
    WriteBwResult,
    run_client,
    run_server,
)
from sdr.errors import SDRError
from sdr.units import parse_rate, parse_size, parse_time

console = Console(width=max(Console().width, 110))


def _table(rows: list[WriteBwResult], gbits: bool) -> Table:
    unit = "Gb/sec" if gbits else "MB/sec"
    table = Table(box=None, header_style="bold")
    for name in ("#bytes", "#iterations", f"BW peak[{unit}]", f"BW average[{unit}]"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("MsgRate[Mpps]", justify="right", no_wrap=True)
    table.add_column("side", justify="left", no_wrap=True)
    for r in rows:

        def bw(bits: float) -> str:
            return f"{bits / 1e9:.2f}" if gbits else f"{bits / 8 / 2**20:.2f}"

        table.add_row(
            str(r.size),
            str(r.iterations),
            bw(r.bw_peak),
            bw(r.bw_average),
            f"{r.msg_rate / 1e6:.6f}",
            f"{r.role} ({r.completed}/{r.iterations} msgs)",
        )
    return table


def _report(mine: WriteBwResult, peer: WriteBwResult, gbits: bool, as_json: bool) -> None:
    server = mine if mine.role == "server" else peer
    client = peer if server is mine else mine
    if as_json:
        print(json.dumps({"server": server.as_dict(), "client": client.as_dict()}))
        return
    console.print(_table([client, server], gbits))
    lost = server.iterations - server.completed
    c = server.counters
    console.print(
        f"receiver: {server.completed} messages complete, {lost} incomplete; packets placed "
        f"{c.get('packets_placed', 0)}, sent {client.counters.get('wire_packets_sent', 0)}; "
        f"dropped: bad ICRC {c.get('bad_icrc', 0)}, bad rkey {c.get('bad_rkey', 0)}, "
        f"late {c.get('late', 0)}, out of range {c.get('out_of_range', 0)}"
        + (f"; payload mismatches {server.mismatched}" if server.mismatched else "")
    )


def write_bw(
    server: str | None = typer.Argument(None, help="server address (omit to be the server)"),
    size: str = typer.Option("64KiB", "--size", "-s", help="message size"),
    iterations: int = typer.Option(1000, "--iters", "-n", help="messages to send"),
    channels: int = typer.Option(1, "--channels", "-c", help="channels (QPNs) per generation"),
    mtu: str = typer.Option("4KiB", "--mtu", "-m", help="payload bytes per packet"),
    chunk: str = typer.Option("64KiB", "--chunk-size", help="bitmap chunk size"),
    inflight: int = typer.Option(16, "--inflight", "-t", help="messages in flight (tx depth)"),
    rate_limit: str | None = typer.Option(
        None, "--rate-limit", "-r", help="sender pacing, e.g. 10Gbit/s (default: unpaced)"
    ),
    bind: str | None = typer.Option(
        None, "--bind", help="local IPv4 address for UDP (server default 127.0.0.1)"
    ),
    udp_port: int | None = typer.Option(
        None, "--udp-port", help=f"UDP data port (server default {ROCE_PORT}, client any)"
    ),
    tcp_port: int = typer.Option(
        DEFAULT_TCP_PORT, "--port", "-p", help="TCP port of the out-of-band exchange"
    ),
    timeout: str = typer.Option("10s", "--timeout", help="give up after this long idle"),
    verify: bool = typer.Option(False, "--verify", help="receiver checks every payload byte"),
    gbits: bool = typer.Option(False, "--report-gbits", "-R", help="report Gb/sec, not MB/sec"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead"),
) -> None:
    """perftest-style write bandwidth over the UDP (software RoCEv2) backend."""
    try:
        if server is None:
            host = bind or "127.0.0.1"
            if not as_json:

                def ready(port: int) -> None:
                    console.print(
                        f"write-bw server: TCP {host}:{port} for QP exchange, "
                        f"UDP {host}:{ROCE_PORT if udp_port is None else udp_port} for data"
                    )

            else:
                ready = None  # type: ignore[assignment]
            mine, peer = run_server(
                host, ROCE_PORT if udp_port is None else udp_port, tcp_port, ready
            )
        else:
            params = WriteBwParams(
                size=parse_size(size),
                iterations=iterations,
                channels=channels,
                mtu=parse_size(mtu),
                chunk_size=parse_size(chunk),
                inflight=inflight,
                rate_limit=parse_rate(rate_limit) if rate_limit else None,
                verify=verify,
                timeout=parse_time(timeout),
            )
            mine, peer = run_client(server, params, tcp_port, bind, udp_port or 0)
    except SDRError as exc:
        console.print(f"[red]write-bw: {exc}[/]")
        raise typer.Exit(1) from exc
    _report(mine, peer, gbits, as_json)


def register(app: Any) -> None:
    """Add ``sdr write-bw`` to the CLI."""
    app.command("write-bw")(write_bw)
