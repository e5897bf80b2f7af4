"""Allgather, reduce-scatter and broadcast plans, written in the DSL.

Each comes in an LL-packet flavour (one step, flags instead of semaphores: small messages)
and a scratch flavour (put + signal/wait: large messages).
"""

from __future__ import annotations

from sdr.collectives.algorithms.allreduce import slot
from sdr.collectives.dsl import Program
from sdr.collectives.plan import Plan


def allgather_ll(n: int) -> Plan:
    """Every rank sends its input to every peer as LL packets; full mesh, one step."""
    prog = Program("allgather_ll", "allgather", n, input=1, output=n, packets=n - 1)
    for rp in prog.ranks():
        r = rp.rank
        for p in prog.peers(r):
            rp.put(rp.input(0), p, rp.packets(slot(r, p)))
        rp.copy(rp.input(0), rp.output(r))
        for p in prog.peers(r):
            rp.copy(rp.packets(slot(p, r)), rp.output(p))
    return prog.compile()


def allgather_mesh(n: int) -> Plan:
    """Full-mesh allgather through scratch: put, signal, wait, copy out."""
    prog = Program("allgather_mesh", "allgather", n, input=1, output=n, scratch=n - 1)
    for rp in prog.ranks():
        r = rp.rank
        peers = prog.peers(r)
        for p in peers:
            rp.put(rp.input(0), p, rp.scratch(slot(r, p)))
        for p in peers:
            rp.signal(p)
        rp.copy(rp.input(0), rp.output(r))
        for p in peers:
            rp.wait(p)
        for p in peers:
            rp.copy(rp.scratch(slot(p, r)), rp.output(p))
    return prog.compile()


def reduce_scatter_ll(n: int) -> Plan:
    """Every rank sends chunk p to rank p as LL packets; rank p reduces its chunk."""
    prog = Program("reduce_scatter_ll", "reduce_scatter", n, input=n, output=1, packets=n - 1)
    for rp in prog.ranks():
        r = rp.rank
        for p in prog.peers(r):
            rp.put(rp.input(p), p, rp.packets(slot(r, p)))
        rp.reduce(rp.output(0), [rp.input(r)] + [rp.packets(slot(p, r)) for p in prog.peers(r)])
    return prog.compile()


def reduce_scatter_mesh(n: int) -> Plan:
    """Full-mesh reduce-scatter through scratch with put and semaphores."""
    prog = Program("reduce_scatter_mesh", "reduce_scatter", n, input=n, output=1, scratch=n - 1)
    for rp in prog.ranks():
        r = rp.rank
        peers = prog.peers(r)
        for p in peers:
            rp.put(rp.input(p), p, rp.scratch(slot(r, p)))
        for p in peers:
            rp.signal(p)
        for p in peers:
            rp.wait(p)
        rp.reduce(rp.output(0), [rp.input(r)] + [rp.scratch(slot(p, r)) for p in peers])
    return prog.compile()


def broadcast_ll(n: int, root: int = 0) -> Plan:
    """The root sends LL packets to every peer; peers acknowledge with a signal."""
    prog = Program("broadcast_ll", "broadcast", n, input=1, output=1, packets=1, root=root)
    for rp in prog.ranks():
        if rp.rank == root:
            for p in prog.peers(root):
                rp.put(rp.input(0), p, rp.packets(0))
            rp.copy(rp.input(0), rp.output(0))
            for p in prog.peers(root):
                rp.wait(p)
        else:
            rp.copy(rp.packets(0), rp.output(0))
            rp.signal(root)
    return prog.compile()


def broadcast_mesh(n: int, root: int = 0) -> Plan:
    """The root puts into every peer's scratch and signals; peers copy out and acknowledge."""
    prog = Program("broadcast_mesh", "broadcast", n, input=1, output=1, scratch=1, root=root)
    for rp in prog.ranks():
        if rp.rank == root:
            for p in prog.peers(root):
                rp.put(rp.input(0), p, rp.scratch(0))
            for p in prog.peers(root):
                rp.signal(p)
            rp.copy(rp.input(0), rp.output(0))
            for p in prog.peers(root):
                rp.wait(p)
        else:
            rp.wait(root)
            rp.copy(rp.scratch(0), rp.output(0))
            rp.signal(root)
    return prog.compile()


#: Slices of the pipelined broadcast: enough that the peers' copy out of scratch hides
#: behind the root's next puts, few enough that per-slice signalling stays small.
BROADCAST_SLICES = 8


def broadcast_pipelined(n: int, root: int = 0, slices: int = BROADCAST_SLICES) -> Plan:
    """broadcast_mesh in ``slices`` steps for large messages: the root signals each slice
    as soon as it is put, so a peer copies slice i out of scratch while slice i + 1 is
    still on the wire; one acknowledgement at the end (the root must not refill scratch
    before every peer has copied it out). Broadcast is in place, so the root's own copy
    is dropped when the plan is lowered."""
    prog = Program(
        "broadcast_pipelined", "broadcast", n,
        input=slices, output=slices, scratch=slices, root=root,
    )  # fmt: skip
    peers = prog.peers(root)
    for rp in prog.ranks():
        if rp.rank == root:
            for i in range(slices):
                for p in peers:
                    rp.put(rp.input(i), p, rp.scratch(i))
                for p in peers:
                    rp.signal(p)
            rp.copy(rp.input(0, slices), rp.output(0, slices))
            for p in peers:
                rp.wait(p)
        else:
            for i in range(slices):
                rp.wait(root)
                rp.copy(rp.scratch(i), rp.output(i))
            rp.signal(root)
    return prog.compile()
