"""One units parser for sizes, rates, times and distances.

Internally the SDK uses bytes, bits per second, seconds and metres. Strings such as
``"64KiB"``, ``"400Gbit/s"``, ``"25ms"`` and ``"3750km"`` are parsed here and nowhere else;
plain numbers are taken as already being in the internal unit.
"""

from __future__ import annotations

import math
import re

from sdr.errors import ConfigError

__all__ = [
    "parse_size",
    "parse_rate",
    "parse_time",
    "parse_distance",
    "format_size",
    "format_rate",
    "format_time",
]

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z/µ]*)\s*$")

_SIZE_UNITS: dict[str, float] = {
    "": 1,
    "b": 1,
    "B": 1,
    "k": 1e3,
    "K": 1e3,
    "KB": 1e3,
    "kB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}

_RATE_UNITS: dict[str, float] = {
    "": 1,
    "bit/s": 1,
    "bps": 1,
    "Kbit/s": 1e3,
    "kbit/s": 1e3,
    "Kbps": 1e3,
    "kbps": 1e3,
    "Mbit/s": 1e6,
    "Mbps": 1e6,
    "Gbit/s": 1e9,
    "Gbps": 1e9,
    "Tbit/s": 1e12,
    "Tbps": 1e12,
    "B/s": 8,
    "KB/s": 8e3,
    "MB/s": 8e6,
    "GB/s": 8e9,
    "KiB/s": 8 * 2**10,
    "MiB/s": 8 * 2**20,
    "GiB/s": 8 * 2**30,
}

_TIME_UNITS: dict[str, float] = {
    "": 1,
    "s": 1,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
    "min": 60,
}

_DISTANCE_UNITS: dict[str, float] = {"": 1, "m": 1, "km": 1e3, "mi": 1609.344}


def _parse(value: object, units: dict[str, float], kind: str, example: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{kind} must be a number or a string like {example!r}, got {value!r}")
    if isinstance(value, int | float):
        try:
            result = float(value)
        except OverflowError:  # an int beyond float range (TOML integers are unbounded)
            text = str(value)
            message = f"{kind} {text[:12]}... ({len(text)} digits) is out of range"
            raise ConfigError(message) from None
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if not match or match.group(2) not in units:
            known = ", ".join(sorted(u for u in units if u))
            raise ConfigError(
                f"cannot parse {kind} {value!r}: expected a number with a unit like "
                f"{example!r} (units: {known})"
            )
        result = float(match.group(1)) * units[match.group(2)]
    else:
        raise ConfigError(f"{kind} must be a number or a string like {example!r}, got {value!r}")
    if not math.isfinite(result) or result < 0:
        raise ConfigError(f"{kind} must be finite and >= 0, got {value!r}")
    return result


def parse_size(value: object) -> int:
    """Parse a size in bytes: ``"64KiB"`` -> 65536, ``"1.5MB"`` -> 1500000, ``4096`` -> 4096."""
    result = _parse(value, _SIZE_UNITS, "size", "64KiB")
    if result != int(result):
        raise ConfigError(f"size {value!r} is not a whole number of bytes ({result})")
    return int(result)


def parse_rate(value: object) -> float:
    """Parse a rate in bits per second: ``"400Gbit/s"`` -> 4e11. Numbers are bits/s."""
    return _parse(value, _RATE_UNITS, "rate", "400Gbit/s")


def parse_time(value: object) -> float:
    """Parse a duration in seconds: ``"25ms"`` -> 0.025. Numbers are seconds."""
    return _parse(value, _TIME_UNITS, "time", "25ms")


def parse_distance(value: object) -> float:
    """Parse a distance in metres: ``"3750km"`` -> 3.75e6. Numbers are metres."""
    return _parse(value, _DISTANCE_UNITS, "distance", "3750km")


def format_size(nbytes: float) -> str:
    """Human form of a byte count with binary prefixes: 65536 -> ``"64KiB"``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.2f}{unit}"
    return f"{nbytes:.0f}B"


def format_rate(bits_per_s: float) -> str:
    """Human form of a rate: 4e11 -> ``"400Gbit/s"``."""
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("Kbit/s", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:.4g}{unit}"
    return f"{bits_per_s:.4g}bit/s"


def format_time(seconds: float) -> str:
    """Human form of a duration: 0.025 -> ``"25ms"``."""
    if seconds >= 1:
        return f"{seconds:.4g}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.4g}ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.4g}us"
    return f"{seconds * 1e9:.4g}ns"
