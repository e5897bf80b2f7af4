"""The congestion and multipath books of a connection's writes.

A :class:`CongestionBooks` holds what a :class:`~sdr.reliability.connection.
ReliableConnection` tells the congestion controller (``config.congestion``,
:mod:`sdr.congestion`) and the per-chunk path choice (``config.multipath``,
:mod:`sdr.reliability.multipath`) about its writes: departures feed the controller's
``on_sent``, the machines' :class:`~sdr.reliability.base.Delivered` and
:class:`~sdr.reliability.base.Lost` its ``on_ack`` and ``on_loss`` (and the paths' own
books), and what a write still counts in flight when it ends is acknowledged with its
final ACK or lost with its failure. Each write keeps the bytes it counts
(:attr:`~sdr.reliability.transfers.Outgoing.cc_bytes`), so a verdict can only take its
own chunks' bytes off. The window (:meth:`CongestionBooks.window`) applies when the scheme
acknowledges as it goes (``Scheme.acks_progressively``); EC acknowledges a message at its
end, so it is paced by rate alone.
"""

from __future__ import annotations

import math

import numpy as np

from sdr.config import QPAttr
from sdr.congestion import CongestionController, controller_for
from sdr.errors import ConfigError, SDRError
from sdr.reliability.base import Delivered, Lost
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.multipath import ChunkPaths
from sdr.reliability.transfers import Outgoing
from sdr.send_table import SendRecord

__all__ = ["CongestionBooks", "congestion_controller"]


def congestion_controller(config: ReliabilityConfig, attr: QPAttr) -> CongestionController | None:
    """The controller ``config.congestion`` names for a QP of ``attr`` (None for ``fixed``:
    the QP's pacer keeps its ``rate_limit``). It starts at ``link_rate`` (else the QP's
    ``rate_limit``) and never exceeds ``congestion_params["max_rate"]`` (default: that
    rate)."""
    if config.congestion == "fixed":
        return None
    rate = config.link_rate if config.link_rate is not None else attr.rate_limit
    params = dict(config.congestion_params)
    max_rate = params.pop("max_rate", None)
    if rate is None and max_rate is None and config.congestion != "auto":
        raise ConfigError(
            f"congestion {config.congestion!r} needs a rate to start from: set the QP's "
            "rate_limit or [reliability] link_rate (or congestion_params.max_rate)"
        )
    return controller_for(config.congestion, rate, max_rate=max_rate, mtu=attr.mtu, **params)


class CongestionBooks:
    """The controller and the path choice of one connection, fed by its writes."""

    def __init__(self, config: ReliabilityConfig, attr: QPAttr, acks_progressively: bool) -> None:
        self.config = config
        self.attr = attr
        self.controller = congestion_controller(config, attr)
        """The congestion controller (None: ``fixed``, the QP paces at its rate_limit)."""
        self.windowed = self.controller is not None and acks_progressively
        """The controller's window limits what is in flight (not only its rate)."""
        self.paths: ChunkPaths | None = None
        """Per-chunk path choice over the channels (``config.multipath``), else None."""
        if config.multipath and attr.channels > 1:
            self.paths = ChunkPaths(attr.channels, attr.mtu, attr.chunk_size, config.rto)
        self.largest_rtt: float | None = None
        """The longest RTT sample a write reported (for the RTO advice)."""

    def window(self, budget: int) -> int:
        """``budget`` (packets to send now) cut to the room the window leaves."""
        cc = self.controller
        if cc is not None and self.windowed and budget > 0 and math.isfinite(cwnd := cc.cwnd):
            # never less than an RTO at the pacing rate: bytes lost in flight leave the
            # books only when the scheme notices (an RTO at worst), and the window must
            # not stall the sender before that; nor less than two chunks: the receiver
            # acknowledges whole chunks, so a window inside one would never open again
            rate = cc.bounded_pacing_rate
            cwnd = max(cwnd, rate / 8 * self.config.rto, 2.0 * self.attr.chunk_size)
            room = cwnd - cc.in_flight
            idle = cc.in_flight <= 0
            budget = min(budget, max(int(room // self.attr.mtu), 1 if idle else 0))
        return budget

    def departed(self, now: float, out: Outgoing, lane: int, chunks: np.ndarray) -> None:
        """Chunks of ``out``'s ``lane`` left: the bytes not counted yet are in flight."""
        cc = self.controller
        if cc is not None:
            out.last_sent = now
            if nbytes := out.lanes[lane].count_in_flight(chunks):
                out.cc_bytes += nbytes
                cc.on_sent(now, nbytes)

    def signal(self, now: float, out: Outgoing, signal: Delivered | Lost) -> None:
        """A write's machine said chunks were delivered or lost."""
        rtt = signal.rtt_s if isinstance(signal, Delivered) else None
        if rtt is not None:
            self.largest_rtt = max(self.largest_rtt or 0.0, rtt)
        if self.paths is not None and signal.chunks is not None:
            lane = out.lanes[0].record
            if isinstance(signal, Delivered):
                rtt = self.paths.delivered(now, lane, signal.chunks, rtt, signal.sample_chunk)
            else:
                self.paths.lost(now, lane, signal.chunks)
        cc = self.controller
        if cc is None:
            return
        # the bytes the books counted for these chunks, not the signal's: a chunk
        # delivered or lost again while not counted (a late copy, a repeated verdict)
        # must not take other chunks' bytes off the books
        delivered = isinstance(signal, Delivered)
        if signal.chunks is None:  # a scheme that does not say which: trust its count
            nbytes = min(float(signal.nbytes), out.cc_bytes)
        else:
            nbytes = float(out.lanes[0].settle(signal.chunks, delivered))
        out.cc_bytes -= nbytes
        if isinstance(signal, Delivered):
            cc.on_ack(now, nbytes, rtt)
        elif nbytes:
            cc.on_loss(now, nbytes, None, signal.sent_at)

    def ended(self, now: float, out: Outgoing, error: SDRError | None) -> None:
        """Write ``out`` is over: what it still counts leaves the controller's books."""
        if self.controller is not None and out.cc_bytes > 0:
            # what no SACK covered (EC's parity, a last chunk the final ACK covered,
            # duplicates): delivered with the ACK, or forgotten with a failed write
            if error is None:
                self.controller.on_ack(now, out.cc_bytes, self._final_rtt(now, out))
            else:
                self.controller.on_loss(now, out.cc_bytes, True)
            out.cc_bytes = 0.0

    def forget(self, lane: SendRecord) -> None:
        """The lane (a send record) of a write that is over leaves the paths' books."""
        if self.paths is not None:
            self.paths.forget(lane)

    def _final_rtt(self, now: float, out: Outgoing) -> float | None:
        """An RTT sample from a write's final ACK, for schemes without SACK samples (EC):
        from its last departure, unless it retransmitted (Karn). It holds the receiver's
        decoding time too: one sample per message, biased high by that."""
        if self.windowed or out.last_sent is None:
            return None
        if out.machine.stats.get("chunks_retransmitted", 0):
            return None
        rtt = now - out.last_sent
        return rtt if rtt > 0 else None
