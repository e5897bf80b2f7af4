"""The receive path's QPN table: a transport's endpoints as the columns its passes index.

An endpoint is one (QP, generation, channel) and its QPN. The vectorized reference pass
and the native pass look a packet's QPN up in ``qpns`` (sorted); ``order`` gives that
endpoint's slot, and per slot ``rkeys``, ``gens``, ``chans`` and ``owner`` (its QP's slot
in ``qps``) say what the packet must carry and whose it is. Per QP slot the table keeps
the peer's address, which every packet of that QP must come from.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

import numpy as np

from sdr.backends.udp.contracts import ReceivingQP as UdpQP

__all__ = ["QpnTable"]


def _source_of(qp: UdpQP) -> int:
    """The QP's peer address as (IPv4 << 16 | port), -1 before it is connected."""
    p = qp.peer
    return -1 if p is None else int.from_bytes(socket.inet_aton(p[0]), "big") << 16 | p[1]


class QpnTable:
    """Endpoint and QP columns of one receive path, kept by :meth:`update`."""

    def __init__(self) -> None:
        self.watched: Mapping[int, tuple[UdpQP, int, int]] | None = None
        """The transport's endpoint table when it reports what changed (``touched``)."""
        self.endpoints: list[tuple[UdpQP, int, int] | None] = []  # None: a free slot
        self._slot_of: dict[int, int] = {}  # QPN -> endpoint slot
        self._free_slots: list[int] = []
        self.qpns = np.zeros(0, dtype=np.int64)
        self.order = np.zeros(0, dtype=np.int64)
        self.rkeys = np.zeros(0, dtype=np.int64)
        self.gens = np.zeros(0, dtype=np.uint8)
        self.chans = np.zeros(0, dtype=np.uint16)
        self.owner = np.zeros(0, dtype=np.int64)
        self.qps: list[UdpQP | None] = []  # None: a free QP slot
        self._qp_slot: dict[UdpQP, int] = {}
        self._qp_refs: list[int] = []  # endpoints per QP slot
        self._free_qps: list[int] = []
        self._peers: list[tuple[str, int] | None] = []
        self._peer_sources = np.zeros(0, dtype=np.int64)

    def update(self, endpoints: Mapping[int, tuple[UdpQP, int, int]]) -> None:
        """Update the QPN table after QPs are created, closed or connected.

        ``endpoints`` maps QPN -> (QP, generation, channel). When it also lists what
        changed since the last call (``endpoints.touched``: the transport's
        EndpointTable), only those QPNs are updated: endpoint and QP slots are reused,
        the sorted QPN column takes one insert or delete (a memmove) per endpoint, and no
        other QP is read, so creating or closing a QP costs the same however many exist.
        Any other mapping, and the first call with a table, rebuilds everything.
        """
        touched: list[int] | None = getattr(endpoints, "touched", None)
        if touched is None or self.watched is not endpoints:
            self._rebuild(endpoints, touched)
            return
        for qpn in dict.fromkeys(touched):
            entry, at = endpoints.get(qpn), self._slot_of.get(qpn)
            if at is not None and entry != self.endpoints[at]:  # closed (or reused)
                self._remove(qpn, at)
                at = None
            if entry is None:
                continue
            if at is None:  # a new endpoint
                at = self._free_slots.pop() if self._free_slots else len(self.endpoints)
                self._place(at, qpn, entry)
                pos = int(np.searchsorted(self.qpns, qpn))
                self.qpns = np.insert(self.qpns, pos, qpn)
                self.order = np.insert(self.order, pos, at)
            else:  # its QP connected: new peer address (and keys)
                qp, gen, _ = entry
                self.rkeys[at] = qp.rkeys[gen]
                self._peer_sources[self.owner[at]] = _source_of(qp)
        touched.clear()

    def _rebuild(
        self, endpoints: Mapping[int, tuple[UdpQP, int, int]], touched: list[int] | None
    ) -> None:
        self.watched = None if touched is None else endpoints
        items = sorted(endpoints.items())
        size = max(16, len(items))
        self.endpoints = [None] * size
        self._slot_of, self._free_slots = {}, list(range(size - 1, len(items) - 1, -1))
        self.rkeys, self.owner = np.zeros(size, np.int64), np.zeros(size, np.int64)
        self.gens, self.chans = np.zeros(size, np.uint8), np.zeros(size, np.uint16)
        self.qps, self._qp_slot, self._qp_refs, self._free_qps = [], {}, [], []
        self._peer_sources = np.zeros(0, dtype=np.int64)
        for slot, (qpn, ep) in enumerate(items):
            self._place(slot, qpn, ep)
        self.qpns = np.asarray([q for q, _ in items], dtype=np.int64)
        self.order = np.arange(len(items), dtype=np.int64)
        self._peers = []
        if touched is not None:
            touched.clear()

    def _remove(self, qpn: int, at: int) -> None:
        """Free endpoint slot ``at`` (QPN ``qpn``), and its QP's slot with its last one."""
        del self._slot_of[qpn]
        index = int(self.owner[at])
        self._qp_refs[index] -= 1
        if not self._qp_refs[index]:
            owner = self.qps[index]
            if owner is not None:  # always: a QP slot with endpoints holds its QP
                del self._qp_slot[owner]
            self.qps[index] = None
            self._peer_sources[index] = -1
            self._free_qps.append(index)
        self.endpoints[at] = None
        self._free_slots.append(at)
        pos = int(np.searchsorted(self.qpns, qpn))
        self.qpns, self.order = np.delete(self.qpns, pos), np.delete(self.order, pos)

    def _place(self, slot: int, qpn: int, ep: tuple[UdpQP, int, int]) -> None:
        """Put endpoint ``ep`` (QPN ``qpn``) into ``slot``, growing the columns to fit."""
        qp, gen, ch = ep
        if slot >= len(self.endpoints):  # grow every column to twice its size
            size = max(16, 2 * len(self.endpoints))
            more = size - len(self.endpoints)
            self.endpoints.extend([None] * more)
            self.rkeys = np.concatenate([self.rkeys, np.zeros(more, np.int64)])
            self.gens = np.concatenate([self.gens, np.zeros(more, np.uint8)])
            self.chans = np.concatenate([self.chans, np.zeros(more, np.uint16)])
            self.owner = np.concatenate([self.owner, np.zeros(more, np.int64)])
            self._free_slots.extend(range(size - 1, slot, -1))
        self.endpoints[slot] = ep
        self.rkeys[slot], self.gens[slot], self.chans[slot] = qp.rkeys[gen], gen, ch
        index = self._qp_slot_of(qp)
        self._qp_refs[index] += 1
        self.owner[slot] = index
        self._slot_of[qpn] = slot

    def _qp_slot_of(self, qp: UdpQP) -> int:
        """The QP's slot in ``qps``, taken (a free one or a new one) on its first endpoint."""
        index = self._qp_slot.get(qp)
        if index is None:
            index = self._free_qps.pop() if self._free_qps else len(self.qps)
            if index == len(self.qps):
                self.qps.append(qp)
                self._qp_refs.append(0)
            else:
                self.qps[index] = qp
            if index >= len(self._peer_sources):
                grown = np.full(max(16, 2 * len(self._peer_sources)), -1, np.int64)
                grown[: len(self._peer_sources)] = self._peer_sources
                self._peer_sources = grown
            self._peer_sources[index] = _source_of(qp)
            self._qp_slot[qp] = index
        return index

    def sources_of_peers(self) -> np.ndarray:
        """Each QP's peer address as (IPv4 << 16 | port), -1 before it is connected."""
        if self.watched is not None:
            return self._peer_sources  # kept current by update (the table reports connects)
        peers = [None if qp is None else qp.peer for qp in self.qps]
        if peers != self._peers:
            self._peers = peers
            self._peer_sources = np.asarray(
                [
                    -1
                    if p is None
                    else int.from_bytes(socket.inet_aton(p[0]), "big") << 16 | int(p[1])
                    for p in peers
                ],
                dtype=np.int64,
            )
        return self._peer_sources
