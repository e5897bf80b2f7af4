"""The emulator's event loop: read packets from two ports, impair, deliver on time.

A port is anything with ``fileno()``, ``read_many(limit) -> list[bytes]`` (non-blocking)
and ``write(bytes)``: a TUN device or a UDP relay socket. One loop serves both
directions, on one core. ``select`` with sub-millisecond timeouts keeps delivery times
accurate (epoll through ``selectors`` rounds timeouts to whole milliseconds).
"""

from __future__ import annotations

import heapq
import itertools
import select
import time
from collections.abc import Callable
from typing import Protocol

from sdr.backends.wan.impairment import LinkDirection, LinkSpec

__all__ = ["Port", "Forwarder"]

_MAX_IDLE_WAIT_S = 0.05
_READ_BURST = 64


class Port(Protocol):
    def fileno(self) -> int: ...

    def read_many(self, limit: int) -> list[bytes]: ...

    def write(self, packet: bytes) -> None: ...


class Forwarder:
    """Moves packets a->b and b->a through two impaired link directions.

    ``pairs`` are (a-side port, b-side port) couples; a packet read on one side of a couple
    is written on the other side of the same couple. Every couple shares the link: one
    queue, one rate and one loss process per direction.
    """

    def __init__(
        self,
        pairs: list[tuple[Port, Port]],
        a_to_b: LinkSpec,
        b_to_a: LinkSpec,
        corrupt_skip: int = 28,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ports = [port for pair in pairs for port in pair]  # even index: a side
        self.directions = (LinkDirection(a_to_b), LinkDirection(b_to_a))
        self.corrupt_skip = corrupt_skip
        self.clock = clock
        self._heap: list[tuple[float, int, int, bytes]] = []
        self._order = itertools.count()
        self.stats = {"forwarded": 0, "max_lateness_s": 0.0}

    def _ingest(self, index: int, now: float) -> int:
        port, direction, out = self.ports[index], self.directions[index % 2], index ^ 1
        packets = port.read_many(_READ_BURST)
        for packet in packets:
            verdict = direction.admit(now, len(packet))
            if verdict.corrupt:
                mutable = bytearray(packet)
                direction.corrupt_bytes(mutable, self.corrupt_skip)
                packet = bytes(mutable)
            for when in verdict.deliver_at:
                heapq.heappush(self._heap, (when, next(self._order), out, packet))
        return len(packets)

    def _deliver(self, now: float) -> None:
        heap, ports, stats = self._heap, self.ports, self.stats
        while heap and heap[0][0] <= now:
            when, _, out, packet = heapq.heappop(heap)
            ports[out].write(packet)
            stats["forwarded"] += 1
            late = now - when
            if late > stats["max_lateness_s"]:
                stats["max_lateness_s"] = late

    def run(self, should_stop: Callable[[], bool], until: float | None = None) -> None:
        """Forward until ``should_stop()`` is true (checked at least every 50 ms)."""
        fds = [p.fileno() for p in self.ports]
        while not should_stop():
            now = self.clock()
            if until is not None and now >= until:
                return
            wait = _MAX_IDLE_WAIT_S
            if self._heap:
                wait = min(wait, max(0.0, self._heap[0][0] - now))
            ready, _, _ = select.select(fds, [], [], wait)
            now = self.clock()
            for index, fd in enumerate(fds):
                if fd in ready:
                    while self._ingest(index, now) == _READ_BURST:
                        now = self.clock()
            self._deliver(self.clock())

    def summary(self) -> dict[str, object]:
        """Counters of both directions and of the loop."""
        return {
            "a_to_b": dict(self.directions[0].stats),
            "b_to_a": dict(self.directions[1].stats),
            **self.stats,
        }
