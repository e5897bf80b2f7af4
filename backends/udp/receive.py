"""The receive datapath: validate a batch of RoCEv2 datagrams, place the good ones.

``recvmmsg`` fills up to a ring's worth of pre-faulted staging slots in one call. Header
checks run vectorized over the batch (length, opcode, QPN lookup, length consistency,
rkey); then, per surviving packet, the ICRC (one CRC call over header and payload,
continuing from a cached IP/UDP prefix state), the KeyTable placement and one copy into
the registered region. Anything that fails is counted and never written. A packet must
also come from the address its QP is connected to (``bad_source`` otherwise): with the
ICRC computed for the forger's own address, a right QPN and rkey would not be enough.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import numpy as np

from backends.udp.mmsg import RecvRing
from backends.udp.roce import (
    HEADER_DTYPE,
    HEADER_SIZE,
    ICRC_SIZE,
    UC_RDMA_WRITE_ONLY_IMM,
    IcrcPrefix,
    crc32,
)
from sdr.key_table import Placement
from sdr.transport import CompletionBatch

if TYPE_CHECKING:
    from backends.udp.qp import UdpQP

__all__ = ["Receiver"]

_SLOT = 1 << 16  # the largest UDP payload fits: no truncation
_RING = 64
_MSG_TRUNC = 0x20
_QPN_MASK = 0xFFFFFF
_MIN_PACKET = HEADER_SIZE + ICRC_SIZE


class Receiver:
    """Receive state of one transport: staging ring, endpoint table, ICRC prefixes."""

    def __init__(
        self, local: tuple[str, int], stats: dict[str, int], verify_icrc: bool = True
    ) -> None:
        self.local = local
        self.stats = stats
        self.verify_icrc = verify_icrc
        self.ring = RecvRing(_RING, _SLOT)
        self.headers = np.ndarray(
            (_RING,), dtype=HEADER_DTYPE, buffer=self.ring.slots, strides=(_SLOT,)
        )
        self._prefixes: dict[int, IcrcPrefix] = {}
        self._endpoints: list[tuple[UdpQP, int, int]] = []
        self._qpns = np.zeros(0, dtype=np.int64)
        self._order = np.zeros(0, dtype=np.int64)
        self._rkeys = np.zeros(0, dtype=np.int64)
        self._gens = np.zeros(0, dtype=np.uint8)
        self._chans = np.zeros(0, dtype=np.uint16)
        self._owner = np.zeros(0, dtype=np.int64)
        self._qps: list[UdpQP] = []
        self._peers: list[tuple[str, int] | None] = []
        self._peer_sources = np.zeros(0, dtype=np.int64)

    def set_endpoints(self, endpoints: dict[int, tuple[UdpQP, int, int]]) -> None:
        """Rebuild the sorted QPN table (after a QP is created or closed)."""
        items = sorted(endpoints.items())
        self._endpoints = [ep for _, ep in items]
        self._qpns = np.asarray([q for q, _ in items], dtype=np.int64)
        self._order = np.arange(len(items), dtype=np.int64)
        self._rkeys = np.asarray([qp.rkeys[gen] for qp, gen, _ in self._endpoints], np.int64)
        self._gens = np.asarray([gen for _, gen, _ in self._endpoints], np.uint8)
        self._chans = np.asarray([ch for _, _, ch in self._endpoints], np.uint16)
        self._qps = list(dict.fromkeys(qp for qp, _, _ in self._endpoints))
        index = {id(qp): i for i, qp in enumerate(self._qps)}
        self._owner = np.asarray([index[id(qp)] for qp, _, _ in self._endpoints], np.int64)
        for qp in self._qps:
            qp.discards.setdefault("bad_source", 0)
        self._peers = []

    def _sources_of_peers(self) -> np.ndarray:
        """Each QP's peer address as (IPv4 << 16 | port), -1 before it is connected."""
        peers = [qp.peer for qp in self._qps]
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

    def _prefix(self, source: int) -> IcrcPrefix:
        prefix = self._prefixes.get(source)
        if prefix is None:
            if len(self._prefixes) > 1024:
                self._prefixes.clear()
            ip = socket.inet_ntoa(int(source >> 16).to_bytes(4, "big"))
            prefix = self._prefixes[source] = IcrcPrefix((ip, source & 0xFFFF), self.local)
        return prefix

    def pump(self, sock: socket.socket, max_packets: int) -> int:
        """Receive and process up to ``max_packets`` datagrams; returns how many arrived."""
        total = 0
        while total < max_packets:
            want = min(self.ring.capacity, max_packets - total)
            got = self.ring.receive(sock, want)
            if got:
                self._process(got)
                total += got
            if got < want:
                break
        return total

    def _process(self, n: int) -> None:
        ring, stats, hdr = self.ring, self.stats, self.headers[:n]
        lengths = ring.lengths(n)
        good = (lengths >= _MIN_PACKET) & ((ring.msgs[:n, 6] & np.uint64(_MSG_TRUNC)) == 0)
        stats["runt"] += int(n - good.sum())
        opcode_ok = hdr["opcode"] == UC_RDMA_WRITE_ONLY_IMM
        stats["bad_opcode"] += int((good & ~opcode_ok).sum())
        good &= opcode_ok
        qpn = (hdr["qpn"] & _QPN_MASK).astype(np.int64)
        pos = np.searchsorted(self._qpns, qpn)
        pos = np.minimum(pos, max(len(self._qpns) - 1, 0))
        known = (self._qpns[pos] == qpn) if len(self._qpns) else np.zeros(n, dtype=bool)
        stats["unknown_qpn"] += int((good & ~known).sum())
        good &= known
        rows = np.flatnonzero(good)
        if not len(rows):
            return
        ep = self._order[pos[rows]]
        dlen = hdr["dlen"][rows].astype(np.int64)
        pad = (hdr["flags"][rows] >> 4) & 3
        end = lengths[rows] - ICRC_SIZE
        consistent = (HEADER_SIZE + dlen + pad == end) & (pad == (-dlen & 3))
        rkey_ok = hdr["rkey"][rows].astype(np.int64) == self._rkeys[ep]
        carried = ring.slots[rows[:, None], end[:, None] + np.arange(ICRC_SIZE)]
        icrc = carried.copy().view("<u4")[:, 0]
        ring.slots[rows, 4] = 0xFF  # the ICRC sees F|B|resv6 as all ones
        sources = ring.sources(n)[rows]
        source_ok = sources == self._sources_of_peers()[self._owner[ep]]
        placed = np.asarray(
            self._place(rows, ep, dlen, end, consistent, rkey_ok, icrc, sources, hdr, source_ok),
            dtype=bool,
        )
        if not placed.any():
            return
        ep, rows = ep[placed], rows[placed]
        owners = self._owner[ep]
        for index in np.unique(owners).tolist():
            mine = owners == index if len(self._qps) > 1 else slice(None)
            qp, sel, eps = self._qps[index], rows[mine], ep[mine]
            batch = CompletionBatch(
                self._chans[eps],
                self._gens[eps],
                hdr["imm"][sel].astype(np.uint32),
                hdr["dlen"][sel].astype(np.int64),
                hdr["va"][sel].astype(np.int64),
            )
            qp.completions.append(batch)
            qp.pending += len(batch)
            qp.stats["packets_placed"] += len(batch)
            qp.stats["bytes_placed"] += int(batch.byte_lens.sum())

    def _place(
        self,
        rows: np.ndarray,
        ep: np.ndarray,
        dlen: np.ndarray,
        end: np.ndarray,
        consistent: np.ndarray,
        rkey_ok: np.ndarray,
        icrc: np.ndarray,
        sources: np.ndarray,
        hdr: np.ndarray,
        source_ok: np.ndarray,
    ) -> list[bool]:
        """Check ICRC, rkey and placement per packet, copy the good ones; True = placed."""
        view, slot, endpoints = self.ring.view, self.ring.slot_size, self._endpoints
        prefixes, prefix_of, verify = self._prefixes, self._prefix, self.verify_icrc
        va, imm = hdr["va"][rows].tolist(), hdr["imm"][rows].tolist()
        placed = [False] * len(va)
        for i, row, e, n, stop, ok_len, ok_key, want, src, addr, im, ok_src in zip(
            range(len(va)),
            rows.tolist(),
            ep.tolist(),
            dlen.tolist(),
            end.tolist(),
            consistent.tolist(),
            rkey_ok.tolist(),
            icrc.tolist(),
            sources.tolist(),
            va,
            imm,
            source_ok.tolist(),
            strict=True,
        ):
            qp, gen, _ = endpoints[e]
            qstats = qp.discards
            if not ok_src:
                qstats["bad_source"] += 1
                continue
            if not ok_len:
                qstats["bad_length"] += 1
                continue
            off = row * slot
            if verify:
                prefix = prefixes.get(src) or prefix_of(src)
                if crc32(view[off : off + stop], prefix.state(stop + ICRC_SIZE)) != want:
                    qstats["bad_icrc"] += 1
                    continue
            if not ok_key:
                qstats["bad_rkey"] += 1
                continue
            where = qp.keys.resolve(gen, addr, n, im)
            if type(where) is not Placement:
                qstats[where] += 1  # type: ignore[index]
                continue
            if n:
                dst = where.offset
                off += HEADER_SIZE
                where.region.view[dst : dst + n] = view[off : off + n]
            placed[i] = True
        return placed
