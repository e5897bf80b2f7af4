"""``sdr write-bw``: a write-bandwidth test in the style of perftest's ib_write_bw.

Run ``sdr write-bw`` on the server and ``sdr write-bw SERVER`` on the client. The client
connects to the server's TCP port to exchange QP info (as perftest does); data then goes
over UDP as RoCEv2 packets. Both sides print perftest's columns; with ``-i`` also one
bandwidth line per interval, as iperf3 does.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sdr.backends.udp.roce import ROCE_PORT
from sdr.backends.udp.write_bw import (
    DEFAULT_BIND,
    DEFAULT_TCP_PORT,
    PEAK_INTERVAL,
    WriteBwParams,
    WriteBwResult,
    run_client,
    run_server,
)
from sdr.cli.defaults import DEFAULT_MTU
from sdr.cli.transfer_relay import load_side
from sdr.units import parse_rate, parse_seconds, parse_size

console = Console(width=max(Console().width, 110))
DEFAULT_TIMEOUT = "10s"


def _bw(bits: float, gbits: bool) -> str:
    return f"{bits / 1e9:.2f}" if gbits else f"{bits / 8 / 2**20:.2f}"


def _interval_printer(role: str, gbits: bool) -> Any:
    """A callback printing one iperf3-style line per interval row."""
    unit = "Gb/sec" if gbits else "MB/sec"

    def show(row: dict) -> None:
        console.print(
            f"[{role:6}] {row['start_s']:6.2f}-{row['end_s']:6.2f} sec  "
            f"{row['bytes'] / 2**20:10.2f} MBytes  {_bw(row['bw_bps'], gbits):>9} {unit}  "
            f"{int(row['messages']):7d} msgs",
            markup=False,
            highlight=False,
        )

    return show


def _table(rows: list[WriteBwResult], gbits: bool) -> Table:
    unit = "Gb/sec" if gbits else "MB/sec"
    table = Table(box=None, header_style="bold")
    peak = f"BW peak[{unit}]"
    for name in ("#bytes", "#iterations", peak, f"BW average[{unit}]"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("MsgRate[Mpps]", justify="right", no_wrap=True)
    table.add_column("side", justify="left", no_wrap=True)
    for r in rows:
        table.add_row(
            str(r.size),
            str(r.iterations),
            _bw(r.bw_peak_bps, gbits),
            _bw(r.bw_average_bps, gbits),
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
    console.print(
        f"BW peak: the best {PEAK_INTERVAL * 1000:g} ms interval (the average for shorter runs)",
        highlight=False,
    )
    lost = server.iterations - server.completed
    c = server.counters
    console.print(
        f"receiver: {server.completed} messages complete, {lost} incomplete; packets placed "
        f"{c.get('packets_placed', 0)}, sent {client.counters.get('wire_packets_sent', 0)}; "
        f"dropped: bad ICRC {c.get('bad_icrc', 0)}, bad rkey {c.get('bad_rkey', 0)}, "
        f"late {c.get('late', 0)}, out of range {c.get('out_of_range', 0)}"
        + (f"; payload mismatches {server.mismatched}" if server.mismatched else "")
    )
    if client.cpu_s_per_gib is not None and server.cpu_s_per_gib is not None:
        console.print(
            f"CPU per GiB (first to last completion, all threads): client "
            f"{client.cpu_s_per_gib:.2f} s, server {server.cpu_s_per_gib:.2f} s",
            highlight=False,
        )


def write_bw(
    server: str | None = typer.Argument(None, help="server address (omit to be the server)"),
    size: str = typer.Option("64KiB", "--size", "-s", help="message size"),
    iterations: int = typer.Option(1000, "--iters", "-n", help="messages to send"),
    channels: int = typer.Option(
        1, "--channels", "-q", help="channels (QPNs) per generation (perftest's -q)"
    ),
    mtu: str = typer.Option(str(DEFAULT_MTU), "--mtu", "-m", help="payload bytes per packet"),
    chunk: str = typer.Option("64KiB", "--chunk", help="bitmap chunk size"),
    inflight: int = typer.Option(16, "--inflight", "-t", help="messages in flight (tx depth)"),
    rate_limit: str | None = typer.Option(
        None,
        "--rate",
        metavar="RATE",
        help="sender pacing, e.g. 10Gbit/s or 10G (default: unpaced)",
    ),
    bind: str | None = typer.Option(
        None,
        "--bind",
        metavar="ADDRESS",
        help=f"local IPv4 address. Server: TCP listens there (default {DEFAULT_BIND}, every "
        "interface) and UDP data binds it (with 0.0.0.0: the address the client connected "
        "to); use 127.0.0.1 for loopback only. Client: UDP source (default: the route's)",
    ),
    udp_port: int | None = typer.Option(
        None,
        "--data-port",
        help=f"UDP data port (server default {ROCE_PORT}, client any; as sdr recv --data-port)",
    ),
    tcp_port: int = typer.Option(
        DEFAULT_TCP_PORT, "--port", "-p", help="TCP port of the out-of-band exchange"
    ),
    timeout: str | None = typer.Option(
        None,
        "--timeout",
        metavar="TIME",
        help=f"give up after this long idle (default {DEFAULT_TIMEOUT}). Server: also the "
        "longest wait for each message of a connected client (default: the client's "
        "value; the wait for a client to connect is unbounded)",
    ),
    interval: str | None = typer.Option(
        None,
        "--interval",
        metavar="SECONDS",
        help="print the bandwidth of every interval of this length, as iperf3 (e.g. 1 or "
        "500ms); with --json the rows go under 'intervals'",
    ),
    verify: bool = typer.Option(False, "--verify", help="receiver checks every payload byte"),
    scheme: str | None = typer.Option(
        None,
        "--scheme",
        metavar="SCHEME",
        help="move every message reliably with this scheme (sr-rto, sr-nack, ec-mds, "
        "ec-xor): a message counts once it completed verified. Default: one-shot writes, "
        "as perftest's",
    ),
    rtt: str = typer.Option("25ms", "--rtt", help="the link's round trip, for --scheme's timers"),
    relay: str | None = typer.Option(
        None,
        "--relay",
        metavar="FILE",
        help="map file of 'sdr emulate relay --map': the UDP traffic crosses the relay "
        "(server: side b, client: side a; the TCP exchange stays direct)",
    ),
    gbits: bool = typer.Option(False, "--report-gbits", help="report Gb/sec, not MB/sec"),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="print one JSON object instead; rates in bits/s ('bw_peak_bps', 'bw_average_bps')",
    ),
) -> None:
    """perftest-style write bandwidth over the UDP (software RoCEv2) backend.

    Run it without SERVER on one host (the server), then with the server's address on the
    other. Errors (port in use, server unreachable) print one line and exit with 2.
    """
    period = parse_seconds(interval, field="--interval") if interval is not None else None
    wait = parse_seconds(timeout or DEFAULT_TIMEOUT, field="--timeout")
    side = load_side(relay, "a" if server else "b", wait) if relay else None
    # through the relay: its side's transport, and the peer's address rewritten to it
    transport = side.transport() if side is not None else None
    rewrite_peer = None if side is None else lambda info: side.rewrite(info, None)
    if server is None:
        host = bind or DEFAULT_BIND
        udp = ROCE_PORT if udp_port is None else udp_port
        ready = None
        if not as_json:

            def ready(port: int) -> None:
                where = "the address the client reaches" if host == DEFAULT_BIND else host
                console.print(
                    f"write-bw server: TCP {host}:{port} for QP exchange, "
                    f"UDP port {udp} on {where} for data",
                    highlight=False,
                )

        mine, peer = run_server(
            host,
            udp,
            tcp_port,
            ready,
            timeout=parse_seconds(timeout, field="--timeout") if timeout is not None else None,
            interval=period,
            on_interval=None if as_json else _interval_printer("server", gbits),
            transport=transport,
            rewrite_peer=rewrite_peer,
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
            timeout=parse_seconds(timeout or DEFAULT_TIMEOUT, field="--timeout"),
            scheme=scheme,
            rtt=parse_seconds(rtt, field="--rtt"),
        )
        mine, peer = run_client(
            server,
            params,
            tcp_port,
            bind,
            udp_port or 0,
            interval=period,
            on_interval=None if as_json else _interval_printer("client", gbits),
            transport=transport,
            rewrite_peer=rewrite_peer,
        )
    _report(mine, peer, gbits, as_json)


def register(app: Any) -> None:
    """Add ``sdr write-bw`` to the CLI."""
    app.command("write-bw")(write_bw)
