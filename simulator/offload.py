"""Throughput model of the receive-side offload (DPA-style worker threads).

Each worker thread polls its channel's completion queue and spends a fixed cost per packet
(validate, write the packet bit) plus a cost per chunk (coalesce into the chunk bitmap). The
aggregate packet rate follows the universal scalability law,

    rate(N) = N / c_eff / (1 + sigma (N - 1) + kappa N (N - 1)),

``c_eff = c_packet + c_chunk / packets_per_chunk``. The defaults are fitted to the paper's
Fig 16 (11.6, 22.9, 42.9, 70.5 Mpkt/s at 4, 8, 16, 32 threads, taken as 64 KiB chunks of
4 KiB packets) and its 1-packet-chunk point (15 Mpkt/s at 16 threads). Below a message size
the per-message re-post (slot reset, key table update) dominates; ``repost_s`` is set so that
400 Gbit/s is reached from 512 KiB messages, as the paper reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit

from sdr.errors import ConfigError

__all__ = ["PAPER_FIG16", "OffloadModel", "fit_scalability"]

#: Paper Fig 16: worker threads -> packets per second (64 KiB chunks, 4 KiB MTU assumed).
PAPER_FIG16: dict[int, float] = {4: 11.6e6, 8: 22.9e6, 16: 42.9e6, 32: 70.5e6}
_PAPER_ONE_PACKET_CHUNKS = (16, 15e6)  # 16 threads sustain 15 Mpkt/s with 1-packet chunks


def _usl(n: np.ndarray, lam: float, sigma: float, kappa: float) -> np.ndarray:
    return lam * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))


def fit_scalability(threads: Sequence[int], rates: Sequence[float]) -> tuple[float, float, float]:
    """Fit ``(per-thread rate, sigma, kappa)`` of the scalability law to measured rates."""
    n = np.asarray(threads, dtype=float)
    x = np.asarray(rates, dtype=float)
    if n.size < 3 or n.size != x.size:
        raise ConfigError("fitting needs >= 3 (threads, rate) points of equal length")
    guess = (x[0] / n[0], 0.01, 1e-4)
    params, _ = curve_fit(_usl, n, x, p0=guess, bounds=([0, 0, 0], [np.inf, 1, 1]))
    return float(params[0]), float(params[1]), float(params[2])


def _paper_costs() -> tuple[float, float, float, float]:
    lam, sigma, kappa = fit_scalability(list(PAPER_FIG16), list(PAPER_FIG16.values()))
    c_eff = 1.0 / lam  # seconds per packet per thread at 16 packets per chunk
    threads, rate = _PAPER_ONE_PACKET_CHUNKS
    c_one = 1.0 / (rate / (threads / (1 + sigma * (threads - 1) + kappa * threads * (threads - 1))))
    # c_packet + c_chunk / 16 = c_eff and c_packet + c_chunk = c_one
    c_chunk = (c_one - c_eff) * 16.0 / 15.0
    return c_eff - c_chunk / 16.0, c_chunk, sigma, kappa


@dataclass(frozen=True)
class OffloadModel:
    """Packet rate and goodput of ``threads`` offload workers.

    Attributes:
        packet_cost_s: per-packet work of one thread (seconds).
        chunk_cost_s: per-chunk work (bitmap coalescing), shared by the chunk's packets.
        sigma, kappa: contention and coherency terms of the scalability law.
        repost_s: per-message re-post cost (slot reset, key table update).
    """

    packet_cost_s: float
    chunk_cost_s: float
    sigma: float
    kappa: float
    repost_s: float = 512 * 1024 * 8 / 400e9

    @classmethod
    def paper_defaults(cls) -> OffloadModel:
        """The model fitted to the paper's BlueField-3 DPA numbers (Fig 16)."""
        packet, chunk, sigma, kappa = _paper_costs()
        return cls(packet, chunk, sigma, kappa)

    def packet_rate(self, threads: int | np.ndarray, packets_per_chunk: int = 16) -> np.ndarray:
        """Aggregate packets per second of ``threads`` workers."""
        n = np.asarray(threads, dtype=float)
        if np.any(n < 1) or packets_per_chunk < 1:
            raise ConfigError("threads and packets per chunk must be >= 1")
        cost = self.packet_cost_s + self.chunk_cost_s / packets_per_chunk
        return _usl(n, 1.0 / cost, self.sigma, self.kappa)

    def goodput_bps(
        self,
        message_bytes: int | np.ndarray,
        threads: int,
        *,
        rate: float = 400e9,
        mtu: int = 4096,
        chunk_size: int = 65536,
    ) -> np.ndarray:
        """Achievable bits per second for back-to-back messages of ``message_bytes`` on a
        line ``rate`` bits/s.

        A message takes the longest of: its wire time, its packets at the workers' rate,
        and the per-message re-post cost.
        """
        size = np.asarray(message_bytes, dtype=float)
        packets = np.ceil(size / mtu)
        packets_per_s = self.packet_rate(threads, max(chunk_size // mtu, 1))
        per_message = np.maximum.reduce(
            [size * 8 / rate, packets / packets_per_s, np.full_like(size, self.repost_s)]
        )
        return size * 8 / per_message

    def threads_for_line_rate(
        self, rate: float = 400e9, mtu: int = 4096, chunk_size: int = 65536
    ) -> int:
        """Fewest threads whose packet rate reaches a line ``rate`` (bits/s) of MTU packets."""
        need = rate / (mtu * 8)
        for n in range(1, 1025):
            if self.packet_rate(n, max(chunk_size // mtu, 1)) >= need:
                return n
        raise ConfigError(f"no thread count up to 1024 reaches {rate:g} bit/s")
