"""SDR and kernel TCP at the same time through one emulated bottleneck (issue 21).

Every run gets its own TunLink (rate, RTT, a drop-tail buffer of ``--buffers`` BDPs,
random loss); SDR is the real ``sdr send``/``sdr recv`` pair in the two namespaces, TCP
is iperf3 with its congestion control set per socket. Scenarios (``--scenarios``):

  compete  one TCP flow (``--tcp``: CUBIC, BBR) starts; after ``--lead`` s one SDR flow
           (``--scheme``, each of ``--controllers``) joins; TCP runs until SDR is done
           plus ``--tail`` s. Per flow: throughput over the overlap (from ``--settle`` s
           after SDR joined to SDR's end); SDR's share / fair share = 2 S / (S + T)
           (target 0.5..2); the queueing delay: a small UDP probe every 10 ms from A to
           B, its one-way delay (CLOCK_MONOTONIC is shared by the namespaces) above the
           idle floor measured before the run, with TCP alone and with both flows.
  loss     SDR alone at random loss (``--losses``), each of ``--loss-controllers``,
           ``--repeats`` runs each: median completion vs ``fixed`` (target: ``delay``
           <= 1.05x); TCP CUBIC alone for reference (iperf3 for ``--tcp-seconds``: its
           goodput, and the time SIZE would take at it).
  pair     two SDR flows (each of ``--pair-controllers``), the second launched
           ``--pair-lead`` s after the first began (it joins after its own start-up,
           3-5 s here): Jain's index of their throughputs over the overlap.

A controller is a name with optional parameters for it (``congestion_params``), e.g.
``delay:target=5ms+ai=0.02``; they reach ``sdr send`` as a ``--config`` TOML file.
Needs root (namespaces, TUN).

    python -m benchmarks.congestion_emulated --json out/congestion_emulated.json \\
        --plot docs/figures/congestion_emulated.png
    python -m benchmarks.congestion_emulated --quick     # one small compete run, < 60 s
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sdr.errors import ConfigError
from sdr.units import format_size, parse_rate, parse_size, parse_time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCENARIOS = ("compete", "loss", "pair")
TCP_KINDS = ("cubic", "bbr", "reno")
SDR_SCHEMES = ("sr-nack", "sr-rto", "ec-mds", "ec-xor")
IPERF_PORT = 5201
PROBE_PORT = 5399
SDR_PORTS = (18515, 18525)
BIN_S = 0.25
"""Width of the time bins of the throughput and queue series (seconds)."""


class UsageError(ValueError):
    """A bad command-line value; the message is one line."""


# --- options ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ControllerSpec:
    """One SDR congestion setting: ``name`` plus ``congestion_params`` (``label`` as given)."""

    label: str
    name: str
    params: dict[str, float] = field(default_factory=dict)

    def toml(self, global_timeout: float | None = None) -> str:
        """The ``--config`` file for ``sdr send`` (empty when it would set nothing):
        the params, and the messages' ``global_timeout`` (s) when given."""
        text = f"[reliability]\nglobal_timeout = {global_timeout!r}\n" if global_timeout else ""
        if self.params:
            lines = [f"{key} = {value!r}" for key, value in self.params.items()]
            text += "[reliability.congestion_params]\n" + "\n".join(lines) + "\n"
        return text


def _param_value(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    parse = parse_rate if key.endswith("rate") else parse_time
    try:
        return float(parse(text, field=key))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def parse_controller(text: str, rate: float) -> ControllerSpec:
    """``name[:key=value+key=value]`` as a :class:`ControllerSpec`, checked by building
    the controller once (an unknown name or parameter is a one-line UsageError)."""
    from sdr.congestion import controller_for

    name, _, rest = text.strip().partition(":")
    params: dict[str, float] = {}
    for item in filter(None, rest.split("+")):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise UsageError(f"controller parameter {item!r} in {text!r} must be key=value")
        params[key.strip()] = _param_value(key.strip(), value.strip())
    if name.lower() == "fixed" and params:
        raise UsageError(f"controller {text!r}: fixed takes no parameters")
    try:
        controller_for(name, rate, **params)
    except ConfigError as exc:
        raise UsageError(f"controller {text!r}: {exc}") from None
    return ControllerSpec(text.strip(), name.lower(), params)


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _choices(flag: str, text: str, allowed: Sequence[str]) -> list[str]:
    values = _split(text)
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise UsageError(f"{flag} takes a comma-separated list of {list(allowed)}, got {text!r}")
    return values


def _floats(flag: str, text: str, low: float, high: float) -> list[float]:
    try:
        values = [float(v) for v in _split(text)]
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated numbers, got {text!r}") from None
    if not values or any(not low <= v <= high for v in values):
        raise UsageError(f"{flag} values must be in [{low:g}, {high:g}], got {text!r}")
    return values


def _unit(flag: str, text: str, parse: Callable[..., Any]) -> Any:
    try:
        return parse(text, field=flag)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="compete, loss, pair")
    p.add_argument("--rate", default="1Gbit/s", help="link rate (and SDR's --rate)")
    p.add_argument("--rtt", default="25ms", help="link round-trip time")
    p.add_argument("--buffers", default="1", help="link buffers in BDPs, comma-separated")
    p.add_argument("--tcp", default="cubic,bbr", help="kernel TCP flows for compete")
    p.add_argument("--controllers", default="delay,fixed,bbr", help="SDR controllers (compete)")
    p.add_argument("--loss-controllers", default="fixed,delay", help="SDR controllers (loss)")
    p.add_argument("--pair-controllers", default="delay,fixed", help="SDR controllers (pair)")
    p.add_argument("--losses", default="1e-3,1e-2", help="random loss rates (loss)")
    p.add_argument("--scheme", default="sr-nack", help="SDR reliability scheme")
    p.add_argument("--size", default="512MiB", help="SDR transfer (compete, pair)")
    p.add_argument("--loss-size", default="256MiB", help="SDR transfer (loss)")
    p.add_argument("--repeats", type=int, default=3, help="runs per controller (loss)")
    p.add_argument("--lead", type=float, default=3.0, help="s the first flow runs alone")
    p.add_argument(
        "--pair-lead", type=float, default=0.0, help="s between the pair's starts (+ start-up)"
    )
    p.add_argument("--settle", type=float, default=1.0, help="s after joining not counted")
    p.add_argument("--tail", type=float, default=1.0, help="s TCP runs after SDR is done")
    p.add_argument("--tcp-seconds", type=float, default=10.0, help="TCP alone (loss), s")
    p.add_argument("--tcp-buffer", default="64MiB", help="TCP socket buffer ceiling (sysctl)")
    p.add_argument("--message-size", default="4MiB", help="SDR message (progress step)")
    p.add_argument("--mtu", type=int, default=8192, help="SDR payload bytes per packet")
    p.add_argument("--chunk", default="64KiB", help="SDR chunk size")
    p.add_argument("--tun-mtu", type=int, default=9000, help="MTU of the emulated link")
    p.add_argument("--sdr-timeout", type=float, default=60.0, help="s before SDR gives up")
    p.add_argument(
        "--global-timeout", type=float, help="s an SDR message may take [default: the SDK's]"
    )
    p.add_argument("--forwarder", default="auto", help="auto, native or python")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="one small compete run (< 60 s)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="draw the figure here (PNG)")
    return p


