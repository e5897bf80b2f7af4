"""The emulator's event loop: read packets from two ports, impair, deliver on time.

What the link does to the packets is decided by the one link model
(:class:`sdr.simulator.link_model.LinkDirection`, the same state machine the simulator
schedules), one burst of packets at a time; this loop only applies the decisions: it drops,
flips the decided bit, and writes each copy when its delivery time has come.

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

import numpy as np

from sdr.errors import ConfigError
from sdr.simulator.link_model import LinkDirection, LinkSpec, flip_bit
from sdr.simulator.loss import GilbertElliott, LossModel

__all__ = ["LATE_AFTER_S", "REPORT_KEYS", "Forwarder", "Port", "direction_report"]

_MAX_IDLE_WAIT_S = 0.05
_READ_BURST = 64

LATE_AFTER_S = 1e-3
"""A copy written more than this after its delivery time counts as late (seconds)."""

REPORT_KEYS = (
    "packets",
    "delivered",
    "drops_random_loss",
    "drops_burst_loss",
    "drops_queue",
    "drops_blackout",
    "corrupted",
    "duplicated",
    "reordered",
    "late_packets",
    "max_lateness_s",
    "set_delay_s",
)
"""Keys of one direction in :meth:`Forwarder.report` (the native forwarder's too)."""


def direction_report(
    spec: LinkSpec,
    counts: dict[str, int | float],
    loss_model: LossModel | None,
    late: int,
    max_lateness_s: float,
) -> dict[str, int | float]:
    """What one direction did, in :data:`REPORT_KEYS`, from its link counters ``counts``
    (:class:`~sdr.simulator.link_model.LinkStats` names). Losses decided by a
    Gilbert-Elliott model are burst losses, those of any other model random losses.
    ``max_lateness_s`` is how long after its delivery time (queueing + serialization + the
    set delay + any reorder hold) the latest copy was written."""
    burst = isinstance(loss_model, GilbertElliott)
    loss = int(counts["loss_drops"])
    return {
        "packets": int(counts["packets"]),
        "delivered": int(counts["delivered"]),
        "drops_random_loss": 0 if burst else loss,
        "drops_burst_loss": loss if burst else 0,
        "drops_queue": int(counts["queue_drops"]),
        "drops_blackout": int(counts["blackout_drops"]),
        "corrupted": int(counts["corrupted"]),
        "duplicated": int(counts["duplicated"]),
        "reordered": int(counts["reordered"]),
        "late_packets": int(late),
        "max_lateness_s": float(max_lateness_s),
        "set_delay_s": float(spec.one_way_delay),
    }


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
        if any(getattr(port, "offload", 0) for port in self.ports):
            raise ConfigError(
                "a TUN device with offloads (virtio headers, GSO) needs the native forwarder"
            )
        self.directions = (LinkDirection(a_to_b), LinkDirection(b_to_a))
        self.corrupt_skip = corrupt_skip
        self.clock = clock
        self._heap: list[tuple[float, int, int, bytes]] = []
        self._order = itertools.count()
        self.stats = {"forwarded": 0, "max_lateness_s": 0.0}
        self._late = [0, 0]  # per direction: copies written > LATE_AFTER_S after due
        self._max_late = [0.0, 0.0]

    def _ingest(self, index: int) -> int:
        packets = self.ports[index].read_many(_READ_BURST)
        # stamped after the read: a clock read before it would predate packets that came
        # while this loop was descheduled, and they would leave early
        self.offer(index, self.clock(), packets)
        return len(packets)

    def offer(self, index: int, now: float, packets: list[bytes]) -> None:
        """Packets read on port ``index`` at ``now`` enter their direction of the link.

        The link decides their fate at once; the copies that survive wait for their
        delivery time (see :meth:`take_due`). No I/O.
        """
        if not packets:
            return
        direction, out = self.directions[index % 2], index ^ 1
        n = len(packets)
        sizes = np.fromiter(map(len, packets), np.float64, count=n)
        decided = direction.offer(np.full(n, now), sizes)
        dup, bad = decided.duplicate_at, decided.corrupt
        push, order, heap = heapq.heappush, self._order, self._heap
        for i in np.flatnonzero(decided.cause == 0).tolist():
            packet = packets[i]
            if bad is not None and bad[i]:
                mutable = bytearray(packet)
                assert decided.where is not None and decided.bit is not None
                flip_bit(mutable, self.corrupt_skip, float(decided.where[i]), int(decided.bit[i]))
                packet = bytes(mutable)
            push(heap, (float(decided.arrive[i]), next(order), out, packet))
            if dup is not None and dup[i] == dup[i]:
                push(heap, (float(dup[i]), next(order), out, packet))

    def take_due(self, now: float) -> list[tuple[float, int, bytes]]:
        """Every packet due by ``now``, as (delivery time, port index, packet), in order."""
        heap, due = self._heap, []
        while heap and heap[0][0] <= now:
            when, _, out, packet = heapq.heappop(heap)
            due.append((when, out, packet))
        return due

    def _deliver(self, now: float) -> None:
        ports, stats, late_n, max_late = self.ports, self.stats, self._late, self._max_late
        clock = self.clock
        for when, out, packet in self.take_due(now):
            ports[out].write(packet)
            stats["forwarded"] += 1
            late = clock() - when  # after the write: how late the copy really left
            if late > stats["max_lateness_s"]:
                stats["max_lateness_s"] = late
            k = (out ^ 1) % 2  # written on a b-side port (odd): direction 0, a to b
            if late > max_late[k]:
                max_late[k] = late
            if late > LATE_AFTER_S:
                late_n[k] += 1

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
            for index, fd in enumerate(fds):
                if fd in ready:
                    while self._ingest(index) == _READ_BURST:
                        pass
            self._deliver(self.clock())

    def report(self) -> dict[str, dict[str, int | float]]:
        """What the emulator did, per direction (:data:`REPORT_KEYS`): drops by cause,
        corrupted, duplicated, reordered, late copies and the largest lateness."""
        return {
            name: direction_report(
                d.spec, d.stats.as_dict(), d.loss, self._late[k], self._max_late[k]
            )
            for k, (name, d) in enumerate(zip(("a_to_b", "b_to_a"), self.directions, strict=True))
        }

    def summary(self) -> dict[str, object]:
        """Counters of both directions and of the loop, and :meth:`report`."""
        return {
            "a_to_b": self.directions[0].stats.as_dict(),
            "b_to_a": self.directions[1].stats.as_dict(),
            **self.stats,
            "report": self.report(),
        }
