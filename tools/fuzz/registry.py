"""The registry of fuzz targets, and a small reader that turns fuzz bytes into values.

A target takes raw bytes and must either accept them or raise the errors its API
documents (an ``sdr.SDRError``, or ``ValueError`` where documented); anything else is a
crash. The same targets run under atheris (``tools/fuzz/run.py``, millions of inputs)
and, briefly, in the test suite (tests/test_fuzz_targets.py).

Slow inputs are findings too. With ``SDR_FUZZ_SLOW_MS`` set (tools/fuzz/campaign.py sets
it, 100 ms by default) every registered target is wrapped by :func:`slow_guard`: an
input that takes longer than that, twice in a row, raises :class:`SlowInput`, which
atheris reports like any crash and saves as a ``crash-*`` file. libFuzzer's own
``-timeout`` counts whole seconds only, hence the wrapper. The time is the process's CPU
time (``time.process_time``), not the wall clock: on a loaded 2-core machine a fuzzer at
``nice 19`` can wait for a core far longer than an input costs (two such false findings,
155-258 ms on the wall clock for inputs that cost 0-15 ms, led to this). An input that
blocks without working is libFuzzer's ``-timeout`` backstop's to catch. The second run
and a few exempt first calls keep a garbage collection or a first import from counting.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping

from sdr.errors import ConfigError

__all__ = ["TARGETS", "target", "Reader", "SlowInput", "slow_guard", "slow_limit", "SLOW_ENV"]

TARGETS: dict[str, Callable[[bytes], None]] = {}

SLOW_ENV = "SDR_FUZZ_SLOW_MS"
"""Environment variable: the slow-input limit in milliseconds (unset or 0: no limit)."""

GRACE_CALLS = 3
"""First calls of a target never counted as slow (imports, rigs built on first use)."""


class SlowInput(Exception):
    """A fuzz input took longer than the slow-input limit: a finding, like a crash.

    Deliberately not an SDRError, so that no target's ``except SDRError`` can absorb it.
    """


def slow_limit(environ: Mapping[str, str] | None = None) -> float:
    """The slow-input limit in seconds from ``SDR_FUZZ_SLOW_MS`` (0.0: none)."""
    raw = (os.environ if environ is None else environ).get(SLOW_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        ms = float(raw)
    except ValueError:
        raise ConfigError(f"{SLOW_ENV} must be a number of milliseconds, got {raw!r}") from None
    if not 0 <= ms < float("inf"):
        raise ConfigError(f"{SLOW_ENV} must be a finite number of ms >= 0, got {raw!r}")
    return ms / 1000


def slow_guard(
    fn: Callable[[bytes], None],
    limit_s: float,
    *,
    grace: int = GRACE_CALLS,
    clock: Callable[[], float] = time.process_time,
) -> Callable[[bytes], None]:
    """``fn`` raising :class:`SlowInput` for an input that takes longer than ``limit_s``
    seconds (CPU time by default, ``clock``) on two runs in a row; ``fn`` itself when ``limit_s``
    is 0. The first ``grace`` calls are never counted; errors from ``fn`` pass through."""
    if limit_s <= 0:
        return fn
    calls = 0

    @functools.wraps(fn)
    def guarded(data: bytes) -> None:
        nonlocal calls
        calls += 1
        start = clock()
        fn(data)
        took = clock() - start
        if took <= limit_s or calls <= grace:
            return
        start = clock()
        fn(data)  # once more: a loaded machine or a collection is not the input's cost
        again = clock() - start
        if again > limit_s:
            raise SlowInput(
                f"{getattr(fn, '__name__', 'target')}: an input of {len(data)} bytes took "
                f"{took * 1e3:.4g} ms, then {again * 1e3:.4g} ms, expected <= "
                f"{limit_s * 1e3:g} ms (CPU time)"
            )

    return guarded


def target(name: str) -> Callable[[Callable[[bytes], None]], Callable[[bytes], None]]:
    """Register a fuzz target under ``name`` (wrapped by :func:`slow_guard` when the
    environment sets a slow-input limit); the function itself is returned unwrapped."""

    def wrap(fn: Callable[[bytes], None]) -> Callable[[bytes], None]:
        TARGETS[name] = slow_guard(fn, slow_limit())
        return fn

    return wrap


class Reader:
    """Consumes fuzz bytes front to back; reads past the end give zeros (never raise)."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def empty(self) -> bool:
        """All bytes consumed."""
        return self.pos >= len(self.data)

    def take(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer at the end of the input)."""
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out

    def _int(self, n: int) -> int:
        return int.from_bytes(self.take(n).ljust(n, b"\0"), "little")

    def u8(self) -> int:
        return self._int(1)

    def u16(self) -> int:
        return self._int(2)

    def u32(self) -> int:
        return self._int(4)

    def u64(self) -> int:
        return self._int(8)

    def rest(self) -> bytes:
        """Everything not consumed yet."""
        return self.take(len(self.data))
