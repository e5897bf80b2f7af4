"""The largest inputs the simulator evaluates, so that no request takes unbounded memory.

Monte Carlo holds a few float64 arrays of ``samples`` entries (8 MB each at the bound); a
sweep keeps one row per point until it rewrites its output in grid order (about 1.5 KB a
row); a write size past a petabyte is no link's single write and overflows the chunk
arithmetic long before 1e308. Past a bound is a one-line :class:`~sdr.errors.ConfigError`
that names the value and the bound; split a larger sweep into several.
"""

from __future__ import annotations

import math
import numbers

from sdr.errors import ConfigError

__all__ = [
    "MAX_GRID_POINTS",
    "MAX_SAMPLES",
    "MAX_WRITE_BYTES",
    "check_drop",
    "check_grid_points",
    "check_samples",
    "check_write_size",
]

#: samples per evaluation (Monte Carlo draws or simulated writes)
MAX_SAMPLES = 1_000_000
#: bytes of one simulated write (1 PiB)
MAX_WRITE_BYTES = 1 << 50
#: points of one sweep
MAX_GRID_POINTS = 100_000


def check_samples(samples: object) -> int:
    """``samples`` as an int in [1, MAX_SAMPLES]; ConfigError otherwise."""
    if isinstance(samples, bool) or not isinstance(samples, numbers.Integral):
        raise ConfigError(f"samples must be a whole number, got {samples!r}")
    count = int(samples)  # exact for an Integral, and comparable (numbers.Integral is not)
    if not 1 <= count <= MAX_SAMPLES:
        raise ConfigError(f"samples must be in [1, {MAX_SAMPLES:,}], got {count:,}")
    return count


def check_write_size(size_bytes: object) -> int:
    """``size_bytes`` as an int in [1, MAX_WRITE_BYTES] (1 PiB); ConfigError otherwise."""
    try:
        finite = math.isfinite(size_bytes)  # type: ignore[arg-type]
    except TypeError:
        raise ConfigError(f"write size must be a number of bytes, got {size_bytes!r}") from None
    if not finite or not 1 <= size_bytes <= MAX_WRITE_BYTES:  # type: ignore[operator]
        shown = f"{float(size_bytes):.4g}" if abs(size_bytes) >= 1e15 else repr(size_bytes)  # type: ignore[arg-type]
        raise ConfigError(
            f"write size must be in [1 B, 1 PiB] ({MAX_WRITE_BYTES} bytes), got {shown} bytes"
        )
    if size_bytes != int(size_bytes):  # type: ignore[call-overload]
        raise ConfigError(f"write size must be whole bytes, got {size_bytes!r}")
    return int(size_bytes)  # type: ignore[call-overload]


def check_drop(drop: object) -> float:
    """``drop`` as a probability in [0, 1); ConfigError otherwise."""
    try:
        p = float(drop)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"drop probability must be a number in [0, 1), got {drop!r}") from None
    if not 0 <= p < 1:
        raise ConfigError(f"drop probability must be in [0, 1), got {drop!r}")
    return p


def check_grid_points(points: int) -> int:
    """``points`` if a sweep of that many is allowed (at most MAX_GRID_POINTS)."""
    if points > MAX_GRID_POINTS:
        raise ConfigError(
            f"the sweep has {points:,} points, more than the {MAX_GRID_POINTS:,} one sweep "
            "runs: split it (fewer sizes, drops, schemes, paths or rates per run)"
        )
    return points
