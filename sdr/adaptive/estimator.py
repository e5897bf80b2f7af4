"""Online link estimation for one connection: drop rate, burstiness, RTT, bandwidth.

Sans-I/O: fed observations with an explicit ``now``, never reads a clock.

* Loss, per message, from the receiver's chunk bitmaps (:class:`sdr.adaptive.report.GapCounter`
  via a LOSS_REPORT): ``trials`` chunks whose fate is known on first transmission,
  ``losses`` of them missing when a later chunk of the same lane landed, in ``runs``
  separate runs. The drop rate is the ratio of exponentially decayed sums, decayed per
  chunk observed (half-life ``half_life_chunks``), so old evidence fades at the pace
  evidence arrives, not with wall time: a quiet connection keeps its estimate.
* Burstiness: mean loss-run length in chunks (decayed ``losses / runs``): 1 for
  independent losses, larger for bursts (Gilbert-Elliott links).
* RTT: median of the last ``rtt_window`` samples (ACK arrival minus the message's last
  data departure: queueing and decoding add to a sample, a needless retransmission that
  left after the receiver was done takes from it; the median ignores both tails).
* Bandwidth: EWMA of the receiver's delivery rate (bytes that landed / first-to-last
  arrival span of a message).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from sdr.errors import ConfigError

__all__ = ["LinkEstimate", "LinkEstimator"]


@dataclass(frozen=True)
class LinkEstimate:
    """A snapshot of the estimator (None: no evidence yet).

    chunk_drop: per-chunk loss probability; burst: mean loss-run length in chunks;
    rtt: seconds; bandwidth: delivery rate in bits/s; trials: decayed chunk count behind
    the drop estimate.
    """

    chunk_drop: float | None
    burst: float | None
    rtt: float | None
    bandwidth: float | None
    trials: float

    def packet_drop(self, packets_per_chunk: int) -> float | None:
        """The per-packet drop rate that gives ``chunk_drop`` for i.i.d. packet losses."""
        if self.chunk_drop is None:
            return None
        p = min(self.chunk_drop, 1.0 - 1e-12)
        return 1.0 - (1.0 - p) ** (1.0 / max(1, packets_per_chunk))

    def describe(self) -> str:
        """One line for logs: ``drop 2.1e-03/chunk, burst 1.0, rtt 25.3 ms, 0.98 Gbit/s``."""
        parts = [
            "drop ?" if self.chunk_drop is None else f"drop {self.chunk_drop:.2e}/chunk",
            "burst ?" if self.burst is None else f"burst {self.burst:.2f}",
            "rtt ?" if self.rtt is None else f"rtt {self.rtt * 1e3:.1f} ms",
            "bw ?" if self.bandwidth is None else f"{self.bandwidth / 1e9:.3g} Gbit/s",
        ]
        return ", ".join(parts) + f" ({self.trials:.0f} chunks)"


class LinkEstimator:
    """Decayed loss counts, a windowed median RTT and an EWMA delivery rate."""

    def __init__(
        self, half_life_chunks: float = 128.0, rtt_window: int = 16, bw_weight: float = 0.25
    ) -> None:
        if not half_life_chunks > 0:
            raise ConfigError(f"half_life_chunks must be > 0, got {half_life_chunks!r}")
        if rtt_window < 1:
            raise ConfigError(f"rtt_window must be >= 1, got {rtt_window!r}")
        if not 0 < bw_weight <= 1:
            raise ConfigError(f"bw_weight must be in (0, 1], got {bw_weight!r}")
        self.half_life_chunks = float(half_life_chunks)
        self.bw_weight = bw_weight
        self._trials = 0.0
        self._losses = 0.0
        self._runs = 0.0
        self._rtts: deque[float] = deque(maxlen=rtt_window)
        self._bandwidth: float | None = None
        self.last_update: float | None = None
        self.reports = 0

    def observe_loss(self, now: float, trials: int, losses: int, runs: int) -> None:
        """One message's first-transmission outcome: ``losses`` of ``trials`` chunks lost,
        in ``runs`` runs of consecutive chunks."""
        if trials < 0 or not 0 <= losses <= trials or not 0 <= runs <= losses:
            raise ConfigError(
                f"loss observation needs 0 <= runs <= losses <= trials, got "
                f"trials={trials}, losses={losses}, runs={runs}"
            )
        if runs == 0 and losses:
            raise ConfigError(f"{losses} losses need at least one run")
        decay = math.pow(0.5, trials / self.half_life_chunks)
        self._trials = self._trials * decay + trials
        self._losses = self._losses * decay + losses
        self._runs = self._runs * decay + runs
        self.last_update = now
        self.reports += 1

    def observe_rtt(self, now: float, sample: float) -> None:
        """One RTT sample in seconds (ignored unless positive and finite)."""
        if sample > 0 and math.isfinite(sample):
            self._rtts.append(sample)
            self.last_update = now

    def observe_delivery(self, now: float, nbytes: int, seconds: float) -> None:
        """``nbytes`` landed over ``seconds`` at the receiver (ignored for tiny spans)."""
        if nbytes > 0 and seconds > 1e-6:
            rate = nbytes * 8 / seconds
            w = self.bw_weight
            self._bandwidth = (
                rate if self._bandwidth is None else (1 - w) * self._bandwidth + w * rate
            )
            self.last_update = now

    def estimate(self) -> LinkEstimate:
        """The current estimate."""
        drop = self._losses / self._trials if self._trials > 0 else None
        burst = self._losses / self._runs if self._runs > 1e-9 else (1.0 if drop == 0 else None)
        rtt = float(np.median(self._rtts)) if self._rtts else None
        return LinkEstimate(drop, burst, rtt, self._bandwidth, self._trials)
