"""``sdr send FILE --to HOST[:PORT]`` and ``sdr recv --out FILE``: file transfer over SDR."""

from __future__ import annotations

import json
import sys
import time

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from backends import oob
from sdr.errors import SDRError
from sdr.units import format_size
from sdr_cli.file_transfer import TransferOptions, send_file, serve_file

console = Console(stderr=True)


def _bar() -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def _json_progress(interval: float = 0.1):  # noqa: ANN202
    """A progress callback printing {"done", "total"} lines at most every ``interval`` s."""
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= interval or done >= total:
            last[0] = now
            sys.stdout.write(json.dumps({"done": done, "total": total}) + "\n")
            sys.stdout.flush()

    return report


def send(
    file: str = typer.Argument(..., help="file to send"),
    to: str = typer.Option(..., help="receiver HOST[:PORT] (its out-of-band TCP port)"),
    scheme: str = typer.Option("auto", help="sr-rto, sr-nack, ec-mds, ec-xor or auto"),
    config: str = typer.Option(None, help="TOML file with a [reliability] table"),
    rate: str = typer.Option("1Gbit/s", help="provisioned link rate (pacing)"),
    rtt: str = typer.Option("25ms", help="round-trip time of the link"),
    loss: float = typer.Option(1e-3, help="expected packet loss (for auto)"),
    message_size: str = typer.Option("8MiB", help="bytes per reliable message"),
    mtu: str = typer.Option("8192", help="payload bytes per packet"),
    chunk: str = typer.Option("64KiB", help="bitmap chunk size"),
    channels: int = typer.Option(2, help="channels (QPs) per generation"),
    secret: str = typer.Option(None, envvar="SDR_SECRET", help="shared secret (HMAC set-up)"),
    timeout: float = typer.Option(300.0, help="give up after this many seconds"),
    as_json: bool = typer.Option(False, "--json", help="JSON lines on stdout (progress, report)"),
) -> None:
    """Send FILE reliably over SDR (software RoCEv2 over UDP) and verify it end to end."""
    host, _, port = to.partition(":")
    opts = TransferOptions(
        scheme=scheme,
        config=config,
        rate=rate,
        rtt=rtt,
        loss=loss,
        message_size=message_size,
        mtu=mtu,
        chunk_size=chunk,
        channels=channels,
        secret=secret,
        timeout=timeout,
    )
    try:
        if as_json:
            report = send_file(file, host, int(port or oob.DEFAULT_PORT), opts, _json_progress())
            print(json.dumps({"report": report}), flush=True)
            return
        with _bar() as bar:
            task = bar.add_task(f"send {file}", total=None)
            report = send_file(
                file,
                host,
                int(port or oob.DEFAULT_PORT),
                opts,
                lambda done, total: bar.update(task, completed=done, total=total),
            )
    except (SDRError, OSError) as exc:
        console.print(f"[red]send failed:[/] {exc}")
        raise typer.Exit(1) from exc
    rate_bps = report["bytes"] * 8 / report["seconds"] if report["seconds"] else 0
    console.print(
        f"sent {format_size(report['bytes'])} in {report['seconds']:.3f} s "
        f"({rate_bps / 1e9:.3f} Gbit/s) with {report['scheme']}; verified SHA-256 "
        f"{report['sha256'][:16]}...; {format_size(report['wire_bytes'])} on the wire"
    )


def recv(
    out: str = typer.Option(..., help="where to write the received file"),
    bind: str = typer.Option("0.0.0.0", help="address to listen on"),
    port: int = typer.Option(oob.DEFAULT_PORT, help="out-of-band TCP port"),
    secret: str = typer.Option(None, envvar="SDR_SECRET", help="shared secret (HMAC set-up)"),
    timeout: float = typer.Option(300.0, help="give up after this many seconds"),
    as_json: bool = typer.Option(False, "--json", help="JSON lines on stdout (progress, report)"),
) -> None:
    """Receive one file sent with ``sdr send`` and verify it end to end."""
    try:
        if as_json:
            report = serve_file(
                out,
                bind,
                port,
                secret=secret,
                timeout=timeout,
                ready=lambda p: print(json.dumps({"listening": p}), flush=True),
                progress=_json_progress(),
            )
            print(json.dumps({"report": report}), flush=True)
            return
        with _bar() as bar:
            task = bar.add_task(f"recv {out}", total=None)
            report = serve_file(
                out,
                bind,
                port,
                secret=secret,
                timeout=timeout,
                ready=lambda p: console.print(f"listening on {bind}:{p}"),
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )  # noqa: E501
    except (SDRError, OSError) as exc:
        console.print(f"[red]receive failed:[/] {exc}")
        raise typer.Exit(1) from exc
    console.print(
        f"received {format_size(report['bytes'])} into {out} with {report['scheme']}; "
        f"SHA-256 verified {report['sha256'][:16]}..."
    )


def register(app: typer.Typer) -> None:
    app.command("send")(send)
    app.command("recv")(recv)
