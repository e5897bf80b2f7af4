"""Congestion controllers by name: the built-ins and the ones users register.

The SDK's one extension idiom (:mod:`sdr.registry`): in code with
:func:`register_controller`, or from an installed distribution through an entry point of
the ``sdr.congestion`` group::

    [project.entry-points."sdr.congestion"]
    my-cc = "my_package.cc:MyController"

A factory is called as ``factory(rate, max_rate=..., mtu=..., **params)`` and returns a
:class:`~sdr.congestion.base.CongestionController`; a subclass is one.

``"auto"`` names no controller of its own; :func:`resolve_auto` maps it:

- no rate configured (the sender does not know the link): ``bbr``, which needs none;
- otherwise ``delay``: it starts at the configured rate (no slow start on an idle link),
  ignores random loss, yields to other SDR flows, and holds its own against a
  buffer-filling TCP flow through its competing mode (docs/congestion.md).

``fixed`` is never chosen by ``auto``: pick it for a link SDR owns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sdr.congestion.base import CongestionController
from sdr.errors import ConfigError
from sdr.registry import Registry
from sdr.units import parse_rate

__all__ = [
    "AUTO",
    "CONTROLLERS",
    "GROUP",
    "available_controllers",
    "check_congestion_name",
    "controller_for",
    "register_controller",
    "resolve_auto",
]

AUTO = "auto"
GROUP = "sdr.congestion"

CONTROLLERS: Registry[Callable[..., CongestionController]] = Registry(
    "congestion controller", GROUP, reserved=(AUTO,)
)
"""Every known controller: the built-ins (registered by :mod:`sdr.congestion`), the ones
registered in code and the ``sdr.congestion`` entry points (loaded on first use)."""


def register_controller(
    name: str, factory: Callable[..., CongestionController], *, replace: bool = False
) -> None:
    """Make ``factory`` selectable as ``congestion = name``; ``"auto"`` is reserved."""
    CONTROLLERS.register(name, factory, replace=replace)


def available_controllers() -> list[str]:
    """Names of the known controllers, sorted (``auto`` not included)."""
    return CONTROLLERS.names()


def check_congestion_name(name: object, *, field: str = "congestion") -> str:
    """``name`` if it is a known controller or ``"auto"``; else a one-line ConfigError.

    For a config loader: ``congestion = "vegas"`` fails at load, listing the known names.
    """
    if isinstance(name, str) and (name.lower() == AUTO or name in CONTROLLERS):
        return name.lower()
    raise ConfigError(
        f"{field} {name!r} is not a known congestion controller; expected one of "
        f"{[*available_controllers(), AUTO]}, e.g. 'delay'"
    )


def resolve_auto(rate: float | None) -> str:
    """The controller ``"auto"`` stands for, given the configured rate (bits/s or None)."""
    return "bbr" if rate is None else "delay"


def controller_for(
    name: str,
    rate: float | str | None,
    *,
    max_rate: float | str | None = None,
    mtu: int = 4096,
    **params: Any,
) -> CongestionController:
    """Build the controller ``name`` (``auto`` resolved) for a sender paced at ``rate``.

    rate: the configured rate (bits/s or ``"1Gbit/s"``); None only for ``auto``/``bbr``
        (then ``max_rate`` must be given: BBR starts from it).
    max_rate: the ceiling (default ``rate``). ``params`` go to the controller; an unknown
        one is a ConfigError naming it.
    """
    key = check_congestion_name(name)
    rate_bps = None if rate is None else parse_rate(rate, field="rate")
    ceiling = None if max_rate is None else parse_rate(max_rate, field="max_rate")
    if key == AUTO:
        key = resolve_auto(rate_bps)
    if rate_bps is None:
        if ceiling is None:
            raise ConfigError(f"congestion {name!r} needs a rate or a max_rate, got neither")
        rate_bps = ceiling
    factory = CONTROLLERS.get(key)
    try:
        controller = factory(rate_bps, max_rate=ceiling, mtu=mtu, **params)
    except TypeError as exc:  # an unknown or missing parameter: name it, not a traceback
        raise ConfigError(f"congestion controller {key!r}: {exc}") from None
    if not isinstance(controller, CongestionController):
        raise ConfigError(
            f"congestion controller {key!r} built {controller!r}, not a CongestionController"
        )
    return controller
