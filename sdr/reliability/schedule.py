"""Which of a connection's machines a round must run.

A connection holds one machine per message in flight, and most of them have nothing to
do in a given round: no event reached them and their timers are not due. Asking each
for its timer every round made a round cost the number of messages in flight (16 on a
file transfer, more on a long link) instead of what happened in it. A schedule keeps
each machine's timer as last asked and the machines an event reached since; a round runs
those, and those whose timer is due, and asks them again.

The rule that keeps it right: a machine's timer moves earlier only through an event
delivered to it (its owner calls :meth:`Schedule.touch`) or through running it (its
owner calls :meth:`Schedule.ran`). Anything else that can move a timer earlier makes
the owner touch every machine (:meth:`touch_all`). A timer that moved later (a held
deadline) only makes a round run a machine that then finds nothing due.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

__all__ = ["Schedule"]


class Timed(Protocol):
    def next_timer(self) -> float | None: ...

    def has_work(self) -> bool: ...


class Schedule:
    """Cached timers and touched machines, keyed by message sequence number."""

    def __init__(self) -> None:
        self._timers: dict[int, float] = {}
        self._touched: set[int] = set()

    def touch(self, seq: int) -> None:
        """An event reached machine ``seq`` (or it was created): run it next round."""
        self._touched.add(seq)

    def touch_all(self) -> None:
        """Something every timer depends on moved earlier: run them all next round."""
        self._touched.update(self._timers)

    def forget(self, seq: int) -> None:
        """Machine ``seq`` is over."""
        self._timers.pop(seq, None)
        self._touched.discard(seq)

    def due(self, now: float) -> list[int]:
        """The machines to run at ``now``, in sequence order (touched or timer due)."""
        run = self._touched.union(seq for seq, t in self._timers.items() if t <= now)
        self._touched = set()
        return sorted(run)

    def ran(self, seq: int, machine: Timed) -> None:
        """Machine ``seq`` ran: keep its timer; one with work runs again next round."""
        timer = machine.next_timer()
        self._timers[seq] = math.inf if timer is None else timer
        if machine.has_work():
            self._touched.add(seq)

    def next_timer(self, machine_of: Callable[[int], Timed | None]) -> float | None:
        """The earliest timer (None: none); a touched machine is asked again (through
        ``machine_of``, None for one that is over), so this is never later than the
        machines' own."""
        timer = min(self._timers.values(), default=math.inf)
        for seq in self._touched:
            machine = machine_of(seq)
            own = None if machine is None else machine.next_timer()
            if own is not None and own < timer:
                timer = own
        return None if math.isinf(timer) else timer
