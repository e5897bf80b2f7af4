"""Flows through shared bottleneck queues: a packet-level discrete-event model.

One or more paths (:class:`PathSpec`), each a FIFO bottleneck queue with a rate (which
may step at given times), a buffer in bytes (tail drop), a propagation RTT and i.i.d.
random loss after the queue (the long-haul fibre's). Flows (:mod:`sdr.simulator.
bottleneck_flows`: SDR flows driven by the real :mod:`sdr.congestion` controllers, and
Reno/CUBIC window models) send packets onto paths; every delivered packet is ACKed one
propagation RTT after it leaves the queue (plus the flow's ``extra_rtt``), and the ACK
carries the RTT sample and the packets of that flow and path lost since the previous one
(what a receiver's gap detection or SACK reports; per path, so spreading over paths with
different delays is not read as loss). Tail losses are reported by a retransmit timeout.

It is a heapq event loop, no simpy: a packet costs two events (its send opportunity and
its ACK). The queue is computed at arrival: a FIFO with a known service rate gives each
packet its departure time when it arrives, with the rate in effect when its service
starts.

    engine = Bottleneck([PathSpec(rate=1e9, rtt=0.025, buffer=3_125_000)])
    engine.add(SdrFlow(controller_for("delay", 1e9), size=64 << 20))
    result = engine.run(until=5.0)
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sdr.errors import ConfigError

if TYPE_CHECKING:
    from sdr.simulator.bottleneck_flows import SimFlow

__all__ = ["Bottleneck", "BottleneckResult", "PathSpec", "jain"]

_WAKE, _ACK, _RTO = 0, 1, 2
_Ack = tuple[int, int, float, list[tuple[int, float]] | None]
"""What an ``_ACK`` event carries: (path, size, sent time, losses it reports or None)."""


@dataclass(frozen=True)
class PathSpec:
    """One path: bottleneck ``rate`` (bits/s), ``rtt`` (propagation, s), ``buffer``
    (bytes), random ``loss`` per packet after the queue, ``steps``: ``(time, rate)``
    capacity changes, and ``jitter``: each packet reaches the queue up to that many
    seconds late (uniform; host and NIC jitter). Without it, equal pacers meeting at a
    full tail-drop queue lock in phase and one of them loses every packet (Floyd and
    Jacobson's phase effects), which no real network shows."""

    rate: float
    rtt: float
    buffer: int
    loss: float = 0.0
    steps: tuple[tuple[float, float], ...] = ()
    jitter: float = 50e-6

    def __post_init__(self) -> None:
        if not self.rate > 0 or not self.rtt > 0 or not self.buffer > 0:
            raise ConfigError(f"path needs rate, rtt and buffer > 0, got {self!r}")
        if not 0 <= self.jitter < self.rtt:
            raise ConfigError(f"path jitter must be in [0, rtt), got {self.jitter!r}")
        if not 0 <= self.loss < 1:
            raise ConfigError(f"path loss must be in [0, 1), got {self.loss!r}")
        if list(self.steps) != sorted(self.steps):
            raise ConfigError(f"path steps must be in time order, got {self.steps!r}")


class _Queue:
    """The FIFO of one path: departure times computed at arrival, tail drop."""

    def __init__(self, spec: PathSpec, seed: int) -> None:
        self.spec = spec
        self.last_depart = 0.0
        self.backlog: deque[tuple[float, int]] = deque()  # (departure, bytes)
        self.occupied = 0
        self.random = random.Random(seed)
        self._times = [t for t, _ in spec.steps]
        self._rates = [r for _, r in spec.steps]
        self.samples_t: list[float] = []
        self.samples_q: list[float] = []  # queueing delay, s
        self.drops = 0
        self.drop_t: list[float] = []  # when the buffer dropped a packet
        self.random_losses = 0

    def rate_at(self, t: float) -> float:
        i = bisect.bisect_right(self._times, t)
        return self.spec.rate if i == 0 else self._rates[i - 1]

    def arrive(self, now: float, size: int, sample: bool) -> float | None:
        """Departure time of a packet arriving now, or None when the buffer drops it."""
        backlog = self.backlog
        while backlog and backlog[0][0] <= now:
            self.occupied -= backlog.popleft()[1]
        start = max(now, self.last_depart)
        if sample:
            self.samples_t.append(now)
            self.samples_q.append(start - now)
        if self.occupied + size > self.spec.buffer:
            self.drops += 1
            self.drop_t.append(now)
            return None
        depart = start + size * 8 / self.rate_at(start)
        self.last_depart = depart
        backlog.append((depart, size))
        self.occupied += size
        return depart


@dataclass
class BottleneckResult:
    """What a run measured: the flows (with their logs) and each path's queue samples."""

    until: float
    flows: list[SimFlow]
    queue_t: list[np.ndarray]
    queue_delay: list[np.ndarray]
    drops: list[int]
    random_losses: list[int]
    drop_t: list[np.ndarray] = field(default_factory=list)
    paths: list[PathSpec] = field(default_factory=list)

    def throughput(self, flow: int, bin_s: float, until: float | None = None) -> np.ndarray:
        """Delivered bits/s of ``flow`` per bin of ``bin_s`` seconds from t = 0."""
        f = self.flows[flow]
        end = self.until if until is None else until
        edges = np.arange(0.0, end + bin_s / 2, bin_s)
        counts, _ = np.histogram(np.asarray(f.ack_t), bins=edges, weights=np.asarray(f.ack_b))
        return counts * 8 / bin_s


def jain(rates: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index of ``rates``: 1 when equal, 1/n when one flow has it all."""
    x = np.asarray(rates, dtype=float)
    denom = len(x) * float(np.sum(x * x))
    return float(np.sum(x) ** 2 / denom) if denom > 0 else 1.0


class Bottleneck:
    """The event loop: paths, flows, a clock that only this loop advances."""

    def __init__(self, paths: Sequence[PathSpec], *, seed: int = 0, sample_s: float = 1e-3):
        if not paths:
            raise ConfigError("a bottleneck needs at least one path")
        self.paths = list(paths)
        self.queues = [_Queue(p, seed * 1000 + i) for i, p in enumerate(self.paths)]
        self.flows: list[SimFlow] = []
        self.now = 0.0
        self.sample_s = sample_s
        self._next_sample = [0.0] * len(self.paths)
        self._heap: list[tuple[float, int, int, int, _Ack | None]] = []
        self._counter = 0
        # (flow, path) -> [(size, sent time)] lost and not yet reported
        self._pending: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self._wake_at: list[float] = []
        self._rto_armed: list[bool] = []

    def add(self, flow: SimFlow) -> int:
        """Add ``flow``; its first send opportunity is at ``flow.start``."""
        index = len(self.flows)
        self.flows.append(flow)
        self._wake_at.append(math.inf)
        self._rto_armed.append(False)
        flow.attach(self, index)
        self._wake(index, flow.start)
        return index

    def _push(self, t: float, kind: int, flow: int, data: _Ack | None) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (t, self._counter, kind, flow, data))

    def _wake(self, flow: int, t: float | None) -> None:
        if t is not None and t < self._wake_at[flow]:
            self._wake_at[flow] = t
            self._push(t, _WAKE, flow, None)

    def transmit(self, now: float, flow: int, path: int, size: int) -> None:
        """Put a packet of ``size`` bytes from ``flow`` onto ``path`` at ``now``."""
        queue = self.queues[path]
        sample = now >= self._next_sample[path]
        if sample:
            self._next_sample[path] = now + self.sample_s
        jitter = queue.spec.jitter
        depart = queue.arrive(now + jitter * queue.random.random() if jitter else now, size, sample)
        key = (flow, path)
        if depart is None or (queue.spec.loss and queue.random.random() < queue.spec.loss):
            if depart is not None:
                queue.random_losses += 1
            self._pending.setdefault(key, []).append((size, now))
        else:
            lost = self._pending.pop(key, None)
            ack = depart + queue.spec.rtt + self.flows[flow].extra_rtt
            self._push(ack, _ACK, flow, (path, size, now, lost))
        if not self._rto_armed[flow]:
            self._rto_armed[flow] = True
            self._push(now + self.flows[flow].rto(), _RTO, flow, None)

    def run(self, until: float) -> BottleneckResult:
        """Run to ``until`` seconds (or until nothing is left to happen)."""
        heap, flows = self._heap, self.flows
        while heap and heap[0][0] <= until:
            t, _, kind, index, data = heapq.heappop(heap)
            self.now = t
            flow = flows[index]
            if kind == _ACK:
                assert data is not None  # only ACK events carry data, and they all do
                path, size, sent, lost = data
                flow.on_ack(t, path, size, t - sent, lost or ())
            elif kind == _WAKE:
                if t != self._wake_at[index]:
                    continue  # superseded by an earlier wake-up
                self._wake_at[index] = math.inf
            else:
                self._rto_armed[index] = False
                self._timeout(t, index)
            self._wake(index, flow.wake(t))
        self.now = until
        return BottleneckResult(
            until=until,
            flows=flows,
            queue_t=[np.asarray(q.samples_t) for q in self.queues],
            queue_delay=[np.asarray(q.samples_q) for q in self.queues],
            drops=[q.drops for q in self.queues],
            random_losses=[q.random_losses for q in self.queues],
            drop_t=[np.asarray(q.drop_t) for q in self.queues],
            paths=self.paths,
        )

    def _timeout(self, now: float, index: int) -> None:
        """The retransmit timer: tail losses no later packet reported are reported now."""
        flow = self.flows[index]
        rto = flow.rto()
        keys = [k for k in self._pending if k[0] == index]
        if keys and now - flow.last_ack >= rto:
            for key in keys:
                flow.on_timeout(now, key[1], self._pending.pop(key))
        if keys or flow.busy():
            self._rto_armed[index] = True
            self._push(now + rto, _RTO, index, None)
