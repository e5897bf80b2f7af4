"""Collective algorithms by name: the library's plans and the ones users register.

An algorithm is a plan generator plus what it computes (:class:`CollectiveAlgorithm`).
Two channel kinds share one registry and one entry-point group, ``sdr.collective_algorithms``:

- ``"memory"`` plans (peers' memory mapped in: shared memory, CUDA IPC) are built as
  ``build(world_size)``, or ``build(world_size, root)`` for a broadcast, and run by the
  shared-memory and GPU communicators (``build_plan``, ``algorithms_for``);
- ``"port"`` plans (SDR reliable writes between datacenters) are built as
  ``build(datacenters, slices)`` and run by the hierarchical communicator
  (``build_port_plan``).

The same name may mean one plan of each kind (``allreduce_ring`` is both), so a port
algorithm's registry key carries its kind: ``port:allreduce_ring``. A third party
declares either kind as an entry point whose object is a :class:`CollectiveAlgorithm`::

    [project.entry-points."sdr.collective_algorithms"]
    allreduce_tree = "my_package.plans:ALLREDUCE_TREE"
    "port:allreduce_tree" = "my_package.plans:PORT_ALLREDUCE_TREE"

or calls :func:`register_algorithm` in code. Names are case-insensitive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sdr.collectives.plan import CHANNEL_KINDS, COLLECTIVES, Plan
from sdr.errors import ConfigError
from sdr.registry import Registry

__all__ = [
    "ALGORITHM_REGISTRY",
    "GROUP",
    "AlgorithmView",
    "CollectiveAlgorithm",
    "algorithm_key",
    "available_algorithms",
    "get_algorithm",
    "register_algorithm",
]

log = logging.getLogger(__name__)

GROUP = "sdr.collective_algorithms"
"""The entry-point group third-party algorithms are declared in."""

_PORT = "port:"


@dataclass(frozen=True)
class CollectiveAlgorithm:
    """A plan generator: which collective it computes and over which kind of channel.

    ``build`` is ``build(world_size)`` (``build(world_size, root)`` for a broadcast) for
    ``channel="memory"``, and ``build(datacenters, slices)`` for ``channel="port"``.
    """

    collective: str
    build: Callable[..., Plan]
    channel: str = "memory"

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise ConfigError(f"collective {self.collective!r}; expected one of {COLLECTIVES}")
        if self.channel not in CHANNEL_KINDS:
            raise ConfigError(f"channel kind {self.channel!r}; expected one of {CHANNEL_KINDS}")
        if not callable(self.build):
            raise ConfigError(f"build must be a plan generator, got {self.build!r}")


def algorithm_key(name: str, channel: str = "memory") -> str:
    """The registry key of algorithm ``name`` of ``channel`` kind (``port:`` for ports)."""
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise ConfigError(f"algorithm name must be a non-empty string without ':', got {name!r}")
    if channel not in CHANNEL_KINDS:
        raise ConfigError(f"channel kind {channel!r}; expected one of {CHANNEL_KINDS}")
    return _PORT + name if channel == "port" else name


def _check(key: str, item: object) -> CollectiveAlgorithm:
    if not isinstance(item, CollectiveAlgorithm):
        raise ConfigError(
            f"collective algorithm {key!r}: expected a CollectiveAlgorithm, got {item!r}"
        )
    expected = "port" if key.startswith(_PORT) else "memory"
    if item.channel != expected:
        raise ConfigError(
            f"collective algorithm {key!r} has channel kind {item.channel!r}; its name says "
            f"{expected!r} (port algorithms are named 'port:<name>')"
        )
    return item


ALGORITHM_REGISTRY: Registry[CollectiveAlgorithm] = Registry(
    "collective algorithm", GROUP, check=_check
)
"""Every known algorithm of both channel kinds, keyed by :func:`algorithm_key`."""


def register_algorithm(
    name: str,
    build: Callable[..., Plan],
    *,
    collective: str,
    channel: str = "memory",
    replace: bool = False,
) -> None:
    """Make the plan generator ``build`` of ``collective`` available as ``name``.

    ``channel="memory"``: ``build_plan(name, world_size, root)`` and the communicators'
    ``algorithm=name`` find it; ``channel="port"``: ``build_port_plan(name, ...)`` does.
    ConfigError if ``name`` is taken for that channel kind, unless ``replace``.
    """
    key = algorithm_key(name, channel)
    ALGORITHM_REGISTRY.register(
        key, CollectiveAlgorithm(collective, build, channel), replace=replace
    )


def get_algorithm(name: str, channel: str = "memory") -> CollectiveAlgorithm:
    """The algorithm registered as ``name`` for ``channel``; ConfigError listing the known."""
    key = algorithm_key(name, channel) if isinstance(name, str) and ":" not in name else None
    if key is None or key not in ALGORITHM_REGISTRY:
        what = "unknown port algorithm" if channel == "port" else "unknown algorithm"
        raise ConfigError(f"{what} {name!r}; expected one of {available_algorithms(channel)}")
    return ALGORITHM_REGISTRY.get(key)


def available_algorithms(channel: str = "memory", collective: str | None = None) -> list[str]:
    """Names of the ``channel`` algorithms (of ``collective``, if given), sorted.

    Filtering by collective loads entry points; one that fails to load is logged and left
    out (asking for it by name raises the error).
    """
    if channel not in CHANNEL_KINDS:
        raise ConfigError(f"channel kind {channel!r}; expected one of {CHANNEL_KINDS}")
    names = []
    for key in ALGORITHM_REGISTRY.names():
        is_port = key.startswith(_PORT)
        if is_port != (channel == "port"):
            continue
        name = key[len(_PORT) :] if is_port else key
        if collective is not None:
            try:
                if ALGORITHM_REGISTRY.get(key).collective != collective:
                    continue
            except ConfigError as exc:
                log.warning("skipping collective algorithm %r: %s", key, exc)
                continue
        names.append(name)
    return names


V = TypeVar("V")


class AlgorithmView(Mapping[str, V], Generic[V]):
    """A read-only, live mapping of one channel kind's algorithms: name -> ``value(algo)``.

    Kept for code that reads the old dictionaries (``ALGORITHMS``, ``PORT_ALGORITHMS``);
    register through :func:`register_algorithm` or an entry point.
    """

    def __init__(self, channel: str, value: Callable[[CollectiveAlgorithm], V]) -> None:
        self._channel = channel
        self._value = value

    def __getitem__(self, name: str) -> V:
        if name not in self:
            raise KeyError(name)
        return self._value(get_algorithm(name, self._channel))

    def __contains__(self, name: Any) -> bool:
        return (
            isinstance(name, str)
            and ":" not in name
            and bool(name.strip())
            and algorithm_key(name, self._channel) in ALGORITHM_REGISTRY
        )

    def __iter__(self) -> Iterator[str]:
        return iter(available_algorithms(self._channel))

    def __len__(self) -> int:
        return len(available_algorithms(self._channel))

    def __repr__(self) -> str:
        return f"AlgorithmView({self._channel!r}, {available_algorithms(self._channel)})"
