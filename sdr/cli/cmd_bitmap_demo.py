"""``sdr bitmap-demo``: two endpoints over the in-process wire with injected loss.

Shows what the SDK adds to RDMA writes: a receive chunk bitmap that fills as packets land,
holes where packets were lost, and a repair that resends exactly the missing chunks.
"""

from __future__ import annotations

import time

import numpy as np
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

import sdr
from sdr.backends.inproc import InprocNetwork
from sdr.cli.defaults import DEFAULT_MTU
from sdr.errors import ConfigError
from sdr.units import format_size, parse_size, parse_time

console = Console()


def _bitmap_text(bitmap: np.ndarray, width: int = 64) -> Text:
    text = Text()
    for start in range(0, len(bitmap), width):
        for bit in bitmap[start : start + width]:
            text.append("█" if bit else "·", style="green" if bit else "red")
        text.append("\n")
    return text


def bitmap_demo(
    size: str = typer.Option("8MiB", help="message size"),
    chunk: str = typer.Option("64KiB", help="bitmap chunk size"),
    mtu: str = typer.Option(str(DEFAULT_MTU), help="packet payload size"),
    loss: float = typer.Option(
        0.01, help="packet loss probability on the wire (per packet, as sdr demo --loss)"
    ),
    delay: str = typer.Option("5ms", help="one-way delay of the wire"),
    seed: int = typer.Option(1, help="seed of the fault injection"),
) -> None:
    """Send one message across a lossy in-process wire and watch the chunk bitmap fill."""
    if not 0.0 <= loss <= 1.0:
        raise ConfigError(f"--loss {loss:g}: expected a probability in [0, 1]")
    nbytes = parse_size(size)
    net = InprocNetwork(seed=seed, drop=loss, delay=parse_time(delay))
    attr = sdr.QPAttr(mtu=mtu, chunk_size=chunk, max_message_size=max(nbytes, parse_size(chunk)),
                      channels=4)  # fmt: skip
    with sdr.Context("inproc", network=net) as a, sdr.Context("inproc", network=net) as b:
        qa, qb = a.create_qp(attr), b.create_qp(attr)
        qa.connect(qb.info())
        qb.connect(qa.info())
        src = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
        dst = np.zeros(nbytes, dtype=np.uint8)
        ms = a.register(src)
        rh = qb.post_recv(b.register(dst))
        stream = qa.send_stream(imm=0xC0FFEE)
        stream.send(ms, 0, 0, nbytes)
        console.print(
            f"[bold]SDR demo[/]: {format_size(nbytes)} in {len(rh.bitmap)} chunks of "
            f"{format_size(attr.chunk_size)}, {attr.channels} channels, packet loss {loss:g}, "
            f"one-way delay {delay}"
        )
        start, rounds, quiet_since = time.monotonic(), 0, None
        status = Text()
        with Live(console=console, refresh_per_second=20) as live:
            while not rh.record.arrived:
                work = a.progress() + b.progress()
                live.update(Group(_bitmap_text(rh.bitmap), status))
                if work:
                    quiet_since = None
                    continue
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 4 * parse_time(delay):
                    # the wire went quiet with holes: resend exactly the missing chunks
                    rounds += 1
                    missing = rh.missing_chunks()
                    status = Text(f"repair round {rounds}: resending {len(missing)} chunks\n")
                    for lo, hi in rh.chunk_ranges(missing):
                        stream.send(ms, int(lo), int(lo), int(hi - lo))
                    quiet_since = None
                a.transport.wait(0.0005)
            stream.end()
            stream.wait(timeout=5)
            live.update(Group(_bitmap_text(rh.bitmap), status))
        elapsed = time.monotonic() - start
        ok = bool(np.array_equal(src, dst)) and rh.imm == 0xC0FFEE
        console.print(
            f"complete in {elapsed:.3f} s after {rounds} repair round(s); bytes "
            f"{'verified' if ok else 'WRONG'}; immediate {rh.imm:#x}"
        )
        table = Table(title="counters")
        table.add_column("counter")
        table.add_column("sender", justify="right")
        table.add_column("receiver", justify="right")
        sent, received = qa.counters(), qb.counters()
        for key in sent:
            if sent[key] or received[key]:
                table.add_row(key, str(sent[key]), str(received[key]))
        table.add_row("wire drops", str(net.stats["dropped"]), "")
        console.print(table)
        rh.complete()
        if not ok:
            raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("bitmap-demo")(bitmap_demo)
