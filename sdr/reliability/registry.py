"""Reliability schemes by name: the built-ins and the ones users register.

>>> from sdr.reliability import available_schemes
>>> available_schemes()
['ec-mds', 'ec-xor', 'sr-nack', 'sr-rto']

A scheme gets its name in one of two ways (the SDK's one extension idiom, see
:mod:`sdr.registry`): in code with :func:`register_scheme`, or from an installed
distribution through an entry point of the ``sdr.schemes`` group::

    [project.entry-points."sdr.schemes"]
    my-scheme = "my_package.scheme:MyScheme"

Besides these, ``"auto"`` names no scheme of its own: it is resolved to one of them
through the simulator's selector (:mod:`sdr.runtime.auto_scheme`).

This module imports neither the scheme interface nor the config at run time, so the
config can check scheme names while it is being validated (no import circle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from sdr.errors import ConfigError
from sdr.registry import Registry

if TYPE_CHECKING:
    from sdr.reliability.base import Scheme
    from sdr.reliability.config import ReliabilityConfig

__all__ = [
    "AUTO",
    "GROUP",
    "SCHEMES",
    "SchemeFactory",
    "register_scheme",
    "create_scheme",
    "available_schemes",
    "check_scheme_name",
]

AUTO = "auto"
"""The scheme name resolved through the selector (never registered)."""

GROUP = "sdr.schemes"
"""The entry-point group third-party schemes are declared in."""

SchemeFactory: TypeAlias = "Callable[[ReliabilityConfig], Scheme]"
"""Builds a scheme from a resolved config; a Scheme subclass is one."""

SCHEMES: Registry[Callable[..., object]] = Registry("scheme", GROUP, reserved=(AUTO,))
"""Every known scheme: the built-ins (registered by :mod:`sdr.reliability`), the ones
registered in code and the ``sdr.schemes`` entry points (loaded on first use)."""


def register_scheme(name: str, factory: SchemeFactory, *, replace: bool = False) -> None:
    """Make ``factory`` selectable as ``ReliabilityConfig(scheme=name)``.

    Names are case-insensitive; ``"auto"`` is reserved. ConfigError if ``name`` is taken,
    unless ``replace``.
    """
    SCHEMES.register(name, factory, replace=replace)


def create_scheme(config: ReliabilityConfig) -> Scheme:
    """Build the scheme ``config.scheme`` names (config must be resolved: chunk_size set)."""
    if config.scheme not in SCHEMES:
        raise ConfigError(
            f"reliability scheme {config.scheme!r} is not registered; expected one of "
            f"{available_schemes()}"
        )
    return SCHEMES.get(config.scheme)(config)  # type: ignore[return-value]


def available_schemes() -> list[str]:
    """Names of the known schemes (registered in code or as entry points), sorted."""
    return SCHEMES.names()


def check_scheme_name(name: object, *, field: str = "scheme") -> str:
    """``name`` if it is a known scheme or ``"auto"``; else a ConfigError listing them.

    Loading a config checks its scheme here, so ``scheme = "ec-rs"`` fails at load rather
    than when the first QP is built. Register your own schemes before loading configs
    (entry-point schemes are known without registering).
    """
    if isinstance(name, str) and (name.lower() == AUTO or name in SCHEMES):
        return name
    raise ConfigError(
        f"{field} {name!r} is not a known reliability scheme; expected one of "
        f"{[*available_schemes(), AUTO]}, e.g. 'sr-rto'"
    )
