"""A UDP QP's pacer: a token bucket that lets a paced sender go a batch at a time.

A paced sender wakes when a batch of _BATCH_S (at most _WAKE_PACKETS) may go, and the
bucket holds _BUCKET_S, and at least a batch and _LATE_S more, so a wake-up up to
_LATE_S late (a busy core) loses no tokens (rate). Each wake-up is a progress round,
whose fixed cost (about 0.3 ms of Python) the batch shares: 2 ms batches against 1 ms
took 8-12% off the CPU per byte at each end; 4 ms against 2 ms took 31% off the
sender's (1.59 -> 1.10 s/GiB, 8 KiB packets at 1 Gbit/s, four alternating pairs) with
the same transfer times and no queue drops on the emulated 1 Gbit/s links at 25 and
100 ms, lossless and at 1e-2 (docs/benchmarks.md, CPU per byte round 9). Where the
batch is 64 packets (5 Gbit/s with 8 KiB packets) nothing changed: a bucket of a batch
and 2 ms there (2.8 ms, not 4) made 256 MiB at 5 Gbit/s 10% slower. The largest burst
a queue must absorb: max(16 packets, 4 ms, a batch + 2 ms): 6 ms at 1 Gbit/s with
8 KiB packets.
"""

from __future__ import annotations

from sdr.pacing import TokenBucket

__all__ = ["BatchPacer"]

_BATCH_S = 0.004
_LATE_S = 0.002
_BUCKET_S = 0.004
_BURST_PACKETS = 16
_WAKE_PACKETS = 64


class BatchPacer(TokenBucket):
    """A :class:`TokenBucket` over packets of ``packet_bits`` (IP bytes * 8) whose sender
    sends in batches, not packet by packet."""

    def __init__(self, rate: float | None, packet_bits: int) -> None:
        self.packet_bits = packet_bits
        super().__init__(rate, self._shape(rate)[0])
        self._shape_batches(rate)

    def _shape(self, rate: float | None) -> tuple[float, float]:
        """(bucket, batch) in bits at ``rate``: a batch is at most _WAKE_PACKETS and
        _BATCH_S of the rate; the bucket at least _BUCKET_S of the rate (and
        _BURST_PACKETS), and a batch and _LATE_S more."""
        batch: float = _WAKE_PACKETS * self.packet_bits
        if rate is not None:
            batch = min(batch, max(self.packet_bits, rate * _BATCH_S))
        bucket = max(_BURST_PACKETS * self.packet_bits, (rate or 0) * _BUCKET_S)
        return max(bucket, batch + (rate or 0) * _LATE_S), batch

    def _shape_batches(self, rate: float | None) -> None:
        # a paced sender sends in batches, not packet by packet: it waits until a batch
        # is allowed, so the fixed cost of a progress round is shared by many packets
        self.burst_bits, self._wake_bits = self._shape(rate)
        self._min_batch = max(1, int(self._wake_bits // self.packet_bits))

    def set_pacing_rate(self, now: float, bits_per_s: float) -> None:
        """Pace at ``bits_per_s`` from ``now`` on, with burst and batch sized to it."""
        self.set_rate(now, bits_per_s)
        self._shape_batches(bits_per_s)

    def batch_budget(self, now: float) -> int:
        """Packets that may go now: 0 until at least one batch may."""
        budget = self.budget(now, self.packet_bits)
        return budget if budget >= self._min_batch else 0

    def next_batch_time(self, now: float) -> float:
        """When a batch of packets may next go (``now`` if it already may)."""
        return self.next_send_time(now, self._wake_bits)
