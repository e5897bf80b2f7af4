"""The receive datapath: validate a batch of RoCEv2 datagrams, place the good ones.

``recvmmsg`` fills up to a ring's worth of pre-faulted staging slots in one call. Header
checks run vectorized over the batch (length, opcode, QPN lookup, length consistency,
rkey); then, per surviving packet, the ICRC (one CRC call over header and payload,
continuing from a cached IP/UDP prefix state); then, per QP, the core's software-NIC step
(:func:`sdr.placement.place_batch` on its KeyTable) validates the survivors and copies
each once from the staging ring into the registered region. Anything that fails is
counted and never written. A packet must
also come from the address its QP is connected to (``bad_source`` otherwise): with the
ICRC computed for the forger's own address, a right QPN and rkey would not be enough.
The QPN table both passes look packets up in is kept in ``qpn_table``.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

import numpy as np

from sdr.backends.udp import native
from sdr.backends.udp.contracts import ReceivingQP as UdpQP
from sdr.backends.udp.mmsg import RecvRing
from sdr.backends.udp.qpn_table import QpnTable
from sdr.backends.udp.roce import (
    HEADER_DTYPE,
    HEADER_SIZE,
    ICRC_SIZE,
    UC_RDMA_WRITE_ONLY_IMM,
    IcrcPrefix,
    crc32,
)
from sdr.placement import PLACED
from sdr.transport import CompletionBatch

__all__ = ["Receiver"]

_SLOT = 1 << 16  # the largest UDP payload fits: no truncation
_RING = 64
_MSG_TRUNC = 0x20
_QPN_MASK = 0xFFFFFF
_MIN_PACKET = HEADER_SIZE + ICRC_SIZE


class Receiver:
    """Receive state of one transport: staging ring, endpoint table, ICRC prefixes."""

    def __init__(
        self,
        local: tuple[str, int],
        stats: dict[str, int],
        verify_icrc: bool = True,
        gro: bool = True,
    ) -> None:
        self.local = local
        self.stats = stats
        self.verify_icrc = verify_icrc
        self.gro = gro
        """Ask the kernel for GRO (the native pass only; the reference reads datagrams)."""
        self._gro_on = False
        self.ring = RecvRing(_RING, _SLOT)
        self.headers = np.ndarray(
            (_RING,), dtype=HEADER_DTYPE, buffer=self.ring.slots, strides=(_SLOT,)
        )
        self._prefixes: dict[int, IcrcPrefix] = {}
        self.qpn_table = QpnTable()
        """The endpoints this path delivers to, as the columns its passes index."""
        table, none = self.qpn_table, np.zeros(0, dtype=np.int64)
        self._tables = native.ReceiveTables(
            staging=self.ring.slots,
            slot_size=_SLOT,
            local_ip=int.from_bytes(socket.inet_aton(local[0]), "big"),
            local_port=local[1],
            verify=verify_icrc,
            qpns=table.qpns,
            order=table.order,
            rkeys=table.rkeys,
            owner=table.owner,
            peer_sources=none,
            listed=np.empty((len(native.LISTED), 0), dtype=np.int64),
            counters=np.zeros(len(native.COUNTERS), dtype=np.int64),
            discards=np.zeros((0, len(native.DISCARDS)), dtype=np.int64),
        )
        """What the native pass reads and writes (native.ReceiveTables), refreshed from
        the QPN table before each call."""

    def set_endpoints(self, endpoints: Mapping[int, tuple[UdpQP, int, int]]) -> None:
        """Update the QPN table after QPs are created, closed or connected (``endpoints``:
        QPN -> (QP, generation, channel); see :meth:`QpnTable.update`)."""
        self.qpn_table.update(endpoints)

    def _prefix(self, source: int) -> IcrcPrefix:
        prefix = self._prefixes.get(source)
        if prefix is None:
            if len(self._prefixes) > 1024:
                self._prefixes.clear()
            ip = socket.inet_ntoa(int(source >> 16).to_bytes(4, "big"))
            prefix = self._prefixes[source] = IcrcPrefix((ip, source & 0xFFFF), self.local)
        return prefix

    def pump(self, sock: socket.socket, max_packets: int) -> int:
        """Receive and process up to about ``max_packets`` packets; returns how many arrived
        (with GRO the last read may bring a few more)."""
        if native.active():
            return self._pump_native(sock, max_packets)
        if self._gro_on:  # the reference reads one datagram per packet
            native.set_gro(sock, False)
            self._gro_on = False
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

    def _pump_native(self, sock: socket.socket, max_packets: int) -> int:
        """The same checks in one native pass per read (backends/udp/_datapath.c)."""
        if self.gro != self._gro_on:
            self._gro_on = native.set_gro(sock, self.gro) and self.gro
        receive, fd, total = native.module.receive, sock.fileno(), 0  # type: ignore[union-attr]
        gro = self._gro_on
        while total < max_packets:
            want = min(self.ring.capacity, max_packets - total)
            tables = self._native_tables(gro)
            got, segments, listed = receive(fd, tables, max_datagrams=want, gro=gro)
            if got:  # an empty read changed no counter and listed nothing
                self._native_results(segments, listed)
            total += segments
            if got < want:
                break
        return total

    def process_native(self, n: int, gso_sizes: np.ndarray | None = None) -> int:
        """The native pass over ``n`` datagrams already in the ring (as recvmmsg left them;
        ``gso_sizes`` as UDP_GRO would report them, 0 for one packet); returns the
        segments seen. The socket-free entry for tests and the fuzz target."""
        lengths = self.ring.lengths(n)
        lengths[(self.ring.msgs[:n, 6] & np.uint64(_MSG_TRUNC)) != 0] = -1
        gso = np.zeros(n, np.int64) if gso_sizes is None else np.asarray(gso_sizes, np.int64)
        tables = self._native_tables(True)
        segments, listed = native.module.check(  # type: ignore[union-attr]
            tables, lengths=lengths, sources=self.ring.sources(n), gso_sizes=gso
        )
        self._native_results(int(segments), listed)
        return int(segments)

    def _native_tables(self, gro: bool) -> native.ReceiveTables:
        """The native pass's tables with the QPN table as it is now, and room to list
        every segment a read can bring (with GRO: each slot cut into minimal packets)."""
        tables, table = self._tables, self.qpn_table
        cap = self.ring.capacity * (_SLOT // _MIN_PACKET + 1 if gro else 1)
        if tables.listed.shape[1] < cap:
            tables.listed = np.empty((len(native.LISTED), cap), dtype=np.int64)
        peers = table.sources_of_peers()
        if len(tables.discards) < len(peers):
            grown = np.zeros((len(peers), len(native.DISCARDS)), dtype=np.int64)
            grown[: len(tables.discards)] = tables.discards
            tables.discards = grown
        tables.qpns, tables.order, tables.rkeys = table.qpns, table.order, table.rkeys
        tables.owner, tables.peer_sources = table.owner, peers
        tables.verify = self.verify_icrc
        return tables

    def _native_results(self, segments: int, listed: int) -> None:
        """Count the native pass's discards and place the packets it listed. Every
        segment the pass saw was either listed or counted once (a transport counter or a
        QP's discard), so a pass that listed them all changed no counter."""
        if listed < segments:
            self._take_native_counters()
        if listed:
            # copies of the columns a completion batch keeps: the next pass rewrites the table
            ep, offsets, dlen, va, imm, crcs = self._tables.listed[:, :listed]
            self._place(ep, offsets, dlen.copy(), imm.astype(np.uint32), va.copy(), crcs.copy())

    def _take_native_counters(self) -> None:
        counters = self._tables.counters
        if counters.any():
            for name, value in zip(native.COUNTERS, counters.tolist(), strict=True):
                self.stats[name] += value
            counters[:] = 0
        discards, qps = self._tables.discards, self.qpn_table.qps
        for index in np.flatnonzero(discards.any(axis=1)).tolist():
            qp = qps[index]
            if qp is None:  # closed since: its last discards go with it
                discards[index] = 0
                continue
            qstats = qp.discards
            for name, value in zip(native.DISCARDS, discards[index].tolist(), strict=True):
                qstats[name] = qstats.get(name, 0) + value
            discards[index] = 0

    def _process(self, n: int) -> None:
        ring, stats, hdr, table = self.ring, self.stats, self.headers[:n], self.qpn_table
        lengths = ring.lengths(n)
        good = (lengths >= _MIN_PACKET) & ((ring.msgs[:n, 6] & np.uint64(_MSG_TRUNC)) == 0)
        stats["runt"] += int(n - good.sum())
        opcode_ok = hdr["opcode"] == UC_RDMA_WRITE_ONLY_IMM
        stats["bad_opcode"] += int((good & ~opcode_ok).sum())
        good &= opcode_ok
        qpn = (hdr["qpn"] & _QPN_MASK).astype(np.int64)
        pos = np.searchsorted(table.qpns, qpn)
        pos = np.minimum(pos, max(len(table.qpns) - 1, 0))
        known = (table.qpns[pos] == qpn) if len(table.qpns) else np.zeros(n, dtype=bool)
        stats["unknown_qpn"] += int((good & ~known).sum())
        good &= known
        rows = np.flatnonzero(good)
        if not len(rows):
            return
        ep = table.order[pos[rows]]
        dlen = hdr["dlen"][rows].astype(np.int64)
        pad = (hdr["flags"][rows] >> 4) & 3
        end = lengths[rows] - ICRC_SIZE
        consistent = (HEADER_SIZE + dlen + pad == end) & (pad == (-dlen & 3))
        rkey_ok = hdr["rkey"][rows].astype(np.int64) == table.rkeys[ep]
        carried = ring.slots[rows[:, None], end[:, None] + np.arange(ICRC_SIZE)]
        icrc = carried.copy().view("<u4")[:, 0]
        ring.slots[rows, 4] = 0xFF  # the ICRC sees F|B|resv6 as all ones
        sources = ring.sources(n)[rows]
        source_ok = sources == table.sources_of_peers()[table.owner[ep]]
        passed = np.asarray(
            self._check(rows, ep, end, consistent, rkey_ok, icrc, sources, source_ok), dtype=bool
        )
        if not passed.any():
            return
        ep, rows, dlen = ep[passed], rows[passed], dlen[passed]
        imms = hdr["imm"][rows].astype(np.uint32)
        remote = hdr["va"][rows].astype(np.int64)  # > 2^63 wraps negative: out of range
        offsets = rows * self.ring.slot_size + HEADER_SIZE
        crcs = np.full(len(rows), -1, dtype=np.int64)  # each payload's CRC-32 (-1: not read)
        if self.verify_icrc:
            view, pairs = self.ring.view, zip(offsets.tolist(), dlen.tolist(), strict=True)
            crcs[:] = [crc32(view[o : o + n]) for o, n in pairs]
        self._place(ep, offsets, dlen, imms, remote, crcs)

    def _place(
        self,
        ep: np.ndarray,
        offsets: np.ndarray,
        dlen: np.ndarray,
        imms: np.ndarray,
        remote: np.ndarray,
        crcs: np.ndarray,
    ) -> None:
        """Hand the packets that passed the wire checks to their QPs' key tables, which
        copy each from its staging offset into the registered region; the completions
        carry each payload's CRC-32 (``crcs``)."""
        table = self.qpn_table
        owners, staging = table.owner[ep], self.ring.view
        several = len(table.qps) > 1  # one QP (the common case) owns every packet
        for index in np.unique(owners).tolist() if several else owners[:1].tolist():
            mine = owners == index if several else slice(None)
            qp, eps, lengths = table.qps[index], ep[mine], dlen[mine]
            gens, imm, va, sums = table.gens[eps], imms[mine], remote[mine], crcs[mine]
            verdicts = qp.keys.place(gens, va, imm, lengths, staging, offsets[mine])
            ok = verdicts == PLACED
            if not ok.all():  # some refused: deliver the placed ones (usually all are)
                if not ok.any():
                    continue
                eps, gens, imm, lengths, va = eps[ok], gens[ok], imm[ok], lengths[ok], va[ok]
                sums = sums[ok]
            batch = CompletionBatch(table.chans[eps], gens, imm, lengths, va, True, sums)
            qp.deliver(batch)

    def _check(
        self,
        rows: np.ndarray,
        ep: np.ndarray,
        end: np.ndarray,
        consistent: np.ndarray,
        rkey_ok: np.ndarray,
        icrc: np.ndarray,
        sources: np.ndarray,
        source_ok: np.ndarray,
    ) -> list[bool]:
        """Check source, length, ICRC and rkey per packet; True = on to placement."""
        view, slot, endpoints = self.ring.view, self.ring.slot_size, self.qpn_table.endpoints
        prefixes, prefix_of, verify = self._prefixes, self._prefix, self.verify_icrc
        passed = [False] * len(rows)
        for i, row, e, stop, ok_len, ok_key, want, src, ok_src in zip(
            range(len(rows)),
            rows.tolist(),
            ep.tolist(),
            end.tolist(),
            consistent.tolist(),
            rkey_ok.tolist(),
            icrc.tolist(),
            sources.tolist(),
            source_ok.tolist(),
            strict=True,
        ):
            qstats = endpoints[e][0].discards
            if not ok_src:
                qstats["bad_source"] += 1
                continue
            if not ok_len:
                qstats["bad_length"] += 1
                continue
            if verify:
                off = row * slot
                prefix = prefixes.get(src) or prefix_of(src)
                if crc32(view[off : off + stop], prefix.state(stop + ICRC_SIZE)) != want:
                    qstats["bad_icrc"] += 1
                    continue
            if not ok_key:
                qstats["bad_rkey"] += 1
                continue
            passed[i] = True
        return passed
