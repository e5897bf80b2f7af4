"""One units parser for sizes, rates, times and distances.

Internally the SDK uses bytes, bits per second, seconds and metres. Strings such as
``"64KiB"``, ``"400Gbit/s"``, ``"25ms"`` and ``"3750km"`` are parsed here and nowhere else.

Python numbers (int/float) are taken as already being in the internal unit, so internal
callers pass floats. A *string* without a unit is refused for times, rates and distances
(``--rtt 25`` once meant 25 seconds): the error suggests ``"25ms"``. A bare integer
string is still bytes for sizes. Size prefixes without ``i`` follow perftest and iperf3:
``64K`` is 64 KiB; the explicit SI units ``kB``/``MB``/``GB`` stay decimal. In rates ``b``
is bits and ``B`` bytes: ``10Gb/s`` = ``10Gbit/s`` = ``10 Gbps``, ``1GB/s`` = 8 Gbit/s.
Every parser takes ``field=`` to name the setting in its errors.
"""

from __future__ import annotations

import math
import re

from sdr.errors import ConfigError

__all__ = [
    "parse_size",
    "parse_rate",
    "parse_seconds",
    "parse_time",
    "parse_distance",
    "format_size",
    "format_rate",
    "format_time",
]

_NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z/µμ]*)\s*$")

_BINARY: dict[str, float] = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_DECIMAL = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}

# Sizes are bytes. A bare prefix is binary, as in perftest and iperf3 (``64K`` = 64 KiB);
# ``KiB`` etc. are binary too; ``kB``/``KB``/``MB``... are the SI (decimal) units.
# ``b`` is not a size unit: in rates it means bits, so ``64Kb`` would be ambiguous.
_SIZE_UNITS: dict[str, float] = {"": 1, "B": 1}
for _p, _scale in _BINARY.items():
    _SIZE_UNITS.update({_p: _scale, _p.lower(): _scale, f"{_p}i": _scale, f"{_p}iB": _scale})
for _p, _scale in _DECIMAL.items():
    _SIZE_UNITS[f"{_p}B"] = _scale

# Rates are bits/s: ``b`` = bits, ``B`` = bytes (x8); SI prefixes are decimal as in
# iperf3 (``10Gb/s`` = ``10Gbit/s`` = ``10 Gbps`` = 1e10), ``Ki``/``Mi``... binary.
_RATE_UNITS: dict[str, float] = {}
for _p, _scale in {"": 1, **_DECIMAL, **{f"{k}i": v for k, v in _BINARY.items()}}.items():
    for _bits in ("bit/s", "b/s", "bps"):
        _RATE_UNITS[f"{_p}{_bits}"] = _scale
    for _bytes in ("B/s", "Bps"):
        _RATE_UNITS[f"{_p}{_bytes}"] = 8 * _scale
# iperf3's ``-b`` forms: a bare decimal prefix is bits/s (``1G`` = 1e9, ``500m`` = 5e8).
for _p, _scale in _DECIMAL.items():
    _RATE_UNITS.update({_p.upper(): _scale, _p.lower(): _scale})

_RATE_HELP = (
    "bit/s, b/s, bps (bits) or B/s, Bps (bytes), after a prefix k/K, M, G, T (decimal) "
    "or Ki, Mi, Gi, Ti (binary); or iperf3's bare K, M, G, T (bits/s, decimal)"
)

_TIME_UNITS: dict[str, float] = {
    "s": 1,
    "sec": 1,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,  # micro sign
    "μs": 1e-6,  # Greek mu
    "ns": 1e-9,
    "min": 60,
    "h": 3600,
}

_DISTANCE_UNITS: dict[str, float] = {"m": 1, "km": 1e3, "mi": 1609.344}


