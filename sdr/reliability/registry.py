"""Reliability schemes by name: the built-ins and the ones users register.

>>> from sdr.reliability import available_schemes
>>> available_schemes()
['ec-mds', 'ec-xor', 'sr-nack', 'sr-rto']
"""

from __future__ import annotations

from collections.abc import Callable

from sdr.errors import ConfigError
from sdr.reliability.base import Scheme
from sdr.reliability.config import ReliabilityConfig

__all__ = ["SchemeFactory", "register_scheme", "create_scheme", "available_schemes"]

SchemeFactory = Callable[[ReliabilityConfig], Scheme]
"""Builds a scheme from a resolved config; a Scheme subclass is one."""

_REGISTRY: dict[str, SchemeFactory] = {}


def register_scheme(name: str, factory: SchemeFactory, *, replace: bool = False) -> None:
    """Make ``factory`` selectable as ``ReliabilityConfig(scheme=name)``.

    Names are case-insensitive. ConfigError if ``name`` is taken, unless ``replace``.
    """
    key = name.lower()
    if not key or not isinstance(name, str):
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
