"""Multipath for a reliable connection: each channel is a path, chosen per chunk.

A QP's channels are its paths (the UDP backend sends each channel from its own source
port: the ECMP entropy RoCEv2 uses). Without multipath the send table sprays packets over
the channels in turn. With it, :class:`ChunkPaths` gives every chunk of a data or parity
lane one path each time the chunk is (re)transmitted, picked by a
:class:`~sdr.congestion.PathSelector` (smooth weighted round robin), so a chunk's fate
tells about one path: the scheme's ``Delivered``/``Lost`` chunks become per-path ACKs
(each path's own Karn RTT sample: its newest acknowledged chunk that was sent once, so
the paths are timed by the same ACK and a host's stall weighs on all of them alike) and
losses, and the selector moves
traffic off a path whose loss or delay is worse (PLB-style). Reordering between paths
costs no bytes (chunks are placed by offset) and no repairs: the sr-nack receiver NACKs
a hole only after its learned reorder window (:mod:`sdr.reliability.sr_receiver`). A
path that stops acknowledging (``rto``: the sender's RTO, what liveness is counted in) is
declared dead and gets only a probe chunk now and then, so the live paths carry the
transfer, repairs included (:mod:`sdr.congestion.paths`, "Liveness").
"""

from __future__ import annotations

import numpy as np

from sdr.congestion import PathSelector

__all__ = ["ChunkPaths"]


class ChunkPaths:
    """Paths per chunk of each outgoing lane, and the selector they feed (sans-I/O)."""

    def __init__(self, paths: int, mtu: int, chunk_size: int, rto: float | None = None) -> None:
        self.selector = PathSelector(paths, rto=rto)
        self.mtu = mtu
        self.chunk_size = chunk_size
        self._lanes: dict[object, _LanePaths] = {}

    def channels(self, lane: object, n_chunks: int, packets: np.ndarray, now: float) -> np.ndarray:
        """Channels for ``packets`` of ``lane`` (a key: its send record). A packet that
        starts a chunk picks the chunk's path afresh; the others follow their chunk."""
        books = self._lanes.get(lane)
        if books is None:
            books = self._lanes[lane] = _LanePaths(n_chunks)
        paths = books.paths
        starts = packets * self.mtu
        chunks = starts // self.chunk_size
        fresh = (starts % self.chunk_size == 0) | (paths[chunks] < 0)
        for chunk in np.unique(chunks[fresh]).tolist():
            # a chunk's first transmission may probe a dead path; a repair never does
            paths[chunk] = self.selector.pick(now, probe=bool(paths[chunk] < 0))
            books.sends[chunk] += 1
            books.sent_at[chunk] = now
        channels = paths[chunks].astype(np.int64)
        sent = np.bincount(channels, minlength=len(self.selector.stats)) * self.mtu
        for path in np.flatnonzero(sent).tolist():
            self.selector.on_sent(now, path, float(sent[path]))
        return channels

    def delivered(
        self,
        now: float,
        lane: object,
        chunks: np.ndarray,
        rtt_s: float | None,
        sample_chunk: int | None,
    ) -> float | None:
        """Acknowledged chunks of ``lane``, per path, each path with its own Karn sample;
        returns the connection's sample (``rtt_s``, taken on ``sample_chunk``) normalized to
        the shortest path (what the connection's one controller is fed)."""
        books = self._lanes.get(lane)
        if books is None or not len(chunks):
            return rtt_s
        paths = books.paths
        sample_path = int(paths[sample_chunk]) if sample_chunk is not None else -1
        samples = books.samples(now, chunks)
        for path, nbytes in self._per_path(paths[chunks]):
            self.selector.on_ack(now, path, nbytes, samples.get(path))
        if rtt_s is None or sample_path < 0:
            return rtt_s
        return self.selector.normalized_rtt(sample_path, rtt_s)

    def lost(self, now: float, lane: object, chunks: np.ndarray) -> None:
        """Chunks of ``lane`` declared lost, per path."""
        books = self._lanes.get(lane)
        if books is None or not len(chunks):
            return
        for path, nbytes in self._per_path(books.paths[chunks]):
            self.selector.on_loss(now, path, nbytes)

    def forget(self, lane: object) -> None:
        """The lane's message is over."""
        self._lanes.pop(lane, None)

    def _per_path(self, paths: np.ndarray) -> list[tuple[int, float]]:
        known = paths[paths >= 0].astype(np.int64)
        counts = np.bincount(known, minlength=len(self.selector.stats))
        return [(p, float(counts[p]) * self.chunk_size) for p in np.flatnonzero(counts).tolist()]


class _LanePaths:
    """Per chunk of one lane: the path of its last transmission, how often it was sent
    and when last."""

    def __init__(self, n_chunks: int) -> None:
        self.paths = np.full(n_chunks, -1, dtype=np.int16)
        self.sends = np.zeros(n_chunks, dtype=np.int32)
        self.sent_at = np.zeros(n_chunks, dtype=np.float64)

    def samples(self, now: float, chunks: np.ndarray) -> dict[int, float]:
        """Per path, ``now`` minus the send time of its newest chunk among ``chunks`` that
        was sent once (Karn's rule: a chunk sent twice cannot tell which copy arrived)."""
        once = chunks[(self.sends[chunks] == 1) & (self.paths[chunks] >= 0)]
        paths, sent = self.paths[once], self.sent_at[once]
        newest = {int(p): float(sent[paths == p].max()) for p in np.unique(paths)}
        return {path: now - at for path, at in newest.items() if now > at}
