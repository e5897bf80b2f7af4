"""The emulated link of ``benchmarks.congestion_emulated``: a fresh TunLink per run, the
one-way delay probe that measures its queue, and the rows of what the emulator did."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

from benchmarks.congestion_emulated_parts.options import Options
from sdr.backends.wan import LinkSpec, TunLink, enter_namespace

PROBE_PORT = 5399


def make_link(opts: Options, loss: float, buffer_bdp: float) -> TunLink:
    """A TunLink with the options' rate and RTT, ``buffer_bdp`` BDPs of buffer."""
    queue = int(max(buffer_bdp * opts.bdp, 64 << 10))
    spec = LinkSpec(rate=opts.rate, rtt=opts.rtt, queue=queue, loss=loss, seed=opts.seed)
    return TunLink(spec, mtu=opts.tun_mtu, forwarder=opts.forwarder)


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
        enter_namespace(self.link.ns_a)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            next_at = time.monotonic()
            while not self._stop.wait(max(0.0, next_at - time.monotonic())):
                sock.sendto(
                    struct.pack("!dQ", time.monotonic(), self.sent), (self.link.addr_b, PROBE_PORT)
                )
                self.sent += 1
                next_at += self.interval


def idle_floor(probe: OneWayProbe, seconds: float = 0.4) -> float:
    """The one-way delay of the idle link: the smallest probe delay over ``seconds``."""
    time.sleep(seconds)
    delays = [d for _, d in probe.samples]
    return min(delays) if delays else 0.0


def queue_ms(probe: OneWayProbe, floor: float) -> list[tuple[float, float]]:
    """The probe's samples as (time, ms of queueing delay above ``floor``)."""
    return [(t, max(0.0, d - floor) * 1e3) for t, d in list(probe.samples)]


def link_row(label: str, link: Any) -> dict[str, Any]:
    """What the emulator did on ``link``, named by the run: a row of the JSON's links."""
    return {"run": label, **link.summary}


def drops(summary: dict[str, Any], key: str) -> int | None:
    """The A-to-B counter ``key`` of the forwarder's report (None when it sent none)."""
    report = summary.get("report") or {}
    return report.get("a_to_b", {}).get(key)
