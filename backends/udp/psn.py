"""Packet sequence numbers of a UDP QP's sends: one 24-bit counter per (generation,
channel), as RoCE's BTH carries them. Numbers are taken as packets are built and handed
back for the ones that never left (a send stops part way: the kernel took no more), so
the next packets of that channel take them and the sequence on the wire has no gap."""

from __future__ import annotations

import numpy as np

__all__ = ["PsnCounters", "PSN_MASK"]

PSN_MASK = 0xFFFFFF


class PsnCounters:
    """The next PSN of every (generation, channel) of one QP."""

    def __init__(self, generations: int, channels: int) -> None:
        self.next = [[0] * channels for _ in range(generations)]
        """``next[generation][channel]``: the PSN its next packet takes."""

    def take(self, gen: int, channels: np.ndarray) -> np.ndarray:
        """PSNs for packets on these ``channels`` (in order), advancing the counters."""
        psns, k = self.next[gen], len(channels)
        if len(psns) == 1:
            out = (psns[0] + np.arange(k, dtype=np.int64)) & PSN_MASK
            psns[0] = (psns[0] + k) & PSN_MASK
            return out
        out = np.empty(k, dtype=np.int64)
        for ch in range(len(psns)):
            rows = np.flatnonzero(channels == ch)
            out[rows] = (psns[ch] + np.arange(len(rows), dtype=np.int64)) & PSN_MASK
            psns[ch] = (psns[ch] + len(rows)) & PSN_MASK
        return out

    def give_back(self, gen: int, channels: np.ndarray) -> None:
        """Hand back the PSNs of packets that were numbered but never left: the last
        ``take`` gave them, and a send stops at a point of its batch, so they are each
        channel's last numbers."""
        psns = self.next[gen]
        for ch, count in zip(*np.unique(channels, return_counts=True), strict=True):
            psns[int(ch)] = (psns[int(ch)] - int(count)) & PSN_MASK
