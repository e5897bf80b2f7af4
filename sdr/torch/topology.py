"""Which ranks share a datacenter, from the environment of a launched job.

- ``SDR_DATACENTERS``: the datacenter of every rank, comma-separated, in rank order
  (``"0,0,1,1"``); any labels work, each datacenter needs the same number of ranks;
- else ``SDR_LOCAL_SIZE`` ranks per datacenter, numbered datacenter by datacenter;
- else ``LOCAL_WORLD_SIZE`` (torchrun: one launcher per datacenter);
- else every rank is its own datacenter.

The hierarchical communicator numbers ranks datacenter by datacenter; :class:`RankMap`
translates between that order and the job's ranks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from sdr.backends.hierarchical import Topology
from sdr.errors import ConfigError

__all__ = ["RankMap", "rank_map_from_env"]


@dataclass(frozen=True)
class RankMap:
    """``order[i]``: the job rank at position ``i`` of the datacenter-by-datacenter order."""

    order: tuple[int, ...]
    local_size: int

    @property
    def world_size(self) -> int:
        """Ranks of the job."""
        return len(self.order)

    def position(self, rank: int) -> int:
        """Position of job rank ``rank`` in datacenter order."""
        return self.order.index(rank)

    def topology(self, rank: int) -> Topology:
        """The hierarchical topology seen by job rank ``rank``."""
        return Topology(self.world_size // self.local_size, self.local_size, self.position(rank))

    def datacenter(self, rank: int) -> int:
        """Datacenter index of job rank ``rank``."""
        return self.position(rank) // self.local_size


def _from_labels(labels: list[str], world_size: int) -> RankMap:
    if len(labels) != world_size:
        raise ConfigError(
            f"SDR_DATACENTERS names {len(labels)} ranks; expected WORLD_SIZE = {world_size}"
        )
    groups: dict[str, list[int]] = {}
    for rank, label in enumerate(labels):
        groups.setdefault(label, []).append(rank)
    sizes = {len(g) for g in groups.values()}
    if len(sizes) != 1:
        counts = {k: len(v) for k, v in groups.items()}
        raise ConfigError(f"SDR_DATACENTERS {counts}; every datacenter needs as many ranks")
    order = tuple(r for g in groups.values() for r in g)
    return RankMap(order, sizes.pop())


def rank_map_from_env(world_size: int, env: Mapping[str, str] | None = None) -> RankMap:
    """The job's datacenters from ``env`` (default ``os.environ``; see module docs)."""
    env = os.environ if env is None else env
    if env.get("SDR_DATACENTERS"):
        labels = [s.strip() for s in env["SDR_DATACENTERS"].split(",")]
        return _from_labels(labels, world_size)
    var = "SDR_LOCAL_SIZE" if "SDR_LOCAL_SIZE" in env else "LOCAL_WORLD_SIZE"
    raw = env.get(var, "1")
    try:
        local = int(raw)
    except ValueError:
        raise ConfigError(f"{var}={raw!r}; expected an integer") from None
    if local < 1 or world_size % local:
        raise ConfigError(f"{var}={local} does not divide WORLD_SIZE = {world_size}")
    return RankMap(tuple(range(world_size)), local)
