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
