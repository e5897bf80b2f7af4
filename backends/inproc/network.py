"""A seeded, lossy in-process "wire" joining in-process endpoints.

Faults are injected per packet from one seeded NumPy generator, so a test with a fixed
seed sees the same drops, duplicates, reorderings and delays every run:

- drop / control_drop: probability a data / control packet vanishes;
- duplicate: probability a packet is delivered twice;
- reorder: probability a packet is held back until ``reorder_gap`` later packets to the
  same endpoint have been sent (or the wire is otherwise idle);
- delay, jitter: one-way delay in seconds, plus a uniform extra up to ``jitter``.

Like a NIC's receive queue, each endpoint's queue of control messages delivered but not
yet taken is bounded (:data:`sdr.queue_pair.MAX_QUEUED_CONTROL`): later ones are dropped
(tail drop) and counted (``stats["control_dropped"]``, and per endpoint in
:meth:`InprocNetwork.take_control`).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sdr.errors import ConfigError
from sdr.queue_pair import MAX_QUEUED_CONTROL

__all__ = ["Faults", "InprocNetwork", "ManualClock"]


class ManualClock:
    """A clock that moves only when told to (deterministic tests)."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass(frozen=True)
class Faults:
    """Fault-injection probabilities and delays of the in-process wire."""

    drop: float = 0.0
    control_drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_gap: int = 3
    delay: float = 0.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        for name in ("drop", "control_drop", "duplicate", "reorder"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be a probability in [0, 1], got {value!r}")
        if self.delay < 0 or self.jitter < 0 or self.reorder_gap < 1:
            raise ConfigError("delay and jitter must be >= 0 s, reorder_gap >= 1")


class InprocNetwork:
    """The wire between in-process endpoints, with seeded fault injection."""

    _ids = itertools.count(1)

    def __init__(
        self, seed: int = 0, clock: Callable[[], float] | None = None, **faults: Any
    ) -> None:
        self.id = next(self._ids)
        self.faults = Faults(**faults)
        self.clock = clock or time.monotonic
        self._rng = np.random.default_rng(seed)
        self._heap: list[tuple[float, int, int, Any]] = []
        self._order = itertools.count()
        self._inboxes: dict[int, deque[Any]] = {}
        self._held: dict[int, list[tuple[int, Any]]] = {}
        self._sent_to: dict[int, int] = {}
        self._endpoint_ids = itertools.count(1)
        self.max_control = MAX_QUEUED_CONTROL
        """Control messages an endpoint may have delivered and not yet taken."""
        self._control_queued: dict[int, int] = {}
        self._control_dropped: dict[int, int] = {}
        self.stats = {
            "sent": 0,
            "dropped": 0,
            "duplicated": 0,
            "reordered": 0,
            "control_dropped": 0,
        }

    def attach(self) -> int:
        """A new endpoint id on this wire."""
        eid = next(self._endpoint_ids)
        self._inboxes[eid] = deque()
        self._held[eid] = []
        self._sent_to[eid] = 0
        self._control_queued[eid] = self._control_dropped[eid] = 0
        return eid

    def detach(self, eid: int) -> None:
        self._inboxes.pop(eid, None)
        self._held.pop(eid, None)
        self._control_queued.pop(eid, None)
        self._control_dropped.pop(eid, None)

    def take_control(self, eid: int) -> int:
        """Endpoint ``eid`` took every control message delivered to it: its bound starts
        afresh. Returns how many were dropped for it (queue full) since the last call."""
        if eid not in self._control_queued:
            return 0  # detached
        self._control_queued[eid] = 0
        dropped, self._control_dropped[eid] = self._control_dropped[eid], 0
        return dropped

    def send(self, dst: int, item: Any, control: bool = False) -> None:
        """Put one packet on the wire towards endpoint ``dst``."""
        if dst not in self._inboxes:
            return  # peer gone: the packet is lost, as on a real network
        f, rng = self.faults, self._rng
        self.stats["sent"] += 1
        if rng.random() < (f.control_drop if control else f.drop):
            self.stats["dropped"] += 1
            return
        copies = 2 if f.duplicate and rng.random() < f.duplicate else 1
        self.stats["duplicated"] += copies - 1
        self._sent_to[dst] += 1
        count = self._sent_to[dst]
        for _ in range(copies):
            if f.reorder and rng.random() < f.reorder:
                self.stats["reordered"] += 1
                self._held[dst].append((count + f.reorder_gap, item))
            else:
                self._schedule(dst, item)
        held = self._held[dst]
        if held and any(release <= count for release, _ in held):
            for _release, held_item in [h for h in held if h[0] <= count]:
                self._schedule(dst, held_item)
            self._held[dst] = [h for h in held if h[0] > count]

    def _schedule(self, dst: int, item: Any) -> None:
        f = self.faults
        extra = self._rng.random() * f.jitter if f.jitter else 0.0
        heapq.heappush(self._heap, (self.clock() + f.delay + extra, next(self._order), dst, item))

    def pump(self) -> None:
        """Move every packet whose time has come into its endpoint's inbox."""
        now = self.clock()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, dst, item = heapq.heappop(heap)
            inbox = self._inboxes.get(dst)
            if inbox is None:
                continue
            if isinstance(item, bytes):  # a control message (data packets are tuples)
                if self._control_queued[dst] >= self.max_control:
                    self._control_dropped[dst] += 1  # nobody takes them: tail drop
                    self.stats["control_dropped"] += 1
                    continue
                self._control_queued[dst] += 1
            inbox.append(item)
        if not heap:  # idle wire: let held-back packets go
            for dst, held in self._held.items():
                for _, item in held:
                    self._schedule(dst, item)
                held.clear()

    def inbox(self, eid: int) -> deque[Any]:
        self.pump()
        return self._inboxes[eid]

    def next_delivery(self) -> float | None:
        """When the next packet lands (None when nothing is in flight)."""
        if self._heap:
            return self._heap[0][0]
        return self.clock() if any(self._held.values()) else None
