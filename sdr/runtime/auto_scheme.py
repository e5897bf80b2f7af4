"""``scheme = "auto"`` wherever a scheme is named: resolved through the simulator's selector.

``ReliableQP(qp, "auto", rtt="25ms", link_rate="10Gbit/s", drop=1e-3)`` builds the QP with
the scheme (and k, m or RTO) that the selector (:func:`sdr.simulator.auto.resolve_auto`)
expects to finish a write fastest on that link. What the selector needs:

- ``rtt``, ``alpha`` and ``link_rate`` from the config (``link_rate`` falls back to the
  QP's ``rate_limit``; one of them is required);
- ``drop``: the expected drop rate, a keyword argument or ``[reliability.params] drop``
  (required: nothing else knows the link's loss);
- ``drop_unit``: ``"packet"`` (default) or ``"chunk"``, what ``drop`` counts;
- ``size_hint``: bytes of a typical write (keyword or ``[reliability.params] size_hint``);
  default: the QP's ``max_message_size``, the largest write it carries;
- the chunk size is the QP's (one bitmap bit per chunk) and the MTU the QP's.

The resolution happens once, when the ReliableQP is built; both ends must resolve the same
inputs to the same scheme (the DIGEST fingerprint catches a mismatch). The selector is
a plug-in (:data:`SELECTORS`, entry-point group ``sdr.scheme_selectors``; the simulator
declares ``simulator``), so neither the core nor this runtime imports the models layer;
``[reliability.params] selector = "mine"`` picks another registered one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sdr.errors import ConfigError
from sdr.registry import Registry
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.registry import AUTO
from sdr.units import parse_size

if TYPE_CHECKING:
    from sdr.config import QPAttr

__all__ = [
    "AUTO",
    "AUTO_OPTIONS",
    "DEFAULT_SELECTOR",
    "check_drop",
    "SELECTORS",
    "is_auto",
    "register_scheme_selector",
    "resolve",
    "resolve_for_qp",
]

SELECTORS: Registry[Callable[..., tuple[ReliabilityConfig, Any]]] = Registry(
    "scheme selector", "sdr.scheme_selectors"
)
"""Who turns ``auto`` into a scheme: ``selector(config, size_bytes=, drop=, mtu=,
drop_unit=) -> (concrete config, details)``. The simulator's is an entry point
(``simulator``), so this runtime module never imports the models layer."""
DEFAULT_SELECTOR = "simulator"


def register_scheme_selector(name: str, selector: Callable[..., Any]) -> None:
    """Make ``selector`` usable as ``[reliability.params] selector = name``."""
    SELECTORS.register(name, selector)


AUTO_OPTIONS = ("drop", "drop_unit", "size_hint")
"""Keyword arguments of ReliableQP only ``auto`` uses (ignored for a named scheme)."""

_DROP_UNITS = ("packet", "chunk")


def is_auto(config: ReliabilityConfig) -> bool:
    """Whether ``config`` names ``auto`` (case-insensitive) rather than a scheme."""
    return config.scheme.lower() == AUTO


def check_drop(value: object) -> float:
    """``value`` as a drop rate in [0, 1), else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"drop must be a probability like 1e-3, got {value!r}")
    drop = float(value)
    if not (math.isfinite(drop) and 0.0 <= drop < 1.0):
        raise ConfigError(f"drop must be in [0, 1), got {value!r}; e.g. 1e-3")
    return drop


def resolve(
    config: ReliabilityConfig,
    *,
    mtu: int,
    drop: float | None = None,
    size_hint: int | str | None = None,
    drop_unit: str = "packet",
) -> ReliabilityConfig:
    """``config`` with ``auto`` replaced by the selector's choice; other configs unchanged.

    ``config`` should carry the QP's chunk size (:meth:`ReliabilityConfig.resolved`), else
    the selector may pick another one. ``drop`` and ``size_hint`` default to the config's
    ``params``; ``size_hint`` has no default here (``resolve_for_qp`` supplies the QP's).
    """
    if not is_auto(config):
        return config
    params: Mapping[str, Any] = config.params
    if drop is None:
        drop = params.get("drop")
    if drop is None:
        raise ConfigError(
            "scheme 'auto' needs the expected drop rate: drop=1e-3 (or [reliability.params] "
            "drop = 1e-3); it picks the scheme for that loss"
        )
    if size_hint is None:
        size_hint = params.get("size_hint")
    if size_hint is None:
        raise ConfigError("scheme 'auto' needs size_hint, bytes of a typical write, e.g. '64MiB'")
    if drop_unit not in _DROP_UNITS:
        raise ConfigError(f"drop_unit must be one of {list(_DROP_UNITS)}, got {drop_unit!r}")
    if not config.link_rate:
        raise ConfigError(
            "scheme 'auto' needs link_rate (the provisioned rate of the link), e.g. '10Gbit/s', "
            "or a QP rate_limit"
        )
    resolve_auto = SELECTORS.get(str(params.get("selector", DEFAULT_SELECTOR)))
    concrete, _ = resolve_auto(
        config.replace(scheme="auto"),
        size_bytes=max(1, parse_size(size_hint, field="size_hint")),
        drop=check_drop(drop),
        mtu=mtu,
        drop_unit=drop_unit,
    )
    return concrete


def resolve_for_qp(
    config: ReliabilityConfig | str | Mapping[str, Any] | None,
    attr: QPAttr,
    overrides: dict[str, Any],
) -> ReliabilityConfig:
    """The concrete config a ReliableQP on a QP with ``attr`` runs.

    ``overrides`` are ReliableQP's keyword arguments: the :data:`AUTO_OPTIONS` are taken
    out for :func:`resolve`, the rest override config fields. The QP's chunk size and rate
    limit fill the config; ``auto`` is resolved with ``size_hint`` defaulting to
    ``attr.max_message_size``.
    """
    fields = dict(overrides)
    options = {name: fields.pop(name) for name in AUTO_OPTIONS if name in fields}
    coerced = ReliabilityConfig.coerce(config, **fields)
    resolved = coerced.resolved(attr.chunk_size, attr.rate_limit)
    if not is_auto(resolved):
        return resolved
    options.setdefault("size_hint", resolved.params.get("size_hint", attr.max_message_size))
    concrete = resolve(resolved, mtu=attr.mtu, **options)
    return concrete.resolved(attr.chunk_size, attr.rate_limit)