@dataclass
class Options:
    """The validated command line (rates bits/s, times s, sizes bytes)."""

    scenarios: list[str]
    rate: float
    rtt: float
    buffers: list[float]
    tcp: list[str]
    controllers: list[ControllerSpec]
    loss_controllers: list[ControllerSpec]
    pair_controllers: list[ControllerSpec]
    losses: list[float]
    scheme: str
    size: int
    loss_size: int
    repeats: int
    lead: float
    pair_lead: float
    settle: float
    tail: float
    tcp_seconds: float
    tcp_buffer: int
    message_size: int
    mtu: int
    chunk: int
    tun_mtu: int
    sdr_timeout: float
    global_timeout: float | None
    forwarder: str
    seed: int
    quick: bool
    json: str | None
    plot: str | None
    argv: list[str] = field(default_factory=list)

    @property
    def bdp(self) -> float:
        """Bytes in flight at the link rate over one RTT."""
        return self.rate * self.rtt / 8


QUICK = {
    "scenarios": "compete",
    "tcp": "cubic",
    "controllers": "delay",
    "buffers": "1",
    "size": "64MiB",
    "lead": 2.0,
    "tail": 0.5,
    "settle": 0.5,
    "sdr_timeout": 30.0,
}
"""What ``--quick`` changes, where the command line left the default."""


