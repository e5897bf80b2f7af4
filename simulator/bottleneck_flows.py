"""The flows of :mod:`sdr.simulator.bottleneck`: SDR flows and TCP-like window models.

- :class:`SdrFlow` is paced and windowed by a real :mod:`sdr.congestion` controller (the
  same object the SDK will run), fed per-packet ACKs with RTT samples and the losses the
  ACKs report; with several paths it sends on the path a real
  :class:`~sdr.congestion.paths.PathSelector` picks and feeds the controller the
  selector's propagation-normalized RTT. Lost bytes are sent again (Selective Repeat's
  traffic pattern; the scheme's own timers are not modelled here).
- :class:`TcpFlow` is a window model, not paced (ACK-clocked, as Linux without the fq
  qdisc): slow start, then Reno (RFC 5681: +1 MSS per RTT, halve on loss) or CUBIC
  (RFC 9438: ``W(t) = C (t - K)^3 + W_max``, C = 0.4, beta = 0.7, the Reno-friendly
  estimate), one window cut per RTT, RTO to one MSS. A TCP BBR flow is stood in for by an
  :class:`SdrFlow` with the ``bbr`` controller (a paced BBR sender; no kernel BBR here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sdr.congestion.base import CongestionController
from sdr.congestion.paths import PathSelector
from sdr.errors import ConfigError

if TYPE_CHECKING:
    from sdr.simulator.bottleneck import Bottleneck

__all__ = ["SdrFlow", "SimFlow", "TcpFlow"]


class SimFlow:
    """What every flow shares: the bytes to move, the logs, the engine hooks.

    size: bytes to deliver (None: send until ``stop``); start, stop: seconds.
    extra_rtt: seconds added to this flow's RTT on every path (flows of unequal RTT).
    """

    label = "flow"

    def __init__(
        self,
        *,
        size: int | None = None,
        start: float = 0.0,
        stop: float = math.inf,
        mtu: int = 4096,
        extra_rtt: float = 0.0,
        label: str | None = None,
    ) -> None:
        if size is not None and size <= 0:
            raise ConfigError(f"flow size must be > 0 bytes or None, got {size!r}")
        self.size, self.start, self.stop, self.mtu = size, start, stop, mtu
        self.extra_rtt = extra_rtt
        if label is not None:
            self.label = label
        self.engine: Bottleneck | None = None
        self.index = -1
        self.sent_new = 0  # first transmissions, bytes
        self.retransmit = 0  # bytes waiting to be sent again
        self.in_flight = 0
        self.delivered = 0
        self.losses = 0  # packets
        self.finished: float | None = None
        self.last_ack = 0.0
        self.srtt: float | None = None
        self.ack_t: list[float] = []
        self.ack_b: list[int] = []
        self.rate_t: list[float] = []
        self.rate_v: list[float] = []  # the sender's rate (pacing, or cwnd/srtt) bits/s

    def attach(self, engine: Bottleneck, index: int) -> None:
        self.engine, self.index = engine, index

    def _has_data(self, now: float) -> bool:
        if self.finished is not None or now >= self.stop:
            return False
        return self.retransmit > 0 or self.size is None or self.sent_new < self.size

    def _next_size(self) -> int:
        if self.retransmit > 0:
            return min(self.mtu, self.retransmit)
        if self.size is None:
            return self.mtu
        return min(self.mtu, self.size - self.sent_new)

    def _take(self, size: int) -> None:
        if self.retransmit > 0:
            self.retransmit -= size
        else:
            self.sent_new += size
        self.in_flight += size

    def busy(self) -> bool:
        """Whether anything is in flight or waiting to be sent."""
        return self.in_flight > 0 or self.retransmit > 0

    def rto(self) -> float:
        """The retransmit timeout in seconds (3 smoothed RTTs, at least 10 ms)."""
        return max(0.01, 3 * self.srtt) if self.srtt is not None else 1.0

    def _acked(self, now: float, size: int, rtt: float) -> None:
        self.in_flight -= size
        self.delivered += size
        self.last_ack = now
        self.srtt = rtt if self.srtt is None else 0.875 * self.srtt + 0.125 * rtt
        self.ack_t.append(now)
        self.ack_b.append(size)
        if self.size is not None and self.delivered >= self.size and self.finished is None:
            self.finished = now

    def _log_rate(self, now: float, rate: float) -> None:
        if not self.rate_t or now - self.rate_t[-1] >= 1e-3:
            self.rate_t.append(now)
            self.rate_v.append(rate)

    # engine hooks, overridden
    def wake(self, now: float) -> float | None:
        """Send what may go now; return the next time to be woken (None: on an ACK)."""
        raise NotImplementedError

    def on_ack(
        self, now: float, path: int, size: int, rtt: float, lost: Sequence[tuple[int, float]]
    ) -> None:
        raise NotImplementedError

    def on_timeout(self, now: float, path: int, lost: Sequence[tuple[int, float]]) -> None:
        raise NotImplementedError


class SdrFlow(SimFlow):
    """An SDR sender: paced at ``controller.pacing_rate``, windowed by its ``cwnd``."""

    label = "sdr"

    def __init__(
        self,
        controller: CongestionController,
        *,
        paths: Sequence[int] = (0,),
        selector: PathSelector | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.cc = controller
        self.paths = list(paths)
        if selector is not None and len(selector.stats) != len(self.paths):
            raise ConfigError(f"selector has {len(selector.stats)} paths, flow {len(self.paths)}")
        self.selector = selector
        self._next_send = 0.0
        self.path_bytes = [0] * len(self.paths)  # bytes sent per path (index into paths)
        self.path_log: list[tuple[float, list[float]]] = []

    def wake(self, now: float) -> float | None:
        if now < self.start:
            return self.start
        engine, cc, sel = self.engine, self.cc, self.selector
        assert engine is not None
        while self._has_data(now):
            if now < self._next_send:
                return self._next_send
            size = self._next_size()
            if not cc.can_send(size):
                return None
            slot = sel.pick(now, probe=True) if sel is not None else 0
            self._take(size)
            engine.transmit(now, self.index, self.paths[slot], size)
            cc.on_sent(now, size)
            if sel is not None:
                sel.on_sent(now, slot, size)
            self.path_bytes[slot] += size
            self._next_send = max(self._next_send, now) + size * 8 / cc.bounded_pacing_rate
        return None

    def on_ack(
        self, now: float, path: int, size: int, rtt: float, lost: Sequence[tuple[int, float]]
    ) -> None:
        slot = self.paths.index(path) if len(self.paths) > 1 else 0
        self._lost(now, slot, lost)
        sel = self.selector
        sample = rtt
        if sel is not None:
            sel.on_ack(now, slot, size, rtt)
            sample = sel.normalized_rtt(slot, rtt)
            if not self.path_log or now - self.path_log[-1][0] >= 5e-3:
                self.path_log.append((now, sel.weights))
        self.cc.on_ack(now, size, sample)
        self._acked(now, size, rtt)
        self._log_rate(now, self.cc.pacing_rate)

    def on_timeout(self, now: float, path: int, lost: Sequence[tuple[int, float]]) -> None:
        slot = self.paths.index(path) if len(self.paths) > 1 else 0
        self._lost(now, slot, lost)

    def _lost(self, now: float, slot: int, lost: Sequence[tuple[int, float]]) -> None:
        for size, sent in lost:
            self.in_flight -= size
            self.retransmit += size
            self.losses += 1
            self.cc.on_loss(now, size, None, sent)
            if self.selector is not None:
                self.selector.on_loss(now, slot, size)


class TcpFlow(SimFlow):
    """A Reno or CUBIC window (``kind``), ACK-clocked; see the module docstring."""

    C, BETA = 0.4, 0.7

    def __init__(self, kind: str = "cubic", *, init_cwnd: int = 10, **kwargs: object) -> None:
        if kind not in ("reno", "cubic"):
            raise ConfigError(f"TCP kind must be 'reno' or 'cubic', got {kind!r}")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.kind = kind
        if kwargs.get("label") is None:
            self.label = kind
        self.cwnd = float(init_cwnd)  # in MSS
        self.ssthresh = math.inf
        self._recover_until = -math.inf
        self._w_max = 0.0
        self._epoch: float | None = None
        self._k = 0.0
        self._origin = 0.0
        self._w_est = 0.0

    def wake(self, now: float) -> float | None:
        if now < self.start:
            return self.start
        engine = self.engine
        assert engine is not None
        while self._has_data(now) and self.in_flight + self.mtu <= self.cwnd * self.mtu:
            size = self._next_size()
            self._take(size)
            engine.transmit(now, self.index, 0, size)
        return None

    def on_ack(
        self, now: float, path: int, size: int, rtt: float, lost: Sequence[tuple[int, float]]
    ) -> None:
        if lost:
            self._lost(now, lost)
        self._acked(now, size, rtt)
        acked = size / self.mtu
        if self.cwnd < self.ssthresh:
            self.cwnd += acked
        elif self.kind == "reno":
            self.cwnd += acked / self.cwnd
        else:
            self._cubic(now, acked)
        self._log_rate(now, self.cwnd * self.mtu * 8 / (self.srtt or rtt))

    def on_timeout(self, now: float, path: int, lost: Sequence[tuple[int, float]]) -> None:
        for size, _ in lost:
            self.in_flight -= size
            self.retransmit += size
            self.losses += 1
        self.ssthresh = max(2.0, self.cwnd / 2)
        self.cwnd = 1.0
        self._epoch = None
        self._recover_until = now + (self.srtt or 0.0)

    def _lost(self, now: float, lost: Sequence[tuple[int, float]]) -> None:
        for size, _ in lost:
            self.in_flight -= size
            self.retransmit += size
            self.losses += 1
        if now < self._recover_until:
            return  # one cut per window of data
        self._recover_until = now + (self.srtt or 0.0)
        if self.kind == "reno":
            self.cwnd = max(2.0, self.cwnd / 2)
        else:
            # fast convergence (RFC 9438 section 4.7)
            fast = self.cwnd < self._w_max
            self._w_max = self.cwnd * (1 + self.BETA) / 2 if fast else self.cwnd
            self.cwnd = max(2.0, self.cwnd * self.BETA)
            self._epoch = None
        self.ssthresh = self.cwnd

    def _cubic(self, now: float, acked: float) -> None:
        if self._epoch is None:
            self._epoch = now
            if self._w_max > self.cwnd:
                self._k = ((self._w_max - self.cwnd) / self.C) ** (1 / 3)
                self._origin = self._w_max
            else:
                self._k, self._origin = 0.0, self.cwnd
            self._w_est = self.cwnd
        rtt = self.srtt or 0.0
        t = now - self._epoch + rtt
        target = self._origin + self.C * (t - self._k) ** 3
        target = min(max(target, self.cwnd), 1.5 * self.cwnd)
        alpha = 3 * (1 - self.BETA) / (1 + self.BETA)
        self._w_est += alpha * acked / self.cwnd
        self.cwnd += (target - self.cwnd) / self.cwnd * acked
        self.cwnd = max(self.cwnd, self._w_est)
