"""SDR against kernel TCP (CUBIC, BBR) and QUIC (aioquic) on the same emulated link.

Every run moves SIZE bytes from namespace A to B across one TunLink (rate, RTT, packet
loss); the peers run in the same invocation, one after another, on the same link.
Completion times are receiver-side (first byte sent -> last byte received and verified),
connection set-up excluded for every protocol. SDR runs also carry the simulator's
prediction for the scheme they used. Needs root.

    python -m benchmarks.wan_peers --sizes 1MiB,8MiB,64MiB,256MiB --losses 0,1e-4,1e-3,1e-2 \
        --json out/wan_peers.json --plot docs/figures/wan_peers.png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from benchmarks.peers.runner import run_pair
from sdr.backends.udp.roce import HEADER_SIZE, ICRC_SIZE, IP_UDP_OVERHEAD
from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces
from sdr.cli.defaults import DEFAULT_MTU
from sdr.cli.demo_report import lossless_at_receiver, predict
from sdr.cli.emulator_report import print_report
from sdr.cli.wan_transfer import make_payload, transfer_over_link
from sdr.simulator.link import Link
from sdr.units import format_size, parse_rate, parse_size, parse_time

PEERS = ("tcp-cubic", "tcp-bbr", "quic")
SDR = ("sr-rto", "sr-nack", "ec-mds", "ec-xor", "auto")
NO_TAIL = "auto-no-tail"
"""``auto`` without the erasure-coded tail (``sdr send --no-tail``), for comparison."""


def payload_for(link_mtu: int) -> int:
    """The largest power-of-two SDR payload whose packet (RoCEv2 headers, ICRC, IP and
    UDP) fits a link of ``link_mtu`` bytes: 8192 for 9000, 1024 for 1500."""
    room = link_mtu - IP_UDP_OVERHEAD - HEADER_SIZE - ICRC_SIZE
    if room < 256:
        sys.exit(f"--tun-mtu {link_mtu} leaves no room for an SDR packet")
    return 1 << (room.bit_length() - 1)


def run_sdr(
    link: TunLink, scheme: str, size: int, loss: float, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    source = make_payload(tmp / f"payload-{size}.bin", size)
    message = min(size, parse_size(args.message_size))
    report = transfer_over_link(
        link,
        source,
        tmp / "received.bin",
        [
            "--scheme",
            "auto" if scheme == NO_TAIL else scheme,
            *(["--no-tail"] if scheme == NO_TAIL else []),
            "--rate",
            args.rate,
            "--rtt",
            args.rtt,
            "--loss",
            str(max(loss, 1e-6)),
            "--message-size",
            format_size(message),
            "--mtu",
            str(args.mtu),
            *(["--chunk", args.chunk] if args.chunk else []),
        ],
    )
    # the chunk the transfer used (its own pick from --loss unless --chunk): predict()
    # takes it from the run's config
    model = Link(rate=parse_rate(args.rate), rtt=parse_time(args.rtt), mtu=args.mtu)
    predicted = predict(model, message, loss, report["config"]) if message == size else None
    return {
        "seconds": report["completion_s"],
        "predicted_s": predicted,
        "scheme_used": report["scheme"],
        "tail": report.get("tail"),
        "wire_bytes": report["wire_bytes"],
        "intact": report["receiver"]["digest"] == report["digest"],
    }


def run_peer(link: TunLink, peer: str, size: int, out: Path | None = None) -> dict[str, Any]:
    """One transfer by a peer; a TCP peer's receiver writes into the new file ``out``
    (removed after) when given, as SDR's does, else only hashes the stream."""
    if peer == "quic":
        result = run_pair(
            link,
            "benchmarks.peers.quic_peer",
            ["--bind", link.addr_b],
            ["--to", link.addr_b, "--size", str(size)],
        )
    else:
        try:
            result = run_pair(
                link,
                "benchmarks.peers.tcp_peer",
                ["--bind", link.addr_b, *(["--out", str(out)] if out else [])],
                ["--to", link.addr_b, "--size", str(size), "--cc", peer[4:]],
            )
        finally:
            if out is not None:
                out.unlink(missing_ok=True)
    return {"seconds": result["seconds"], "intact": result["intact"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1MiB,8MiB,64MiB,256MiB")
    p.add_argument("--losses", default="0,1e-4,1e-3,1e-2")
    p.add_argument("--rate", default="1Gbit/s")
    p.add_argument("--rtt", default="25ms")
    p.add_argument(
        "--chunk", default=None, help="SDR chunk size (default: sdr send's pick from the loss)"
    )
    p.add_argument(
        "--mtu",
        type=int,
        default=None,
        help="SDR payload bytes per packet (default: the largest power of two whose packet "
        "fits --tun-mtu, 8192 on the 9000-byte link, as TCP's segments fill it; "
        f"{DEFAULT_MTU} is the RoCE path MTU the paper models)",
    )
    p.add_argument("--tun-mtu", type=int, default=9000, help="MTU of the emulated link")
    p.add_argument("--message-size", default="64MiB", help="largest SDR message")
    p.add_argument(
        "--sdr",
        default=",".join(SDR),
        help=f"SDR schemes to run ({NO_TAIL}: auto without its tail)",
    )
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--seed", type=int, default=1, help="the (first) loss pattern")
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="run everything with this many loss patterns (--seed, --seed + 1, ...); the "
        "table then shows min / median / max and its ratios use medians (one seed run "
        "again repeats the same losses)",
    )
    p.add_argument(
        "--peer-output",
        choices=("file", "memory"),
        default="file",
        help="TCP peers' receivers write a file as sdr recv does (default), or only hash",
    )
    p.add_argument("--json")
    p.add_argument("--plot")
    args = p.parse_args()
    if args.mtu is None:
        args.mtu = payload_for(args.tun_mtu)
    if args.seeds < 1:
        sys.exit(f"--seeds must be >= 1, got {args.seeds}")
    if reason := can_use_namespaces():
        sys.exit(f"cannot run: {reason}")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    losses = [float(x) for x in args.losses.split(",")]
    protocols = [s for s in args.sdr.split(",") if s] + [q for q in args.peers.split(",") if q]
    rows: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    seeds = range(args.seed, args.seed + args.seeds)
    with tempfile.TemporaryDirectory() as tmp, Progress() as bar:
        task = bar.add_task("runs", total=len(seeds) * len(sizes) * len(losses) * len(protocols))
        for seed, loss in ((seed, loss) for seed in seeds for loss in losses):
            spec = LinkSpec(rate=args.rate, rtt=args.rtt, loss=loss, seed=seed)
            with TunLink(spec, mtu=args.tun_mtu) as link:
                for size in sizes:
                    # at the receiver, as the measured times are
                    ideal = lossless_at_receiver(size, parse_rate(args.rate), parse_time(args.rtt))
                    for proto in protocols:
                        bar.update(task, description=f"{proto} {format_size(size)} loss {loss:g}")
                        try:
                            res = (
                                run_peer(link, proto, size, _peer_out(args, Path(tmp)))
                                if proto in PEERS
                                else run_sdr(link, proto, size, loss, args, Path(tmp))
                            )
                        except Exception as exc:  # a failed run is a result, not a crash
                            res = {"seconds": None, "error": str(exc)[-500:]}
                        rows.append(
                            {
                                "protocol": proto,
                                "size": size,
                                "loss": loss,
                                "seed": seed,
                                "ideal_s": ideal,
                                **res,
                            }
                        )
                        bar.advance(task)
            links.append({"loss": loss, "seed": seed, **link.summary})  # what the emulator did
    report(rows, args, links)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median time among ``runs`` (failed ones count as the slowest, so the
    median may be a failed run), with ``spread`` (min, median, max; None for a failed
    max) when there is more than one run and the median did not fail."""
    done = sorted((r for r in runs if r.get("seconds")), key=lambda r: r["seconds"])
    middle = len(runs) // 2
    if middle >= len(done):
        return next(r for r in runs if not r.get("seconds"))
    median = dict(done[middle])
    if len(runs) > 1:
        slowest = done[-1]["seconds"] if len(done) == len(runs) else None
        median["spread"] = (done[0]["seconds"], median["seconds"], slowest)
    return median


def _peer_out(args: argparse.Namespace, tmp: Path) -> Path | None:
    return tmp / "peer-received.bin" if args.peer_output == "file" else None


def report(
    rows: list[dict[str, Any]], args: argparse.Namespace, links: list[dict[str, Any]]
) -> None:
    """One table row per (size, loss): SDR auto, the best SDR scheme, each peer, ratios
    (each protocol's median over the seeds, shown as min / median / max with more than
    one); then what the emulator did on each link (one per loss rate and seed)."""
    runs: dict[tuple[int, float], dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        runs.setdefault((r["size"], r["loss"]), {}).setdefault(r["protocol"], []).append(r)
    cells = {key: {proto: _median_run(rs) for proto, rs in by.items()} for key, by in runs.items()}
    peers = [p for p in PEERS if any(p in by for by in cells.values())]
    table = Table(
        title=f"completion (s) on {args.rate}, RTT {args.rtt}",
        box=box.SIMPLE_HEAD,
        caption="speedup = best peer / SDR auto; /ideal = SDR auto / lossless ideal",
    )
    for col in ("size", "loss", "ideal", "auto", "best SDR", *peers, "speedup", "/ideal", "/model"):
        table.add_column(col, justify="right", no_wrap=True)

    def secs(row: dict[str, Any] | None) -> str:
        if not row or not row.get("seconds"):
            return "fail"
        spread = row.get("spread")
        if not spread:
            return f"{row['seconds']:.3f}"
        return " / ".join("fail" if t is None else f"{t:.3f}" for t in spread)

    for (size, loss), by in cells.items():
        sdr_rows = [r for k, r in by.items() if k in SDR and r.get("seconds")]
        best = min(sdr_rows, key=lambda r: r["seconds"]) if sdr_rows else None
        auto = by.get("auto")
        peer_times = [by[p]["seconds"] for p in peers if by.get(p, {}).get("seconds")]
        ok = auto is not None and auto.get("seconds")
        table.add_row(
            format_size(size),
            f"{loss:g}",
            f"{next(iter(by.values()))['ideal_s']:.3f}",
            secs(auto),
            f"{secs(best)} {best['protocol']}" if best else "-",
            *[secs(by.get(p)) for p in peers],
            f"{min(peer_times) / auto['seconds']:.2f}x" if ok and peer_times else "-",
            f"{auto['seconds'] / auto['ideal_s']:.2f}" if ok else "-",
            f"{auto['seconds'] / auto['predicted_s']:.2f}"
            if ok and auto.get("predicted_s")
            else "-",
        )
    console = Console(width=150)
    console.print(table)
    for link in links:
        console.print(f"link with loss {link['loss']:g}, seed {link['seed']}:")
        print_report(link, console)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "command": " ".join(["python -m benchmarks.wan_peers", *sys.argv[1:]]),
            "args": vars(args),
        }
        Path(args.json).write_text(
            json.dumps({"meta": meta, "rows": rows, "links": links}, indent=1)
        )
    if args.plot:
        plot(rows, Path(args.plot))


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["size"] for r in rows})
    losses = sorted({r["loss"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(3.2 * len(sizes), 3.2), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        for proto in dict.fromkeys(r["protocol"] for r in rows):
            xs, mid, low, high = [], [], [], []  # per loss: median, and the seeds' range
            for i, loss in enumerate(losses):
                ys = sorted(
                    r["seconds"] / r["ideal_s"]
                    for r in rows
                    if r["protocol"] == proto
                    and r["size"] == size
                    and r["loss"] == loss
                    and r.get("seconds")
                )
                if ys:
                    xs.append(i)
                    mid.append(ys[len(ys) // 2])
                    low.append(mid[-1] - ys[0])
                    high.append(ys[-1] - mid[-1])
            if xs:
                ax.errorbar(xs, mid, yerr=[low, high], marker="o", capsize=2, label=proto)
        ax.set_xticks(range(len(losses)), [f"{x:g}" for x in losses])
        ax.set_title(format_size(size))
        ax.set_xlabel("packet loss")
        ax.set_yscale("log")
    axes[0][0].set_ylabel("completion / lossless ideal")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
