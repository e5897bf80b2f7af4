"""``sdr emulate``: run the WAN emulator standalone (TUN namespaces or a UDP relay)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import typer
from rich.console import Console

from sdr.backends.wan import LinkSpec, RelayLink, TunLink, can_use_namespaces
from sdr.cli.defaults import DEFAULT_RATE
from sdr.cli.emulator_report import print_report
from sdr.cli.transfer_relay import write_map
from sdr.errors import ConfigError, TransportError
from sdr.simulator.loss_options import loss_model
from sdr.units import parse_time

console = Console()
emulate_app = typer.Typer(help="Emulate a long-haul link in user space.", no_args_is_help=True)


def _spec(
    rate: str,
    rtt: str,
    loss: float,
    burst: float,
    per_size: bool,
    trace: str | None,
    queue: str | None,
    reorder: float,
    duplicate: float,
    corrupt: float,
    seed: int,
) -> LinkSpec:
    return LinkSpec(
        rate=rate,
        rtt=rtt,
        queue=queue,
        reorder=reorder,
        duplicate=duplicate,
        corrupt=corrupt,
        seed=seed,
        loss=loss_model(loss, burst, per_size, trace),
    )


def _wait(duration: str | None) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = None if duration is None else time.monotonic() + parse_time(duration)
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            stop.wait(0.2)
    except KeyboardInterrupt:
        pass


def _host_port(item: str) -> tuple[str, int]:
    """``HOST:PORT`` as a pair; ConfigError naming the item otherwise."""
    host, _, port = item.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{item!r}: expected HOST:PORT with a port in 1..65535")
    return host, int(port)


RATE = typer.Option(DEFAULT_RATE, help="link rate")
RTT = typer.Option("25ms", help="round-trip time (half each way)")
LOSS = typer.Option(0.0, help="packet loss probability (long-run rate with --burst)")
BURST = typer.Option(0.0, help="mean loss burst length in packets (Gilbert-Elliott)")
PER_SIZE = typer.Option(False, help="loss grows with packet size (reference 4 KiB)")
TRACE = typer.Option(None, help="replay a loss trace file of 0/1 values")
QUEUE = typer.Option(None, help="drop-tail queue size (default one BDP)")
REORDER = typer.Option(0.0, help="probability a packet is delayed 1 ms extra")
DUP = typer.Option(0.0, help="probability a packet is duplicated")
CORRUPT = typer.Option(0.0, help="probability one bit of a packet is flipped")
SEED = typer.Option(0, help="seed of the random draws")
DURATION = typer.Option(None, help="stop after this long (default: until Ctrl-C)")
FORWARDER = typer.Option(
    None,
    help="auto (native where built and able), native or python (default: $SDR_FORWARDER, "
    "else auto)",
)


@emulate_app.command("tun")
def tun(
    rate: str = RATE,
    rtt: str = RTT,
    loss: float = LOSS,
    burst: float = BURST,
    per_size: bool = PER_SIZE,
    trace: str = TRACE,
    queue: str = QUEUE,
    reorder: float = REORDER,
    duplicate: float = DUP,
    corrupt: float = CORRUPT,
    seed: int = SEED,
    mtu: int = typer.Option(9000, help="MTU of the TUN devices"),
    duration: str = DURATION,
    forwarder: str = FORWARDER,
    offload: str = typer.Option(
        None,
        help="TUN offloads (GSO reads and writes, native forwarder): auto (where the kernel "
        "takes them), on or off (default: $SDR_TUN_OFFLOAD, else auto)",
    ),
) -> None:
    """Two network namespaces joined by the emulated link (root). Any IP traffic crosses."""
    if reason := can_use_namespaces():
        raise TransportError(f"emulate tun {reason}; 'sdr emulate relay' needs no root")
    spec = _spec(rate, rtt, loss, burst, per_size, trace, queue, reorder, duplicate, corrupt, seed)
    with TunLink(spec, mtu=mtu, forwarder=forwarder, offload=offload) as link:
        console.print(
            f"[bold]link up[/]: {link.ns_a} ({link.addr_a}) <-> {link.ns_b} "
            f"({link.addr_b}), {rate}, RTT {rtt}, loss {loss:g} per packet, "
            f"{link.forwarder} forwarder, TUN offloads "
            f"{f'{link.offload:#x}' if link.offload else 'off'}"
        )
        console.print(f"run programs with: ip netns exec {link.ns_a} <command>   (Ctrl-C stops)")
        _wait(duration)
    console.print_json(json.dumps(link.summary))
    print_report(link.summary, Console(stderr=True))  # stdout: the JSON summary alone


@emulate_app.command("relay")
def relay(
    a: list[str] = typer.Option(..., help="A's real HOST:PORT (repeat for more ports)"),
    b: list[str] = typer.Option(..., help="B's real HOST:PORT, same order as --a"),
    rate: str = RATE,
    rtt: str = RTT,
    loss: float = LOSS,
    burst: float = BURST,
    per_size: bool = PER_SIZE,
    trace: str = TRACE,
    queue: str = QUEUE,
    reorder: float = REORDER,
    duplicate: float = DUP,
    corrupt: float = CORRUPT,
    seed: int = SEED,
    reseal: bool = typer.Option(True, help="fix RoCE ICRCs (NAT; the Python forwarder)"),
    duration: str = DURATION,
    forwarder: str = FORWARDER,
    map_file: str = typer.Option(
        None,
        "--map",
        help="write the stand-ins to this file for 'sdr send/recv --relay' "
        "(then --a and --b are each a data and a control port)",
    ),
) -> None:
    """A UDP relay on loopback (no root): A and B send to the printed stand-in ports.

    With --map, 'sdr send --relay FILE' (side A) and 'sdr recv --relay FILE' (side B)
    carry a file transfer's UDP data through the relay (docs/wan-emulator.md).
    """
    spec = _spec(rate, rtt, loss, burst, per_size, trace, queue, reorder, duplicate, corrupt, seed)

    def parse(items: list[str]) -> list[tuple[str, int]]:
        return [_host_port(item) for item in items]

    a_ports, b_ports = parse(a), parse(b)
    if len(a_ports) != len(b_ports):
        raise ConfigError(f"--a and --b need as many ports each, got {len(a)} and {len(b)}")
    if map_file is not None and len(a_ports) != 2:
        raise ConfigError(
            f"--map needs two --a and two --b ports (data, then control), got {len(a)}"
        )
    with RelayLink(spec, a_ports, b_ports, reseal=reseal, forwarder=forwarder) as link:
        for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
            sa, sb = link.for_a(i), link.for_b(i)
            console.print(
                f"A sends to {sa[0]}:{sa[1]} (stands for {rb}); "
                f"B sends to {sb[0]}:{sb[1]} (stands for {ra})",
                markup=False,
                highlight=False,
            )
        n = range(len(a_ports))
        if map_file is not None:
            write_map(map_file, a_ports, b_ports, [link.for_a(i) for i in n],
                      [link.for_b(i) for i in n])  # fmt: skip
            console.print(f"map written to {map_file}", markup=False, highlight=False)
        try:
            _wait(duration)
        finally:
            if map_file is not None and os.path.exists(map_file):
                os.remove(map_file)  # a stale map would point at closed stand-ins
    console.print_json(json.dumps(link.summary))
    print_report(link.summary, Console(stderr=True))  # stdout: the JSON summary alone


def register(app: typer.Typer) -> None:
    app.add_typer(emulate_app, name="emulate")
