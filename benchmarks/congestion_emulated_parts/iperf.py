"""Kernel TCP in ``benchmarks.congestion_emulated``: iperf3 from namespace A to B with
its congestion control set per socket, its 0.1 s interval lines read as they come and
turned into cumulative bytes over time; the namespaces' TCP buffer ceilings raised."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.congestion_emulated_parts.metrics import Points
from sdr.backends.wan import netns_exec

IPERF_PORT = 5201
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


def tune_tcp(link: Any, buffer: int) -> None:
    """Let TCP's socket buffers grow to ``buffer`` bytes in both namespaces (a new
    namespace caps the send buffer at 4 MiB, less than a BDP plus a BDP of queue)."""
    for ns in (link.ns_a, link.ns_b):
        for key in ("net.ipv4.tcp_wmem", "net.ipv4.tcp_rmem"):
            value = f"4096 131072 {buffer}"
            subprocess.run(
                netns_exec(ns, "sysctl", "-q", "-w", f"{key}={value}"), check=True, timeout=10
            )


class IperfFlow:
    """iperf3 from A to B with congestion control ``cc``, until :meth:`stop` (or
    ``seconds``); its 0.1 s interval lines are read as they come."""

    def __init__(self, link: Any, cc: str, seconds: float = 600.0) -> None:
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
