"""``sdr demo``: the main job. A real reliable transfer between two processes across an
emulated long-haul link, with every scheme and ``auto``, against the simulator's
prediction and the lossless ideal. Needs root (network namespaces); without it, the
in-process bitmap demo (``sdr bitmap-demo``) runs instead, saying so and why on stderr,
or with ``--no-fallback`` the command fails (exit 2)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces
from sdr.cli.emulator_report import print_report
from sdr.cli.wan_transfer import make_payload, transfer_over_link
from sdr.errors import TransportError
from sdr.simulator.link import Link
from sdr.units import format_size, parse_rate, parse_size, parse_time

console = Console()
err_console = Console(stderr=True)
SCHEMES = "sr-rto,sr-nack,ec-mds,ec-xor,auto"


def demo(
    size: str = typer.Option("64MiB", help="bytes to transfer (one reliable message)"),
    rate: str = typer.Option("1Gbit/s", help="link rate"),
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

        bitmap_demo(size="8MiB", chunk="64KiB", mtu="4KiB", drop=0.01, delay="5ms", seed=seed)
        return
    from sdr.cli.demo_report import (  # SciPy: load late
        lossless_at_receiver,
        predict,
        results_chart,
        results_table,
    )

    nbytes, bps, rtt_s = parse_size(size), parse_rate(rate), parse_time(rtt)
    model = Link(bandwidth_bps=bps, rtt_s=rtt_s, mtu=mtu, chunk_size=parse_size(chunk))
    ideal = lossless_at_receiver(nbytes, bps, rtt_s)  # completion_s is the receiver's
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
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        TunLink(LinkSpec(rate=rate, rtt=rtt, loss=loss, seed=seed), mtu=tun_mtu) as link,
    ):  # noqa: E501
        source = make_payload(Path(tmp) / "payload.bin", nbytes, seed)
        with Progress(
            "{task.description}",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=console,
        ) as bar:
            for scheme in schemes.split(","):
                task = bar.add_task(f"{scheme:8}", total=nbytes)
                report = transfer_over_link(
                    link,
                    source,
                    Path(tmp) / "received.bin",
                    [*common, "--scheme", scheme],
                    lambda d, t, task=task: bar.update(task, completed=d),
                )
                bar.update(task, completed=nbytes)
                report.update(
                    requested=scheme,
                    ideal_s=ideal,
                    predicted_s=predict(model, nbytes, loss, report["config"]),
                )
                rows.append(report)
    console.print(results_table(rows, title))
    print_report(link.summary, console)
    chart = results_chart(rows, out_dir / "demo.png", title)
    (out_dir / "demo.json").write_text(json.dumps({"link": link.summary, "runs": rows}, indent=1))
    drops = link.summary["a_to_b"]["loss_drops"] + link.summary["b_to_a"]["loss_drops"]
    console.print(
        f"link dropped {drops} packets in all; every file verified by BLAKE3. "
        f"Chart: {chart}; data: {out_dir / 'demo.json'}"
    )


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