def _apply_quick(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    for key, value in QUICK.items():
        if getattr(ns, key) == parser.get_default(key):
            setattr(ns, key, value)


def _check_numbers(ns: argparse.Namespace) -> None:
    for flag, value, low in (
        ("--lead", ns.lead, 0.5),
        ("--settle", ns.settle, 0.0),
        ("--pair-lead", ns.pair_lead, 0.0),
        ("--tail", ns.tail, 0.0),
        ("--tcp-seconds", ns.tcp_seconds, 1.0),
        ("--sdr-timeout", ns.sdr_timeout, 5.0),
        ("--global-timeout", ns.global_timeout or 1.0, 1.0),
    ):
        if not low <= value <= 600:
            raise UsageError(f"{flag} must be in [{low:g}, 600] s, got {value:g}")
    if not 1 <= ns.repeats <= 50:
        raise UsageError(f"--repeats must be in [1, 50], got {ns.repeats}")
    if not 576 <= ns.tun_mtu <= 65535:
        raise UsageError(f"--tun-mtu must be in [576, 65535], got {ns.tun_mtu}")
    if not 256 <= ns.mtu <= ns.tun_mtu - 100:
        raise UsageError(f"--mtu must be in [256, tun-mtu - 100], got {ns.mtu}")
    if ns.forwarder not in ("auto", "native", "python"):
        raise UsageError(f"--forwarder must be auto, native or python, got {ns.forwarder!r}")


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """Parse and validate; a bad value is a :class:`UsageError` with a one-line message."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.quick:
        _apply_quick(ns, parser)
    _check_numbers(ns)
    rate = _unit("--rate", ns.rate, parse_rate)
    rtt = _unit("--rtt", ns.rtt, parse_time)
    if not 1e6 <= rate <= 1e11 or not 1e-4 <= rtt <= 1.0:
        raise UsageError("--rate must be in [1Mbit/s, 100Gbit/s] and --rtt in [0.1ms, 1s]")
    if ns.scheme not in SDR_SCHEMES:
        raise UsageError(f"--scheme must be one of {list(SDR_SCHEMES)}, got {ns.scheme!r}")

    def specs(flag: str, text: str) -> list[ControllerSpec]:
        found = [parse_controller(item, rate) for item in _split(text)]
        if not found:
            raise UsageError(f"{flag} needs at least one controller, got {text!r}")
        return found

    return Options(
        scenarios=_choices("--scenarios", ns.scenarios, SCENARIOS),
        rate=rate,
        rtt=rtt,
        buffers=_floats("--buffers", ns.buffers, 0.05, 10.0),
        tcp=_choices("--tcp", ns.tcp, TCP_KINDS),
        controllers=specs("--controllers", ns.controllers),
        loss_controllers=specs("--loss-controllers", ns.loss_controllers),
        pair_controllers=specs("--pair-controllers", ns.pair_controllers),
        losses=_floats("--losses", ns.losses, 0.0, 0.2),
        scheme=ns.scheme,
        size=_unit("--size", ns.size, parse_size),
        loss_size=_unit("--loss-size", ns.loss_size, parse_size),
        repeats=ns.repeats,
        lead=ns.lead,
        pair_lead=ns.pair_lead,
        settle=ns.settle,
        tail=ns.tail,
        tcp_seconds=ns.tcp_seconds,
        tcp_buffer=_unit("--tcp-buffer", ns.tcp_buffer, parse_size),
        message_size=_unit("--message-size", ns.message_size, parse_size),
        mtu=ns.mtu,
        chunk=_unit("--chunk", ns.chunk, parse_size),
        tun_mtu=ns.tun_mtu,
        sdr_timeout=ns.sdr_timeout,
        global_timeout=ns.global_timeout,
        forwarder=ns.forwarder,
        seed=ns.seed,
        quick=ns.quick,
        json=ns.json,
        plot=ns.plot,
        argv=argv,
    )


# --- the numbers (pure) -----------------------------------------------------------------
Points = list[tuple[float, float]]
"""A cumulative byte count over time: (seconds, bytes so far), time ascending."""


def cumulative_at(points: Points, t: float) -> float:
    """Bytes done at ``t`` (linear between points; 0 before the first, the last after)."""
    if not points or t < points[0][0]:
        return 0.0
    return float(np.interp(t, [p[0] for p in points], [p[1] for p in points]))


def rate_between(points: Points, start: float, end: float) -> float:
    """Bits/s of the cumulative ``points`` over [start, end] (0 for an empty span)."""
    if end <= start:
        return 0.0
    return (cumulative_at(points, end) - cumulative_at(points, start)) * 8 / (end - start)


def share_vs_fair(flow_bps: float, other_bps: float) -> float | None:
    """A flow's share of two against the fair half: 2 S / (S + T) (1 = fair, 2 = all)."""
    total = flow_bps + other_bps
    return None if total <= 0 else 2 * flow_bps / total


def share_met(share: float | None, low: float = 0.5, high: float = 2.0) -> bool:
    """The compete target: SDR's share between ``low`` and ``high`` times fair.

    ``high`` = 2 is the largest share there is (the other flow starved); it counts as met
    only when the other flow kept something (share strictly below 2)."""
    return share is not None and low <= share < high


def jain(rates: Sequence[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n sum x^2); 1 when equal, 1/n when one has all."""
    from sdr.simulator.bottleneck import jain as bottleneck_jain

    return bottleneck_jain(list(rates))


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 95)) -> dict[str, float]:
    """``{"p50": ..., "p95": ...}`` (empty when there are no values)."""
    if len(values) == 0:
        return {}
    return {f"p{q:g}": float(np.percentile(values, q)) for q in qs}


def window(start: float, end: float, settle: float, least: float = 0.5) -> tuple[float, float]:
    """The measured span: from ``settle`` s after ``start`` to ``end``, or the whole span
    when what is left would be shorter than ``least`` s."""
    if end - (start + settle) >= least:
        return start + settle, end
    return start, end


def binned_rate(points: Points, t_end: float, width: float = BIN_S) -> list[float]:
    """Gbit/s of ``points`` per bin [k w, (k+1) w) from 0 to ``t_end`` (4 decimals)."""
    edges = np.arange(0.0, t_end + width, width)
    spans = zip(edges[:-1], edges[1:], strict=True)
    return [round(rate_between(points, a, b) / 1e9, 4) for a, b in spans]


def binned_median(samples: Sequence[tuple[float, float]], t_end: float, width: float = BIN_S):
    """The median value per time bin of (t, value) samples, 2 decimals (None: empty bin)."""
    n = int(np.ceil(t_end / width)) + 1
    bins: list[list[float]] = [[] for _ in range(n)]
    for t, v in samples:
        if 0 <= t < n * width:
            bins[int(t // width)].append(v)
    return [round(float(np.median(b)), 2) if b else None for b in bins[: max(n - 1, 1)]]


def between(samples: Sequence[tuple[float, float]], start: float, end: float) -> list[float]:
    """Values of the (t, value) samples with ``start <= t < end``."""
    return [v for t, v in samples if start <= t < end]


_IPERF_LINE = re.compile(
    r"^\[\s*\d+\]\s+(?P<s>[\d.]+)-(?P<e>[\d.]+)\s+sec\s+[\d.]+\s+[KMGT]?Bytes\s+"
    r"(?P<rate>[\d.]+)\s+Mbits/sec(?:\s+(?P<retr>\d+))?"
)


def parse_iperf_interval(line: str) -> tuple[float, float, float, int | None] | None:
    """One iperf3 ``-f m`` client interval line as (start s, end s, Mbit/s, retransmits);
    None for anything else (headers, the final sender/receiver summary)."""
    if "sender" in line or "receiver" in line:
        return None
    m = _IPERF_LINE.match(line.strip())
    if m is None:
        return None
    retr = int(m["retr"]) if m["retr"] is not None else None
    return float(m["s"]), float(m["e"]), float(m["rate"]), retr


def iperf_points(
    intervals: Sequence[tuple[float, float, float, int | None]], offset: float
) -> Points:
    """iperf3 intervals (relative seconds, Mbit/s) as cumulative bytes at ``offset + t``."""
    if not intervals:
        return []
    points = [(offset + intervals[0][0], 0.0)]
    total = 0.0
    for start, end, mbps, _ in intervals:
        total += mbps * 1e6 / 8 * (end - start)
        points.append((offset + end, total))
    return points


# --- the link and the processes in it ---------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def make_link(opts: Options, loss: float, buffer_bdp: float) -> Any:
    """A TunLink with the options' rate and RTT, ``buffer_bdp`` BDPs of buffer."""
    from sdr.backends.wan import LinkSpec, TunLink

    queue = int(max(buffer_bdp * opts.bdp, 64 << 10))
    spec = LinkSpec(rate=opts.rate, rtt=opts.rtt, queue=queue, loss=loss, seed=opts.seed)
    return TunLink(spec, mtu=opts.tun_mtu, forwarder=opts.forwarder)


def tune_tcp(link: Any, buffer: int) -> None:
    """Let TCP's socket buffers grow to ``buffer`` bytes in both namespaces (a new
    namespace caps the send buffer at 4 MiB, less than a BDP plus a BDP of queue)."""
    from sdr.backends.wan import netns_exec

    for ns in (link.ns_a, link.ns_b):
        for key in ("net.ipv4.tcp_wmem", "net.ipv4.tcp_rmem"):
            value = f"4096 131072 {buffer}"
            subprocess.run(
                netns_exec(ns, "sysctl", "-q", "-w", f"{key}={value}"), check=True, timeout=10
            )


class OneWayProbe:
    """A 16-byte UDP datagram from A to B every ``interval`` s; B timestamps its arrival.

    Two threads of this process, each moved into one namespace (``setns`` changes only
    the calling thread); the delay is arrival minus send time on the shared monotonic
    clock. ``samples`` are (send time - t0, one-way delay s)."""

    def __init__(self, link: Any, t0: float, interval: float = 0.01) -> None:
        self.link, self.t0, self.interval = link, t0, interval
        self.samples: list[tuple[float, float]] = []
        self.sent = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._threads = [
            threading.Thread(target=self._receive, daemon=True),
            threading.Thread(target=self._send, daemon=True),
        ]

    def __enter__(self) -> OneWayProbe:
        self._threads[0].start()
        if not self._ready.wait(5):
            raise RuntimeError("the probe's receiver did not start")
        self._threads[1].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(2)

    def _receive(self) -> None:
        from sdr.backends.wan import enter_namespace

        enter_namespace(self.link.ns_b)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind((self.link.addr_b, PROBE_PORT))
            sock.settimeout(0.1)
            self._ready.set()
            while not self._stop.is_set():
                try:
                    data = sock.recv(64)
                except TimeoutError:
                    continue
                now = time.monotonic()
                (sent,) = struct.unpack_from("!d", data)
                self.samples.append((sent - self.t0, now - sent))

    def _send(self) -> None:
        from sdr.backends.wan import enter_namespace

        enter_namespace(self.link.ns_a)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            next_at = time.monotonic()
            while not self._stop.wait(max(0.0, next_at - time.monotonic())):
                sock.sendto(
                    struct.pack("!dQ", time.monotonic(), self.sent), (self.link.addr_b, PROBE_PORT)
                )
                self.sent += 1
                next_at += self.interval


class IperfFlow:
    """iperf3 from A to B with congestion control ``cc``, until :meth:`stop` (or
    ``seconds``); its 0.1 s interval lines are read as they come."""

    def __init__(self, link: Any, cc: str, seconds: float = 600.0) -> None:
        from sdr.backends.wan import netns_exec

        self.cc = cc
        self.intervals: list[tuple[float, float, float, int | None]] = []
        self._arrivals: list[float] = []
        self.server = subprocess.Popen(
            netns_exec(
                link.ns_b,
                "iperf3",
                "-s",
                "-1",
                "-B",
                link.addr_b,
                "-p",
                str(IPERF_PORT),
                "--forceflush",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.server.stdout is not None
        for line in self.server.stdout:  # "Server listening on 5201"
            if "listening" in line:
                break
        else:
            raise RuntimeError("iperf3 server did not start")
        client_cmd = [
            "iperf3", "-c", link.addr_b, "-p", str(IPERF_PORT), "-C", cc, "-t", f"{seconds:g}",
            "-i", "0.1", "-f", "m", "--forceflush",
        ]  # fmt: skip
        self.started = time.monotonic()
        self.client = subprocess.Popen(
            netns_exec(link.ns_a, *client_cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.client.stdout is not None
        for line in self.client.stdout:
            self.output.append(line)
            parsed = parse_iperf_interval(line)
            if parsed is not None:
                self.intervals.append(parsed)
                self._arrivals.append(time.monotonic())

    def stop(self) -> None:
        """Interrupt the client (iperf3 prints its last partial interval) and reap both."""
        if self.client.poll() is None:
            self.client.send_signal(signal.SIGINT)
        self.wait()

    def wait(self, timeout: float = 30.0) -> None:
        try:
            self.client.wait(timeout)
        finally:
            self._reader.join(5)
            for proc in (self.client, self.server):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(5)

    def points(self, t0: float) -> Points:
        """Cumulative bytes over time relative to ``t0`` (each line printed at its
        interval's end: the offset is the median of arrival - end)."""
        if not self.intervals:
            return []
        ends = [iv[1] for iv in self.intervals]
        offset = float(np.median([a - e for a, e in zip(self._arrivals, ends, strict=True)]))
        return iperf_points(self.intervals, offset - t0)

    @property
    def retransmits(self) -> int:
        return sum(iv[3] or 0 for iv in self.intervals)

    def error(self) -> str | None:
        if self.intervals:
            return None
        return "iperf3 gave no intervals: " + "".join(self.output)[-300:].strip()


class SdrFlow:
    """``sdr recv`` in B and ``sdr send`` in A on out-of-band ``port``; the sender's
    progress lines (bytes acknowledged) are timestamped as they arrive."""

    def __init__(
        self,
        link: Any,
        port: int,
        source: pathlib.Path,
        out: pathlib.Path,
        send_args: list[str],
        timeout: float,
    ) -> None:
        self.link, self.port, self.timeout = link, port, timeout
        self.progress: list[tuple[float, float]] = []
        self.report: dict[str, Any] = {}
        self.error: str | None = None
        self.launched = time.monotonic()
        self.started = threading.Event()
        """Set at the first progress line: the transfer began."""
        self.ended: float | None = None
        """When the sender's output ended (it exited): a failed run's end."""
        self.receiver = self._spawn(
            link.ns_b, "recv", "--out", str(out), "--bind", link.addr_b, "--port", str(port),
            "--json", "--timeout", f"{timeout:g}",
        )  # fmt: skip
        assert self.receiver.stdout is not None
        first = self.receiver.stdout.readline()
        if "listening" not in first:
            self.receiver.kill()
            raise RuntimeError(f"sdr recv did not start: {first}{self.receiver.stderr.read()}")  # type: ignore[union-attr]
        self.sender = self._spawn(
            link.ns_a, "send", str(source), "--to", f"{link.addr_b}:{port}", "--json",
            "--timeout", f"{timeout:g}", *send_args,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._drain = threading.Thread(target=self._read_receiver, daemon=True)
        self._drain.start()

    def _read_receiver(self) -> None:
        assert self.receiver.stdout is not None
        for _ in self.receiver.stdout:  # progress lines: read so the pipe never fills
            pass

    @staticmethod
    def _spawn(namespace: str, *args: str) -> subprocess.Popen[str]:
        from sdr.backends.wan import netns_exec

        command = netns_exec(namespace, sys.executable, "-m", "sdr.cli.main", *args)
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT
        )

    def _read(self) -> None:
        assert self.sender.stdout is not None
        for line in self.sender.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "done" in msg:
                self.progress.append((time.monotonic(), float(msg["done"])))
                self.started.set()
            self.report = msg.get("report", self.report)
        self.ended = time.monotonic()
        self.started.set()

    def wait(self) -> None:
        """Wait for both sides; a failure is kept in :attr:`error` (the stderr's last line)."""
        try:
            rc = self.sender.wait(self.timeout + 30)
            self._reader.join(5)
            if rc != 0 or not self.report:
                self.error = _last_line(self.sender.stderr.read()) or f"sdr send exited {rc}"  # type: ignore[union-attr]
            self.receiver.wait(30)
        except subprocess.TimeoutExpired:
            self.error = "sdr send did not exit in time"
        finally:
            for proc in (self.sender, self.receiver):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(5)

    def span(self, t0: float) -> tuple[float, float]:
        """(start, end) relative to ``t0``: the sender's first write to the receiver's last
        verified byte, or the progress seen when it failed."""
        if self.report:
            return self.report["start"] - t0, self.report["recv_end"] - t0
        start = self.progress[0][0] if self.progress else self.launched
        return start - t0, (self.ended or start) - t0

    def points(self, t0: float) -> Points:
        start, _ = self.span(t0)
        return [(start, 0.0)] + [(t - t0, d) for t, d in self.progress if t - t0 >= start]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:400] if lines else ""


# --- running ----------------------------------------------------------------------------
class Workspace:
    """Payload files and the controllers' config files, in one temporary folder."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.tmp = tmp

    def clean(self, text: str | None) -> str | None:
        """``text`` (an error line) without this run's temporary folder in it."""
        return None if text is None else text.replace(str(self.tmp), "<tmp>")

    def payload(self, size: int) -> pathlib.Path:
        from sdr.cli.wan_transfer import make_payload

        return make_payload(self.tmp / f"payload-{size}.bin", size)

    def send_args(self, opts: Options, spec: ControllerSpec, loss: float) -> list[str]:
        args = [
            "--scheme", opts.scheme, "--rate", f"{opts.rate:g}bit/s", "--rtt", f"{opts.rtt:g}s",
            "--congestion", spec.name, "--loss", f"{max(loss, 1e-6):g}",
            "--message-size", str(opts.message_size), "--mtu", str(opts.mtu),
            "--chunk", str(opts.chunk),
        ]  # fmt: skip
        if text := spec.toml(opts.global_timeout):
            config = self.tmp / f"cc-{re.sub(r'[^A-Za-z0-9]+', '_', spec.label)}.toml"
            config.write_text(text)
            args += ["--config", str(config)]
        return args


def _idle_floor(probe: OneWayProbe, seconds: float = 0.4) -> float:
    """The one-way delay of the idle link: the smallest probe delay over ``seconds``."""
    time.sleep(seconds)
    delays = [d for _, d in probe.samples]
    return min(delays) if delays else 0.0


def _queue_ms(probe: OneWayProbe, floor: float) -> list[tuple[float, float]]:
    return [(t, max(0.0, d - floor) * 1e3) for t, d in list(probe.samples)]


def _link_row(label: str, link: Any) -> dict[str, Any]:
    return {"run": label, **link.summary}


def _drops(summary: dict[str, Any], key: str) -> int | None:
    report = summary.get("report") or {}
    return report.get("a_to_b", {}).get(key)


def run_compete(opts: Options, ws: Workspace, tcp: str, spec: ControllerSpec, buffer_bdp: float):
    """One TCP flow, SDR joining after ``lead`` s; returns (row, link summary)."""
    label = f"compete {tcp} vs {spec.label}, {buffer_bdp:g} BDP"
    source = ws.payload(opts.size)
    with make_link(opts, 0.0, buffer_bdp) as link:
        tune_tcp(link, opts.tcp_buffer)
        t0 = time.monotonic()
        with OneWayProbe(link, t0) as probe:
            floor = _idle_floor(probe)
            iperf = IperfFlow(link, tcp)
            try:
                time.sleep(opts.lead)
                sdr = SdrFlow(
                    link,
                    SDR_PORTS[0],
                    source,
                    ws.tmp / "out0.bin",
                    ws.send_args(opts, spec, 0.0),
                    opts.sdr_timeout,
                )
                sdr.wait()
                time.sleep(opts.tail)
            finally:
                iperf.stop()
            t_end = time.monotonic() - t0
        queue = _queue_ms(probe, floor)
    row = summarize_compete(
        tcp_points=iperf.points(t0),
        sdr_points=sdr.points(t0),
        sdr_span=sdr.span(t0),
        tcp_start=iperf.started - t0,
        queue=queue,
        t_end=t_end,
        settle=opts.settle,
    )
    row.update(
        scenario="compete", label=label, tcp=tcp, controller=spec.label, buffer_bdp=buffer_bdp,
        buffer_ms=buffer_bdp * opts.rtt * 1e3,
        scheme=opts.scheme, size=opts.size, sdr_ok=sdr.error is None, sdr_error=ws.clean(sdr.error),
        tcp_error=iperf.error(), tcp_retransmits=iperf.retransmits,
        queue_drops=_drops(link.summary, "drops_queue"), probes_sent=probe.sent,
        probes_received=len(probe.samples),
    )  # fmt: skip
    return row, _link_row(label, link)


def summarize_compete(
    *,
    tcp_points: Points,
    sdr_points: Points,
    sdr_span: tuple[float, float],
    tcp_start: float,
    queue: list[tuple[float, float]],
    t_end: float,
    settle: float,
) -> dict[str, Any]:
    """The compete numbers from the traces (times relative to the run's start)."""
    sdr_start, sdr_end = sdr_span
    a, b = window(sdr_start, sdr_end, settle)
    alone = window(tcp_start, sdr_start, settle)
    sdr_bps, tcp_bps = rate_between(sdr_points, a, b), rate_between(tcp_points, a, b)
    share = share_vs_fair(sdr_bps, tcp_bps)
    q_alone, q_both = between(queue, *alone), between(queue, a, b)
    return {
        "window_s": [a, b],
        "tcp_alone_window_s": list(alone),
        "sdr_completion_s": sdr_end - sdr_start,
        "sdr_gbps": sdr_bps / 1e9,
        "tcp_gbps": tcp_bps / 1e9,
        "tcp_alone_gbps": rate_between(tcp_points, *alone) / 1e9,
        "total_gbps": (sdr_bps + tcp_bps) / 1e9,
        "share_vs_fair": share,
        "share_met": share_met(share),
        "queue_ms": {"tcp_alone": percentiles(q_alone), "both": percentiles(q_both)},
        "series": {
            "bin_s": BIN_S,
            "sdr_gbps": binned_rate(sdr_points, t_end),
            "tcp_gbps": binned_rate(tcp_points, t_end),
            "queue_ms": binned_median(queue, t_end),
            "sdr_span_s": [sdr_start, sdr_end],
        },
    }


def run_sdr_alone(opts: Options, ws: Workspace, link: Any, spec: ControllerSpec, loss: float):
    """One SDR transfer of ``loss_size`` on an otherwise idle link: (seconds or None, error)."""
    flow = SdrFlow(
        link,
        SDR_PORTS[0],
        ws.payload(opts.loss_size),
        ws.tmp / "out0.bin",
        ws.send_args(opts, spec, loss),
        opts.sdr_timeout,
    )
    flow.wait()
    if flow.error is not None:
        return None, flow.error
    return flow.report["recv_end"] - flow.report["start"], None


def run_tcp_alone(opts: Options, link: Any, tcp: str) -> dict[str, Any]:
    """TCP alone for ``tcp_seconds``: goodput over the run after its first second."""
    tune_tcp(link, opts.tcp_buffer)
    flow = IperfFlow(link, tcp, seconds=opts.tcp_seconds)
    t0 = flow.started
    flow.wait(opts.tcp_seconds + 30)
    points = flow.points(t0)
    end = points[-1][0] if points else 0.0
    bps = rate_between(points, min(1.0, end / 2), end)
    return {"gbps": bps / 1e9, "error": flow.error(), "retransmits": flow.retransmits}


def summarize_loss(
    loss: float, spec_label: str, times: list[float | None], errors: list[str]
) -> dict[str, Any]:
    done = [t for t in times if t is not None]
    return {
        "scenario": "loss",
        "loss": loss,
        "controller": spec_label,
        "runs_s": times,
        "median_s": float(np.median(done)) if done else None,
        "failures": len(times) - len(done),
        "errors": errors[:3],
    }


def compare_to_fixed(rows: list[dict[str, Any]], limit: float = 1.05) -> None:
    """Add ``vs_fixed`` (median / fixed's median at the same loss) and ``met`` (<= limit
    for every non-fixed SDR row; ``delay`` is the one the target is about)."""
    fixed = {r["loss"]: r["median_s"] for r in rows if r["controller"] == "fixed"}
    for r in rows:
        base = fixed.get(r["loss"])
        ratio = r["median_s"] / base if base and r.get("median_s") else None
        r["vs_fixed"] = ratio
        if r["controller"] not in ("fixed", "tcp-cubic"):
            r["met"] = ratio is not None and ratio <= limit and r["failures"] == 0


def run_loss(opts: Options, ws: Workspace, loss: float, progress: Callable[[str], None]):
    """SDR alone at ``loss`` (each loss controller, ``repeats`` runs, interleaved), then
    TCP CUBIC; returns (rows, link summary)."""
    label = f"loss {loss:g}"
    times: dict[str, list[float | None]] = {s.label: [] for s in opts.loss_controllers}
    errors: dict[str, list[str]] = {s.label: [] for s in opts.loss_controllers}
    with make_link(opts, loss, opts.buffers[0]) as link:
        for i in range(opts.repeats):
            for spec in opts.loss_controllers:
                progress(f"{label}: {spec.label} run {i + 1}/{opts.repeats}")
                seconds, error = run_sdr_alone(opts, ws, link, spec, loss)
                times[spec.label].append(seconds)
                if error:
                    errors[spec.label].append(ws.clean(error))
        progress(f"{label}: tcp cubic")
        tcp = run_tcp_alone(opts, link, "cubic")
    rows = [
        summarize_loss(loss, s.label, times[s.label], errors[s.label])
        for s in opts.loss_controllers
    ]
    implied = opts.loss_size * 8 / (tcp["gbps"] * 1e9) if tcp["gbps"] > 0 else None
    rows.append(
        {
            "scenario": "loss",
            "loss": loss,
            "controller": "tcp-cubic",
            "median_s": implied,
            "tcp_gbps": tcp["gbps"],
            "tcp_error": tcp["error"],
            "failures": 0,
            "runs_s": [],
        }
    )
    compare_to_fixed(rows)
    return rows, _link_row(label, link)


def summarize_pair(
    points: list[Points], spans: list[tuple[float, float]], t_end: float, settle: float
) -> dict[str, Any]:
    """Two SDR flows: each one's throughput over the overlap and Jain's index."""
    start = max(s for s, _ in spans)
    end = min(e for _, e in spans)
    a, b = window(start, end, settle) if end > start else (start, start)
    rates = [rate_between(p, a, b) for p in points]
    return {
        "window_s": [a, b],
        "gbps": [r / 1e9 for r in rates],
        "jain": jain(rates) if any(rates) else None,
        "total_gbps": sum(rates) / 1e9,
        "series": {
            "bin_s": BIN_S,
            "gbps": [binned_rate(p, t_end) for p in points],
            "spans_s": [list(s) for s in spans],
        },
    }


def run_pair(opts: Options, ws: Workspace, spec: ControllerSpec):
    """Two SDR flows with controller ``spec``: the second is launched ``pair_lead`` s
    after the first one's transfer began (and joins after its own start-up, ~2 s)."""
    label = f"pair {spec.label}"
    source = ws.payload(opts.size)
    with make_link(opts, 0.0, opts.buffers[0]) as link:
        t0 = time.monotonic()
        args = ws.send_args(opts, spec, 0.0)
        first = SdrFlow(link, SDR_PORTS[0], source, ws.tmp / "out0.bin", args, opts.sdr_timeout)
        first.started.wait(opts.sdr_timeout)
        time.sleep(opts.pair_lead)
        second = SdrFlow(link, SDR_PORTS[1], source, ws.tmp / "out1.bin", args, opts.sdr_timeout)
        first.wait()
        second.wait()
        t_end = time.monotonic() - t0
    flows = (first, second)
    row = summarize_pair(
        [f.points(t0) for f in flows], [f.span(t0) for f in flows], t_end, opts.settle
    )
    ok = all(f.error is None for f in flows)
    met = ok and row["jain"] is not None and row["jain"] >= 0.95
    row.update(
        scenario="pair", label=label, controller=spec.label, met=met,
        errors=[ws.clean(f.error) for f in flows],
        completion_s=[f.span(t0)[1] - f.span(t0)[0] for f in flows],
    )  # fmt: skip
    return row, _link_row(label, link)


def _guard(label: str, run: Callable[..., Any], *args: Any) -> Any:
    try:
        return run(*args)
    except Exception as exc:  # a failed run is a result, not a crash
        return {"label": label, "error": f"{type(exc).__name__}: {exc}"[-500:]}, None


def run_all(opts: Options, progress: Callable[[str], None]) -> dict[str, Any]:
    results: dict[str, Any] = {"compete": [], "loss": [], "pair": [], "links": []}
    with tempfile.TemporaryDirectory(prefix="sdr-cc-") as tmp:
        ws = Workspace(pathlib.Path(tmp))
        if "compete" in opts.scenarios:
            for buffer_bdp in opts.buffers:
                for tcp in opts.tcp:
                    for spec in opts.controllers:
                        progress(f"compete: {tcp} vs SDR {spec.label}, buffer {buffer_bdp:g} BDP")
                        row, link = _guard(spec.label, run_compete, opts, ws, tcp, spec, buffer_bdp)
                        results["compete"].append(row)
                        results["links"].append(link)
        if "loss" in opts.scenarios:
            for loss in opts.losses:
                rows, link = _guard(f"loss {loss:g}", run_loss, opts, ws, loss, progress)
                results["loss"] += rows if isinstance(rows, list) else [rows]
                results["links"].append(link)
        if "pair" in opts.scenarios:
            for spec in opts.pair_controllers:
                progress(f"pair: two SDR flows, {spec.label}")
                row, link = _guard(spec.label, run_pair, opts, ws, spec)
                results["pair"].append(row)
                results["links"].append(link)
    results["links"] = [link for link in results["links"] if link]
    return results


# --- reporting --------------------------------------------------------------------------
def _commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def meta(opts: Options, load_before: tuple[float, float, float]) -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_before": list(load_before),
        "command": " ".join(["python -m benchmarks.congestion_emulated", *opts.argv]),
        "commit": _commit(),
        "rate_bps": opts.rate,
        "rtt_s": opts.rtt,
        "bdp_bytes": opts.bdp,
        "queue_delay": "one-way delay of a 16-byte UDP probe A->B every 10 ms, above the "
        "idle link's smallest (measured 0.4 s before each compete run)",
        "share": "2 S / (S + T) over [SDR start + settle, SDR end]",
    }


def document(results: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """The JSON document: meta, the rows of each scenario, the emulator's reports."""
    return {"meta": info, **results}


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _q(stats: dict[str, float]) -> str:
    return f"{stats['p50']:.1f} / {stats['p95']:.1f}" if stats else "-"


def _verdict(met: bool | None) -> str:
    return "-" if met is None else ("[green]met[/]" if met else "[red]missed[/]")


def compete_table(rows: list[dict[str, Any]], title: str) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        caption="share = 2 SDR / (SDR + TCP) over the overlap; "
        "queue: one-way probe delay above idle, ms",
    )
    cols = (
        "TCP",
        "buffer",
        "SDR cc",
        "SDR s",
        "SDR Gbit/s",
        "TCP Gbit/s",
        "TCP alone",
        "share/fair",
        "target",
        "queue TCP alone p50/p95",
        "queue both p50/p95",
        "queue drops",
    )
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        if "error" in r:
            table.add_row("-", "-", r["label"], f"[red]error[/] {r['error'][:60]}", *["-"] * 8)
            continue
        done = _num(r["sdr_completion_s"]) if r["sdr_ok"] else "[red]fail[/]"
        table.add_row(
            r["tcp"], f"{r['buffer_bdp']:g} BDP", r["controller"], done, _num(r["sdr_gbps"]),
            _num(r["tcp_gbps"]), _num(r["tcp_alone_gbps"]), _num(r["share_vs_fair"], ".2f"),
            _verdict(r["share_met"]), _q(r["queue_ms"]["tcp_alone"]), _q(r["queue_ms"]["both"]),
            str(r.get("queue_drops", "-")),
        )  # fmt: skip
    return table


def loss_table(rows: list[dict[str, Any]], size: int) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title=f"SDR alone at random loss, {format_size(size)} (median of the runs)",
        box=box.SIMPLE_HEAD,
        caption="tcp-cubic: iperf3 goodput, and the time the size would take at it",
    )
    for col in ("loss", "controller", "median s", "runs s", "vs fixed", "target <= 1.05x"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        if "error" in r:
            table.add_row("-", r["label"], f"[red]error[/] {r['error'][:60]}", "-", "-", "-")
            continue
        runs = " ".join("fail" if t is None else f"{t:.2f}" for t in r.get("runs_s", []))
        if r["controller"] == "tcp-cubic":
            runs = f"{r['tcp_gbps']:.3f} Gbit/s"
        table.add_row(
            f"{r['loss']:g}", r["controller"], _num(r.get("median_s")), runs,
            _num(r.get("vs_fixed"), ".2f") + ("x" if r.get("vs_fixed") else ""),
            _verdict(r.get("met")),
        )  # fmt: skip
    return table


def pair_table(rows: list[dict[str, Any]]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title="two SDR flows at once",
        box=box.SIMPLE_HEAD,
        caption="Gbit/s over the overlap (from --settle s after the second began)",
    )
    for col in ("controller", "flow 1 s", "flow 2 s", "flow 1", "flow 2", "total", "Jain"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("target >= 0.95", justify="right", no_wrap=True)
    for r in rows:
        if "error" in r:
            table.add_row(r["label"], f"[red]error[/] {r['error'][:60]}", *["-"] * 6)
            continue
        done = [
            "[red]fail[/]" if err else _num(s)
            for s, err in zip(r["completion_s"], r["errors"], strict=True)
        ]
        table.add_row(
            r["controller"], *done, _num(r["gbps"][0]), _num(r["gbps"][1]),
            _num(r["total_gbps"]), _num(r["jain"]), _verdict(r["met"]),
        )  # fmt: skip
    return table


def failures(doc: dict[str, Any]) -> list[str]:
    """One line per failed SDR transfer (run, then the sender's or receiver's error)."""
    lines = [f"{r['label']}: {r['sdr_error']}" for r in doc["compete"] if r.get("sdr_error")]
    for r in doc["loss"]:
        lines += [f"loss {r['loss']:g} {r['controller']}: {e}" for e in r.get("errors", [])]
    for r in doc["pair"]:
        lines += [f"{r['label']} flow {i + 1}: {e}" for i, e in enumerate(r.get("errors", [])) if e]
    return lines


def print_results(doc: dict[str, Any], opts: Options) -> None:
    from rich.console import Console

    from sdr.cli.emulator_report import print_report

    console = Console(width=180)
    rate = f"{opts.rate / 1e9:g} Gbit/s, RTT {opts.rtt * 1e3:g} ms"
    if doc["compete"]:
        console.print(
            compete_table(
                doc["compete"], f"SDR ({opts.scheme}) against one kernel TCP flow, {rate}"
            )
        )
    if doc["loss"]:
        console.print(loss_table(doc["loss"], opts.loss_size))
    if doc["pair"]:
        console.print(pair_table(doc["pair"]))
    for line in failures(doc):
        console.print(f"[red]failed[/] {line}", markup=True, highlight=False)
    for link in doc["links"]:
        console.print(f"[bold]{link['run']}[/]:")
        print_report(link, console)


def write_json(doc: dict[str, Any], path: str) -> None:
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc, indent=1))


def plot(doc: dict[str, Any], path: str) -> None:
    """Throughput over time per flow (and the probe's queue delay) for every compete and
    pair run; the loss scenario as bars of completion time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    compete = [r for r in doc["compete"] if "series" in r]
    pair = [r for r in doc["pair"] if "series" in r]
    loss = [r for r in doc["loss"] if "median_s" in r]
    panels = len(compete) + len(pair) + (1 if loss else 0)
    if not panels:
        return
    cols = min(3, panels)
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.0 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax, r in zip(flat, compete, strict=False):
        _plot_compete(ax, r)
    for ax, r in zip(flat[len(compete) :], pair, strict=False):
        _plot_pair(ax, r)
    if loss:
        _plot_loss(flat[len(compete) + len(pair)], loss)
    for ax in flat[panels:]:
        ax.axis("off")
    fig.tight_layout()
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    _shrink_png(path)


def _shrink_png(path: str) -> None:
    """Re-save the figure with a 64-colour palette (a few plain colours: ~3x smaller)."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=64)
    small.save(path, optimize=True)


def _times(series: dict[str, Any], n: int) -> np.ndarray:
    return (np.arange(n) + 0.5) * series["bin_s"]


def _plot_compete(ax: Any, r: dict[str, Any]) -> None:
    s = r["series"]
    ax.plot(_times(s, len(s["tcp_gbps"])), s["tcp_gbps"], label=f"TCP {r['tcp']}", color="tab:blue")
    ax.plot(
        _times(s, len(s["sdr_gbps"])),
        s["sdr_gbps"],
        label=f"SDR {r['controller']}",
        color="tab:red",
    )
    ax.axvspan(*r["window_s"], color="0.9", zorder=0)
    ax.set_ylim(0, None)
    ax.set_ylabel("Gbit/s")
    ax.set_xlabel("s")
    share = r["share_vs_fair"]
    ax.set_title(
        f"{r['tcp']} vs {r['controller']}, {r['buffer_bdp']:g} BDP: share {share:.2f}"
        if share is not None
        else r["label"],
        fontsize=9,
    )
    q = ax.twinx()
    qs = [np.nan if v is None else v for v in s["queue_ms"]]
    q.plot(_times(s, len(qs)), qs, color="0.4", lw=0.8, ls=":", label="queue ms")
    q.set_ylabel("queue ms", fontsize=8)
    if r.get("buffer_ms"):
        q.set_ylim(0, 1.6 * r["buffer_ms"])  # a full buffer drains in buffer_ms
    lines = ax.get_legend_handles_labels()[0] + q.get_legend_handles_labels()[0]
    ax.legend(lines, [line.get_label() for line in lines], fontsize=7, loc="upper right")


def _plot_pair(ax: Any, r: dict[str, Any]) -> None:
    s = r["series"]
    for i, g in enumerate(s["gbps"]):
        ax.plot(_times(s, len(g)), g, label=f"SDR {r['controller']} #{i + 1}")
    ax.axvspan(*r["window_s"], color="0.9", zorder=0)
    ax.set_ylim(0, None)
    ax.set_xlabel("s")
    ax.set_ylabel("Gbit/s")
    jain_text = f"Jain {r['jain']:.3f}" if r["jain"] is not None else "no overlap"
    ax.set_title(f"two SDR flows, {r['controller']}: {jain_text}", fontsize=9)
    ax.legend(fontsize=7)


def _plot_loss(ax: Any, rows: list[dict[str, Any]]) -> None:
    import matplotlib.ticker

    losses = sorted({r["loss"] for r in rows})
    names = list(dict.fromkeys(r["controller"] for r in rows))
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        heights = []
        for loss in losses:
            found = [r for r in rows if r["loss"] == loss and r["controller"] == name]
            heights.append(found[0]["median_s"] if found and found[0]["median_s"] else np.nan)
        xs = np.arange(len(losses)) + i * width
        ax.bar(xs, heights, width, label=name)
        for x, h in zip(xs, heights, strict=True):
            if np.isnan(h):  # every run failed: say so where the bar would be
                ax.text(x, 0.02, "fail", rotation=90, ha="center", va="bottom", fontsize=7,
                        transform=ax.get_xaxis_transform())  # fmt: skip
    ax.set_xticks(
        np.arange(len(losses)) + width * (len(names) - 1) / 2, [f"loss {x:g}" for x in losses]
    )
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel("completion s (tcp: implied)")
    ax.set_title("alone at random loss", fontsize=9)
    ax.legend(fontsize=7)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        raise SystemExit(f"congestion_emulated: error: {exc}") from None
    from sdr.backends.wan import can_use_namespaces

    if reason := can_use_namespaces():
        raise SystemExit(f"congestion_emulated: cannot run: {reason}")
    if subprocess.run(["which", "iperf3"], capture_output=True).returncode:
        raise SystemExit("congestion_emulated: cannot run: iperf3 is not installed")
    load = os.getloadavg()
    from rich.console import Console

    console = Console(stderr=True)
    results = run_all(
        opts, lambda text: console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {text}")
    )
    doc = document(results, meta(opts, load))
    print_results(doc, opts)
    if opts.json:
        write_json(doc, opts.json)
    if opts.plot:
        plot(doc, opts.plot)
    return doc


if __name__ == "__main__":
    main()
