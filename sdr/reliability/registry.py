"""Reliability schemes by name: the built-ins and the ones users register.

>>> from sdr.reliability import available_schemes
>>> available_schemes()
['ec-mds', 'ec-xor', 'sr-nack', 'sr-rto']

Besides these, ``"auto"`` names no scheme of its own: it is resolved to one of them
through the simulator's selector (:mod:`sdr.reliability.auto`).
"""

from __future__ import annotations

from collections.abc import Callable

from sdr.errors import ConfigError
from sdr.reliability.base import Scheme
from sdr.reliability.config import ReliabilityConfig

__all__ = [
    "AUTO",
    "SchemeFactory",
    "register_scheme",
    "create_scheme",
    "available_schemes",
    "check_scheme_name",
]

AUTO = "auto"
"""The scheme name resolved through the selector (never registered)."""

SchemeFactory = Callable[[ReliabilityConfig], Scheme]
"""Builds a scheme from a resolved config; a Scheme subclass is one."""

_REGISTRY: dict[str, SchemeFactory] = {}


def register_scheme(name: str, factory: SchemeFactory, *, replace: bool = False) -> None:
    """Make ``factory`` selectable as ``ReliabilityConfig(scheme=name)``.

    Names are case-insensitive. ConfigError if ``name`` is taken, unless ``replace``.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"scheme name must be a non-empty string, got {name!r}")
    key = name.lower()
    if key == AUTO:
        raise ConfigError(f"scheme name {AUTO!r} is reserved (the selector resolves it)")
    if not key:
        raise ConfigError(f"scheme name must be a non-empty string, got {name!r}")
    if key in _REGISTRY and not replace:
        raise ConfigError(f"scheme {name!r} is already registered; pass replace=True to override")
    _REGISTRY[key] = factory


def create_scheme(config: ReliabilityConfig) -> Scheme:
    """Build the scheme ``config.scheme`` names (config must be resolved: chunk_size set)."""
    try:
        factory = _REGISTRY[config.scheme.lower()]
    except KeyError:
        raise ConfigError(
            f"reliability scheme {config.scheme!r} is not registered; expected one of "
            f"{available_schemes()}"
        ) from None
    return factory(config)


def available_schemes() -> list[str]:
    """Names of the registered schemes, sorted."""
    return sorted(_REGISTRY)


def check_scheme_name(name: object, *, field: str = "scheme") -> str:
    """``name`` if it is a registered scheme or ``"auto"``; else a ConfigError listing them.

    Loading a config checks its scheme here, so ``scheme = "ec-rs"`` fails at load rather
    than when the first QP is built. Register your own schemes before loading configs.
    """
    if isinstance(name, str) and (name.lower() == AUTO or name.lower() in _REGISTRY):
        return name
    raise ConfigError(
        f"{field} {name!r} is not a known reliability scheme; expected one of "
        f"{[*available_schemes(), AUTO]}, e.g. 'sr-rto'"
    )
