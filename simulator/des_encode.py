"""Encode time for Erasure Coding in the simulation: parity is ready only after it is computed.

The real EC sender encodes one submessage per work step and queues its parity at once;
in simulated time CPU work is free, so parity would be ready instantly. With a cost of
``seconds_per_byte`` (e.g. 1 / encode throughput of one core) the sender here encodes
submessage ``s`` during ``[start_s, start_s + cost * data bytes of s)``, one after the
other, and its parity is queued when that interval ends. The encoding itself is still the
real codec's; only *when* it happens is simulated. Checksums (the DIGEST) stay free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sdr.errors import ConfigError
from sdr.reliability import ErasureCoding, Scheme, SelectiveRepeatSender
from sdr.reliability.base import earliest
from sdr.reliability.erasure_coding import ErasureCodingSender

__all__ = ["with_encode_time"]


def with_encode_time(scheme: Scheme, clock: Callable[[], float], seconds_per_byte: float) -> None:
    """Make ``scheme``'s EC senders take ``seconds_per_byte`` of simulated time to encode.

    Changes the scheme instance in place (its ``sender_class``); SR schemes are left alone.
    """
    if seconds_per_byte < 0:
        raise ConfigError(f"encode cost must be >= 0 s/byte, got {seconds_per_byte!r}")
    if seconds_per_byte == 0 or not isinstance(scheme, ErasureCoding):
        return
    scheme.sender_class = _timed(scheme.sender_class, clock, seconds_per_byte)  # type: ignore[misc]


_EC = TypeVar("_EC", bound=ErasureCodingSender)


def _timed(base: type[_EC], clock: Callable[[], float], cost: float) -> type[_EC]:
    class TimedEncodeSender(base):  # type: ignore[valid-type, misc]
        """EC sender whose parity is ready ``cost`` s per data byte after encoding starts."""

        _ready: float | None = None

        def _encoded(self) -> int:
            return self.stats.get("submessages_encoded", 0)

        def _sub_bytes(self, sub: int) -> int:
            span = self.k * self.scheme.chunk_size
            return min((sub + 1) * span, self.geometry.length) - sub * span

        def has_work(self) -> bool:
            if not super().has_work():
                return False
            if not self.digest.done or self._encoded() >= self.n_subs:
                return True
            return self._ready is None or clock() >= self._ready

        def do_work(self, now: float) -> None:
            sub = self._encoded()
            if sub < self.n_subs:
                if self._ready is None:
                    self._ready = now + cost * self._sub_bytes(sub)
                if now < self._ready:  # still encoding: only the checksums progress
                    if not self.digest.done:
                        SelectiveRepeatSender.do_work(self, now)
                    return
                self._ready = None
            super().do_work(now)

        def next_timer(self) -> float | None:
            timer = super().next_timer()
            return earliest(timer, self._ready) if self.active else timer

    TimedEncodeSender.__name__ = f"TimedEncode{base.__name__}"
    return TimedEncodeSender
