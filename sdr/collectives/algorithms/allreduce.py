"""Allreduce plans, written in the DSL.

- ``allreduce_oneshot_ll``: every rank sends its whole input to every peer as LL packets
  and reduces locally. One step, no semaphores: the latency choice for small messages.
- ``allreduce_oneshot``: the same through scratch with put + one signal/wait round; with
  two ranks it moves as many bytes over the link as the two-shot but synchronises once
  and needs no copy-out phase.
- ``allreduce_oneshot_get``: every rank copies its input into its own scratch and signals;
  peers then reduce straight out of each other's scratch (reads over the link fused with
  the reduction, no second pass).
- ``allreduce_twoshot_ll``: reduce-scatter then allgather, both over LL packets; each rank
  moves 2 (n-1)/n of the data twice as packets. Medium messages.
- ``allreduce_twoshot``: the same two phases through scratch with put + signal/wait;
  bandwidth-efficient (no flag overhead) for large messages.
- ``allreduce_ring``: reduce-scatter and allgather around a ring, 2 (n-1) steps, each rank
  talks to its two neighbours only; for many ranks.
"""

from __future__ import annotations

from sdr.collectives.dsl import Program
from sdr.collectives.plan import Plan


def slot(sender: int, receiver: int) -> int:
    """Index of ``sender``'s slot among the ``n - 1`` peer slots of ``receiver``."""
    return sender if sender < receiver else sender - 1


def allreduce_oneshot_ll(n: int) -> Plan:
    """One-shot allreduce over LL packets (see module docs)."""
    prog = Program("allreduce_oneshot_ll", "allreduce", n, input=1, output=1, packets=n - 1)
    for rp in prog.ranks():
        r = rp.rank
        for p in prog.peers(r):
            rp.put(rp.input(0), p, rp.packets(slot(r, p)))
        rp.reduce(rp.output(0), [rp.input(0)] + [rp.packets(slot(p, r)) for p in prog.peers(r)])
    return prog.compile()


def allreduce_oneshot(n: int) -> Plan:
    """One-shot allreduce through scratch: put everything, one signal round, reduce."""
    prog = Program("allreduce_oneshot", "allreduce", n, input=1, output=1, scratch=n - 1)
    for rp in prog.ranks():
        r = rp.rank
        peers = prog.peers(r)
        for p in peers:
            rp.put(rp.input(0), p, rp.scratch(slot(r, p)))
        for p in peers:
            rp.signal(p)
        for p in peers:
            rp.wait(p)
        rp.reduce(rp.output(0), [rp.input(0)] + [rp.scratch(slot(p, r)) for p in peers])
    return prog.compile()


def allreduce_oneshot_get(n: int) -> Plan:
    """One-shot allreduce that reads peers' scratch inside the reduction (see module docs)."""
    prog = Program("allreduce_oneshot_get", "allreduce", n, input=1, output=1, scratch=1)
    for rp in prog.ranks():
        r = rp.rank
        peers = prog.peers(r)
        rp.copy(rp.input(0), rp.scratch(0))
        for p in peers:
            rp.signal(p)
        for p in peers:
            rp.wait(p)
        rp.reduce(rp.output(0), [rp.input(0)] + [rp.scratch(0, rank=p) for p in peers])
    return prog.compile()


def allreduce_twoshot_ll(n: int) -> Plan:
    """Reduce-scatter + allgather over LL packets (see module docs)."""
    prog = Program("allreduce_twoshot_ll", "allreduce", n, input=n, output=n, packets=2 * (n - 1))
    for rp in prog.ranks():
        r = rp.rank
        peers = prog.peers(r)
        for p in peers:
            rp.put(rp.input(p), p, rp.packets(slot(r, p)))
        rp.reduce(rp.output(r), [rp.input(r)] + [rp.packets(slot(p, r)) for p in peers])
        for p in peers:
            rp.put(rp.output(r), p, rp.packets(n - 1 + slot(r, p)))
        for p in peers:
            rp.copy(rp.packets(n - 1 + slot(p, r)), rp.output(p))
    return prog.compile()


def allreduce_twoshot(n: int) -> Plan:
    """Reduce-scatter + allgather through scratch with put and semaphores."""
    prog = Program("allreduce_twoshot", "allreduce", n, input=n, output=n, scratch=2 * (n - 1))
    for rp in prog.ranks():
        r = rp.rank
        peers = prog.peers(r)
        for p in peers:
            rp.put(rp.input(p), p, rp.scratch(slot(r, p)))
        for p in peers:
            rp.signal(p)
        for p in peers:
            rp.wait(p)
        rp.reduce(rp.output(r), [rp.input(r)] + [rp.scratch(slot(p, r)) for p in peers])
        for p in peers:
            rp.put(rp.output(r), p, rp.scratch(n - 1 + slot(r, p)))
        for p in peers:
            rp.signal(p)
        for p in peers:
            rp.wait(p)
        for p in peers:
            rp.copy(rp.scratch(n - 1 + slot(p, r)), rp.output(p))
    return prog.compile()


def allreduce_ring(n: int) -> Plan:
    """Ring allreduce: n-1 reduce-scatter steps, then n-1 allgather steps."""
    prog = Program("allreduce_ring", "allreduce", n, input=n, output=n, scratch=2 * (n - 1))
    for rp in prog.ranks():
        r = rp.rank
        if n == 1:
            rp.copy(rp.input(0), rp.output(0))
            continue
        right, left = (r + 1) % n, (r - 1) % n
        for s in range(n - 1):
            send = (r - s) % n
            rp.put(rp.input(send) if s == 0 else rp.output(send), right, rp.scratch(s))
            rp.signal(right)
            rp.wait(left)
            recv = (r - s - 1) % n
            rp.reduce(rp.output(recv), [rp.input(recv), rp.scratch(s)])
        for s in range(n - 1):
            rp.put(rp.output((r + 1 - s) % n), right, rp.scratch(n - 1 + s))
            rp.signal(right)
            rp.wait(left)
            rp.copy(rp.scratch(n - 1 + s), rp.output((r - s) % n))
    return prog.compile()
