"""``sdr send FILE --to HOST[:PORT]`` and ``sdr recv --out FILE``: file transfer over SDR.

Errors (a bad value, an unreachable or vanished peer, a failed transfer) propagate to
``sdr.cli.main``, which prints them as one line ``error: ...`` and exits with status 2.
Everything is validated before the network is touched.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TimeRemainingColumn,
)

from sdr.backends import oob
from sdr.cli.defaults import DEFAULT_MTU
from sdr.cli.file_transfer import TransferOptions, send_file, serve_file, validate_send
from sdr.cli.progress_columns import BinarySpeed, WindowSpeed
from sdr.cli.transfer_digest import DEFAULT_DIGEST, DIGESTS
from sdr.cli.transfer_receive import DEFAULT_MAX_SIZE, check_max_size
from sdr.errors import ConfigError
from sdr.units import format_size, parse_seconds

console = Console(stderr=True)


def _bar() -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(binary_units=True),
        BinarySpeed(),
        TimeRemainingColumn(),
        console=console,
    )


class _Output:
    """Where a transfer reports: JSON lines on stdout (``--json``) or a bar on stderr.

    One path for both: :meth:`progress` (verified bytes), :meth:`notice` (an event such as
    the listening port: a JSON object, or a line of text) and :meth:`report` (the final
    report: ``{"report": ...}``, or a one-line summary).
    """

    def __init__(self, as_json: bool, bar: Progress | None, task: Any) -> None:
        self.as_json = as_json
        self._bar, self._task = bar, task
        self._speed = WindowSpeed()
        self._last: int | None = None

    def progress(self, done: int, total: int) -> None:
        """Verified bytes so far: the bar moves (and its speed) with every verified
        message; JSON gets one line each time the verified bytes change, with
        ``bytes_per_s`` over the last :data:`SPEED_WINDOW_S` s."""
        speed = self._speed.add(time.monotonic(), done)
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total, speed=speed)
            return
        if done != self._last:
            self._last = done
            self._json({"done": done, "total": total, "bytes_per_s": speed})

    def notice(self, event: dict[str, Any], text: str) -> None:
        """``event`` as a JSON line, or ``text`` on the console."""
        if self.as_json:
            self._json(event)
        else:
            console.print(text, markup=False)

    def report(self, report: dict[str, Any], summary: str) -> None:
        """The final report as a JSON line, or ``summary`` on the console."""
        if self.as_json:
            self._json({"report": report})
        else:
            console.print(summary, markup=False, highlight=False)

    @staticmethod
    def _json(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


@contextmanager
def _output(as_json: bool, description: str) -> Iterator[_Output]:
    """An :class:`_Output`; the bar (without ``--json``) is shown while the block runs."""
    if as_json:
        yield _Output(True, None, None)
        return
    with _bar() as bar:
        yield _Output(False, bar, bar.add_task(description, total=None, speed=None))


def _host_port(text: str, flag: str, default: int | None) -> tuple[str, int | None]:
    """HOST[:PORT] as (host, port), ``default`` without a port; ConfigError naming ``flag``
    when it does not parse."""
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not host:
        raise ConfigError(f"{flag} must be HOST[:PORT], got {text!r}")
    if not port:
        return host, default
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{flag} port must be in [1, 65535], got {port!r}")
    return host, int(port)


def _peer(to: str) -> tuple[str, int]:
    host, port = _host_port(to, "--to", oob.DEFAULT_PORT)
    return host, int(port)  # type: ignore[arg-type]


def _listen(bind: str, port: int | None) -> tuple[str, int]:
    """``--bind HOST[:PORT]`` and ``--port``: one address; both ports given must agree."""
    host, bound = _host_port(bind, "--bind", None)
    if port is not None and not 0 <= port < 65536:
        raise ConfigError(f"--port must be in [0, 65535], got {port}")
    if bound is not None and port is not None and bound != port:
        raise ConfigError(f"--bind {bind} and --port {port} name two ports; give one")
    chosen = bound if bound is not None else port
    return host, oob.DEFAULT_PORT if chosen is None else chosen


def _rate(nbytes: int, seconds: float) -> str:
    if seconds <= 0:
        return "?"
    per_s = nbytes / seconds
    return f"{format_size(per_s)}/s, {per_s * 8 / 1e9:.3f} Gbit/s"


def send(
    file: str = typer.Argument(..., help="file to send"),
    to: str = typer.Option(..., help="receiver HOST[:PORT] (its out-of-band TCP port)"),
    scheme: str = typer.Option(
        None, help="sr-rto, sr-nack, ec-mds, ec-xor or auto [default: file's, else auto]"
    ),
    config: str = typer.Option(
        None, help="TOML file with a [reliability] table; flags given override it"
    ),
    rate: str = typer.Option(
        None, help="provisioned link rate (pacing) [default: file's link_rate, else 1Gbit/s]"
    ),
    rtt: str = typer.Option(None, help="round-trip time of the link [default: file's, else 25ms]"),
    congestion: str = typer.Option(
        None,
        help="congestion controller: fixed (pace at --rate), delay, bbr or auto "
        "[default: file's, else fixed]",
    ),
    loss: float = typer.Option(
        None,
        help="expected packet loss auto picks the scheme for "
        "[default: file's [reliability.params] drop, else 1e-3]",
    ),
    message_size: str = typer.Option(
        "auto",
        help="bytes per reliable message (the progress bar moves by one); auto: 4 x --rate "
        "x --rtt rounded up to a power of two, 1MiB to 64MiB (smaller messages starve a "
        "long lossy link)",
    ),
    mtu: str = typer.Option(str(DEFAULT_MTU), help="payload bytes per packet"),
    chunk: str = typer.Option(
        None,
        help="bitmap chunk size [default: file's chunk_size, else from --loss: "
        "the largest power-of-two number of packets, up to 64KiB, whose repairs resend at "
        "most 1% beyond what was lost]",
    ),
    channels: int = typer.Option(2, help="channels (QPs) per generation"),
    paths: int = typer.Option(
        1, help="UDP data ports per side; > 1: multipath (each channel its own port)"
    ),
    secret: str = typer.Option(None, envvar="SDR_SECRET", help="shared secret (HMAC set-up)"),
    timeout: str = typer.Option(
        "300s",
        metavar="TIME",
        help="how long to wait for the receiver, for the set-up, and then without progress in "
        "the transfer (a transfer that moves is never cut short); 300, 300s, 5min",
    ),
    relay: str = typer.Option(
        None, help="map file of 'sdr emulate relay --map': send the UDP data through it"
    ),
    digest: str = typer.Option(
        DEFAULT_DIGEST,
        help=f"end-to-end file digest: {', '.join(DIGESTS)} (none: the transport's "
        "per-chunk CRC-32s only)",
    ),
    tail: bool = typer.Option(
        True,
        help="when auto picks Selective Repeat, send the file's last bandwidth-delay product "
        "as a message of its own under erasure coding where that saves more than it costs "
        "(a loss there then costs no round trip)",
    ),
    as_json: bool = typer.Option(False, "--json", help="JSON lines on stdout (progress, report)"),
) -> None:
    """Send FILE reliably over SDR (software RoCEv2 over UDP) and verify it end to end."""
    host, port = _peer(to)
    wait = parse_seconds(timeout, field="--timeout")
    opts = TransferOptions(
        scheme=scheme,
        config=config,
        rate=rate,
        rtt=rtt,
        congestion=congestion,
        loss=loss,
        message_size=message_size,
        mtu=mtu,
        chunk_size=chunk,
        channels=channels,
        paths=paths,
        secret=secret,
        timeout=wait,
        relay=relay,
        digest=digest,
        tail=tail,
    )
    validate_send(file, opts)  # before the progress bar and the network

    def waiting() -> None:
        console.print(
            f"waiting for a receiver at {host}:{port} (up to {wait:g} s)...",
            markup=False,
            highlight=False,
        )

    with _output(as_json, f"send {file}") as output:
        report = send_file(file, host, port, opts, output.progress, waiting)
    output.report(
        report,
        f"sent {format_size(report['bytes'])} in {report['seconds']:.3f} s "
        f"({_rate(report['bytes'], report['seconds'])}) with {_scheme(report)}; "
        f"{_verified(report)}; "
        f"{format_size(report['wire_bytes'])} on the wire",
    )


def recv(
    out: str = typer.Option(..., help="where to write the received file"),
    bind: str = typer.Option("0.0.0.0", help="address to listen on, HOST[:PORT]"),
    port: int = typer.Option(
        None, help=f"out-of-band TCP port (or --bind HOST:PORT) [default: {oob.DEFAULT_PORT}]"
    ),
    secret: str = typer.Option(None, envvar="SDR_SECRET", help="shared secret (HMAC set-up)"),
    timeout: str = typer.Option(
        "300s",
        metavar="TIME",
        help="how long to wait for a sender, for the set-up, and then without progress in "
        "the transfer (a transfer that moves is never cut short); 300, 300s, 5min",
    ),
    keep_partial: bool = typer.Option(
        False, help="on failure keep what arrived in OUT.partial (default: remove it)"
    ),
    relay: str = typer.Option(
        None, help="map file of 'sdr emulate relay --map': receive the UDP data through it"
    ),
    data_port: int = typer.Option(
        0,
        help="UDP data ports PORT..PORT+paths-1 (the sender's --paths) [default: free ones]",
        show_default=False,
    ),
    max_size: str = typer.Option(
        DEFAULT_MAX_SIZE, help="largest file to accept (a larger one is refused at set-up)"
    ),
    as_json: bool = typer.Option(False, "--json", help="JSON lines on stdout (progress, report)"),
) -> None:
    """Receive one file sent with ``sdr send`` and verify it end to end.

    The data lands in OUT.partial (created new: if it exists, nothing is received),
    renamed to OUT only after its digest (the sender's --digest) matched; the
    reliability settings (scheme, rtt, chunk size ...) come from the sender.
    """
    bind, port = _listen(bind, port)
    wait = parse_seconds(timeout, field="--timeout")
    if not 0 <= data_port < 65536:
        raise ConfigError(f"--data-port must be in [0, 65535], got {data_port}")
    check_max_size(max_size)  # before the progress bar and the network
    with _output(as_json, f"recv {out}") as output:
        report = serve_file(
            out,
            bind,
            port,
            secret=secret,
            timeout=wait,
            ready=lambda p: output.notice({"listening": p}, f"listening on {bind}:{p}"),
            progress=output.progress,
            keep_partial=keep_partial,
            relay=relay,
            data_port=data_port,
            max_size=max_size,
        )
    output.report(
        report,
        f"received {format_size(report['bytes'])} into {out} with {_scheme(report)}; "
        f"{_verified(report)}",
    )


def _scheme(report: dict[str, Any]) -> str:
    """The scheme, and the tail's code when the file had one, for the one-line report."""
    tail = report.get("tail")
    if not tail:
        return str(report["scheme"])
    code = f"{tail['scheme']}({tail['k']},{tail['m']})"
    return f"{report['scheme']} (the last {format_size(tail['bytes'])} {code})"


def _verified(report: dict[str, Any]) -> str:
    """How the file was checked end to end, for the one-line report."""
    if report["digest"] is None:
        return "verified by per-chunk CRC-32 (--digest none)"
    return f"verified {report['digest_algorithm']} {report['digest'][:16]}..."


def register(app: typer.Typer) -> None:
    app.command("send")(send)
    app.command("recv")(recv)