def _parse(
    value: object,
    units: dict[str, float],
    kind: str,
    example: str,
    field: str | None,
    unit_hint: str | None = None,
) -> float:
    """``value`` in the internal unit; ``unit_hint`` set means a bare number string is refused.

    Python numbers are always taken as the internal unit (seconds, bits/s, bytes, metres).
    """
    name = field or kind
    subject = f"{field}: " if field else ""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number or a string like {example!r}, got {value!r}")
    if isinstance(value, int | float):
        try:
            result = float(value)
        except OverflowError:  # an int beyond float range (TOML integers are unbounded)
            text = str(value)
            message = f"{subject}{kind} {text[:12]}... ({len(text)} digits) is out of range"
            raise ConfigError(message) from None
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        unit = match.group(2) if match else None
        if match and unit == "" and unit_hint is not None:
            number = float(match.group(1))
            if number != 0:  # zero is zero in every unit
                digits = match.group(1).lstrip("+")
                raise ConfigError(
                    f"{subject}{kind} {value!r} has no unit (a bare number is ambiguous); "
                    f"write e.g. {digits + unit_hint!r}"
                )
            return 0.0
        if not match or unit not in units:
            known = _RATE_HELP if units is _RATE_UNITS else ", ".join(sorted(u for u in units if u))
            raise ConfigError(
                f"{subject}cannot parse {kind} {value!r}: expected a number with a unit like "
                f"{example!r} (units: {known})"
            )
        result = float(match.group(1)) * units[unit]
    else:
        raise ConfigError(f"{name} must be a number or a string like {example!r}, got {value!r}")
    if math.isnan(result):
        raise ConfigError(f"{name} must be a finite number like {example!r}, got {value!r}")
    if result < 0:
        raise ConfigError(f"{name} must be positive (or zero), got {value!r}; e.g. {example!r}")
    if not math.isfinite(result):
        raise ConfigError(f"{name} must be finite, got {value!r}; e.g. {example!r}")
    return result


def parse_size(value: object, *, field: str | None = None) -> int:
    """Parse a size in bytes: ``"64KiB"`` -> 65536, ``"64K"`` -> 65536, ``"1.5MB"`` -> 1500000.

    A bare number (``4096`` or ``"4096"``) is bytes. Bare prefixes are binary as in
    perftest and iperf3; ``kB``/``MB``/``GB``/``TB`` are decimal. ``field`` names the
    setting in error messages.
    """
    result = _parse(value, _SIZE_UNITS, "size", "64KiB", field)
    if result != int(result):
        raise ConfigError(
            f"{field or 'size'} {value!r} is not a whole number of bytes ({result}); "
            f"e.g. {format_size(math.ceil(result), exact=True)!r}"
        )
    return int(result)


def parse_rate(value: object, *, field: str | None = None) -> float:
    """Parse a rate in bits per second: ``"400Gbit/s"`` -> 4e11, ``"1GB/s"`` -> 8e9.

    ``b`` is bits and ``B`` bytes (``10Gb/s``, ``10Gbit/s`` and ``10 Gbps`` are all 1e10);
    iperf3's ``-b`` forms ``10G``, ``500M``, ``100k`` are bits/s with decimal prefixes.
    A Python number is bits/s; a string needs a unit (``"10"`` is refused: say ``"10Gbit/s"``).
    """
    return _parse(value, _RATE_UNITS, "rate", "400Gbit/s", field, unit_hint="Gbit/s")


def parse_time(value: object, *, field: str | None = None) -> float:
    """Parse a duration in seconds: ``"25ms"`` -> 0.025.

    A Python number is seconds; a string needs a unit (``"25"`` is refused: say ``"25ms"``
    or ``"25s"``). ``"0"`` is accepted: zero is zero in every unit.
    """
    return _parse(value, _TIME_UNITS, "time", "25ms", field, unit_hint="ms")


def parse_seconds(value: object, *, field: str | None = None) -> float:
    """A positive duration where iperf3 and perftest take bare seconds (``--timeout``,
    ``--interval``): ``"2"`` and ``2`` are 2 s, ``"500ms"`` and ``"2s"`` are read as
    :func:`parse_time` reads them. ConfigError for zero, negative or infinite values."""
    name = field or "time"
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        negative = isinstance(value, str) and value.strip().startswith("-")
        seconds = -1.0 if negative else parse_time(value, field=field)
    if not 0 < seconds < math.inf:
        raise ConfigError(f"{name} {value!r}: expected a positive time such as 2, 2s or 500ms")
    return seconds


def parse_distance(value: object, *, field: str | None = None) -> float:
    """Parse a distance in metres: ``"3750km"`` -> 3.75e6.

    A Python number is metres; a string needs a unit (``"3750"`` is refused: ``"3750km"``).
    """
    return _parse(value, _DISTANCE_UNITS, "distance", "3750km", field, unit_hint="km")


def format_size(nbytes: float, *, exact: bool = False) -> str:
    """Human form of a byte count with binary prefixes: 65536 -> ``"64KiB"``.

    The default rounds to two decimals (``48000`` -> ``"46.88KiB"``, for display, which
    :func:`parse_size` refuses as not whole bytes). ``exact=True`` gives a string that
    :func:`parse_size` reads back as exactly ``nbytes``: the largest binary unit that
    divides it, else bytes (``48000`` -> ``"48000B"``); use it in messages and files.
    """
    if exact:
        whole = int(nbytes)
        for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if whole >= scale and whole % scale == 0:
                return f"{whole // scale}{unit}"
        return f"{whole}B"
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
