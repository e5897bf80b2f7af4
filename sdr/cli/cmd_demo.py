"""``sdr demo``: the main job. A real reliable transfer between two processes across an
emulated long-haul link, with every scheme and ``auto``, against the simulator's
prediction and the lossless ideal. Each scheme runs ``--repeat`` times, each run on a
fresh link with the same seed (the same loss draws), so the spread shown is the host's,
not the link's; a run whose emulator delivered packets late enough to move its time is
flagged. Needs root (network namespaces); without it, the
in-process bitmap demo (``sdr bitmap-demo``) runs instead, saying so and why on stderr,
or with ``--no-fallback`` the command fails (exit 2)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress

from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces
from sdr.cli.defaults import DEFAULT_RATE
from sdr.cli.emulator_report import LATE_FRACTION, late_run, lateness, print_report, run_drops
from sdr.cli.progress_columns import BinarySpeed, WindowSpeed
from sdr.cli.wan_transfer import make_payload, transfer_over_link
from sdr.errors import TransportError
from sdr.simulator.link import Link
from sdr.units import format_size, parse_rate, parse_size, parse_time

console = Console()
err_console = Console(stderr=True)
SCHEMES = "sr-rto,sr-nack,ec-mds,ec-xor,auto"


def demo(
    size: str = typer.Option("64MiB", help="bytes to transfer (one reliable message)"),
    rate: str = typer.Option(DEFAULT_RATE, help="link rate"),
    rtt: str = typer.Option("25ms", help="round-trip time"),
    loss: float = typer.Option(1e-3, help="packet loss probability on the link"),
    schemes: str = typer.Option(SCHEMES, help="comma-separated schemes to run"),
    mtu: int = typer.Option(
        8192, help="SDR payload bytes per packet (a jumbo-frame packet: fits the 9000-byte link)"
    ),
    tun_mtu: int = typer.Option(9000, help="MTU of the emulated link (jumbo frames)"),
    chunk: str = typer.Option("64KiB", help="bitmap chunk size"),
    out: str = typer.Option("out/demo", help="where the table (JSON) and chart (PNG) go"),
    seed: int = typer.Option(1, help="seed of the link's loss process"),
    repeat: int = typer.Option(
        3, min=1, help="runs per scheme, each on a fresh link with the same seed"
    ),
    fallback: bool = typer.Option(
        True,
        help="without root, run the in-process bitmap demo instead (saying so on stderr); "
        "--no-fallback fails instead",
    ),
) -> None:
    """Reliable transfers across an emulated long-haul link, every scheme vs prediction.

    Needs root (network namespaces and TUN devices). Without it, the in-process bitmap
    demo ('sdr bitmap-demo') runs instead and a note on stderr says so and why; with
    --no-fallback the command fails with that reason (exit 2).
    """
    if reason := can_use_namespaces():
        if not fallback:
            raise TransportError(f"the WAN demo {reason}; run it as root")
        err_console.print(
            f"note: the WAN demo {reason}; running the in-process bitmap demo "
            "('sdr bitmap-demo') instead. Run as root for the WAN demo.",
            style="yellow",
            markup=False,
            soft_wrap=True,
        )
        from sdr.cli.cmd_bitmap_demo import bitmap_demo

        bitmap_demo(size="8MiB", chunk="64KiB", mtu="4KiB", loss=0.01, delay="5ms", seed=seed)
        return
    from sdr.cli.demo_report import (  # SciPy: load late
        lossless_at_receiver,
        predict,
        results_chart,
        results_table,
    )

    nbytes, rate_value, rtt_value = parse_size(size), parse_rate(rate), parse_time(rtt)
    model = Link(rate=rate_value, rtt=rtt_value, mtu=mtu, chunk_size=parse_size(chunk))
    ideal = lossless_at_receiver(nbytes, rate_value, rtt_value)  # completion_s is the receiver's
    title = f"{format_size(nbytes)} over {rate}, RTT {rtt}, loss {loss:g} per packet"
    console.print(f"[bold]SDR demo[/]: {title}; two processes, two namespaces, emulated link")
    common = [
        "--rate",
        rate,
        "--rtt",
        rtt,
        "--loss",
        str(loss),
        "--message-size",
        size,
        "--mtu",
        str(mtu),
        "--chunk",
        chunk,
    ]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        source = make_payload(Path(tmp) / "payload.bin", nbytes, seed)
        with Progress(
            "{task.description}",
            BarColumn(),
            DownloadColumn(binary_units=True),
            BinarySpeed(),
            console=console,
        ) as bar:
            for scheme in schemes.split(","):
                for run in range(repeat):
                    label = f"{scheme:8} {run + 1}/{repeat}" if repeat > 1 else f"{scheme:8}"
                    report = _one_run(
                        bar,
                        label,
                        source,
                        Path(tmp) / "received.bin",
                        LinkSpec(rate=rate, rtt=rtt, loss=loss, seed=seed),
                        tun_mtu,
                        [*common, "--scheme", scheme],
                    )
                    report.update(
                        requested=scheme,
                        run=run,
                        ideal_s=ideal,
                        predicted_s=predict(model, nbytes, loss, report["config"]),
                    )
                    rows.append(report)
    console.print(results_table(rows, title))
    print_report(rows[-1]["link"], console)
    chart = results_chart(rows, out_dir / "demo.png", title)
    (out_dir / "demo.json").write_text(json.dumps({"runs": rows}, indent=1))
    drops = sum(run_drops(r["link"]) for r in rows)
    console.print(
        f"the link dropped {drops} packets over {len(rows)} runs (the last run's emulator "
        f"report above); every file verified by BLAKE3. Chart: {chart}; data: "
        f"{out_dir / 'demo.json'}"
    )
    if flagged := [r for r in rows if r["late"]]:
        console.print(
            f"[yellow]{len(flagged)} of {len(rows)} runs are marked ! : the emulator delivered "
            "packets late by more than "
            f"{LATE_FRACTION:.0%} of the run's time (the host was busy), so those times are "
            "the host's as much as the link's; rerun on an idle machine[/]"
        )


def _one_run(
    bar: Progress,
    label: str,
    source: Path,
    out: Path,
    spec: LinkSpec,
    tun_mtu: int,
    send_args: list[str],
) -> dict:
    """One transfer on a fresh link; the report carries that link's summary and its
    lateness verdict."""
    task = bar.add_task(label, total=source.stat().st_size, speed=None)
    speed = WindowSpeed()
    speed.add(time.monotonic(), 0)

    def progress(done: int, total: int) -> None:
        bar.update(task, completed=done, speed=speed.add(time.monotonic(), done))

    with TunLink(spec, mtu=tun_mtu) as link:
        report = transfer_over_link(link, source, out, send_args, progress)
    bar.update(
        task,
        completed=source.stat().st_size,
        speed=source.stat().st_size / report["completion_s"],
    )
    report["link"] = link.summary
    report["max_lateness_s"], report["late_packets"] = lateness(link.summary)
    report["late"] = late_run(link.summary, report["completion_s"])
    return report


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
