"""Which chunk transmissions the simulated link lost, per write (a packet capture tap).

The completion-time model is a function of how many times each chunk was lost
(``Z_i``). Recording those counts in the simulation lets the model be evaluated on the
*same* losses the protocol saw, so the protocol's timing can be compared with the model's
sample by sample (a control variate), not only on averages that need thousands of samples.

A chunk counts as lost by a transmission when, after it, some packet of the chunk has
still never arrived (a queue drop or a loss on the wire): the receiver keeps a bitmap per
packet, so a retransmission only has to deliver the packets earlier ones lost. Lane 0 is
the data (packets from the user's buffer), lane 1 EC parity (packets
from any other buffer of the same sender).
"""

from __future__ import annotations

import numpy as np

from sdr.simulator.des_transport import DesQP
from sdr.transport import MemoryRegion, WriteBatch

__all__ = ["LossLog"]


class _Lane:
    def __init__(self, length: int, chunk_size: int, mtu: int) -> None:
        n = -(-length // chunk_size)
        sizes = np.minimum(chunk_size, length - np.arange(n) * chunk_size)
        self.packets_per_chunk = -(-sizes // mtu)
        self.sent = np.zeros(n, dtype=np.int64)
        self.lost: dict[int, dict[int, set[int]]] = {}  # chunk -> transmission -> packets

    def record(self, chunks: np.ndarray, lost: np.ndarray) -> None:
        firsts, starts, counts = np.unique(chunks, return_index=True, return_counts=True)
        position = np.arange(len(chunks)) - np.repeat(starts, counts)
        index = self.sent[chunks] + position
        ppc = self.packets_per_chunk[chunks]
        tx, packet = index // ppc, index % ppc
        for c, t, k in zip(
            chunks[lost].tolist(), tx[lost].tolist(), packet[lost].tolist(), strict=True
        ):
            self.lost.setdefault(c, {}).setdefault(t, set()).add(k)
        self.sent[firsts] += counts

    def losses(self) -> np.ndarray:
        """Transmissions after which each chunk still missed a packet (the receiver's
        packet bitmap keeps what earlier transmissions delivered)."""
        z = np.zeros(len(self.sent), dtype=np.int64)
        for c, per_tx in self.lost.items():
            missing = set(range(int(self.packets_per_chunk[c])))
            for t in range(max(per_tx) + 1):
                missing &= per_tx.get(t, set())
                if not missing:
                    break
                z[c] += 1
        return z


class LossLog:
    """Counts lost transmissions per chunk of the current write of one sending QP."""

    def __init__(self, qp: DesQP, data: MemoryRegion, chunk_size: int) -> None:
        self.qp = qp
        self.data = data
        self.chunk_size = chunk_size
        self.mtu = qp.attr.mtu
        self.writes: list[tuple[np.ndarray, np.ndarray | None]] = []
        """Per finished write: lost transmissions per data chunk and per parity chunk."""
        self._lanes: list[_Lane | None] = [None, None]
        qp.transport.fabric.taps.append(self._tap)

    def start(self, length: int, parity_length: int) -> None:
        """A new write of ``length`` data bytes (and ``parity_length`` parity bytes) begins."""
        cs, mtu = self.chunk_size, self.mtu
        self._lanes = [
            _Lane(length, cs, mtu),
            _Lane(parity_length, cs, mtu) if parity_length else None,
        ]

    def finish(self) -> None:
        """The current write is over: keep its counts."""
        data, parity = self._lanes
        if data is not None:
            self.writes.append((data.losses(), parity.losses() if parity else None))
        self._lanes = [None, None]

    def _tap(self, qp: DesQP, batch: WriteBatch, first: int, stop: int, arrive: np.ndarray) -> None:
        if qp is not self.qp:
            return
        lane = self._lanes[0 if batch.region is self.data else 1]
        payload = batch.lengths[first:stop] > 0
        if lane is None or not payload.any():
            return
        chunks = batch.src_offsets[first:stop][payload] // self.chunk_size
        lane.record(chunks, np.isnan(arrive[payload]))
