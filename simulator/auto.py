"""``scheme = "auto"``: turn a reliability config into a concrete one through the selector.

The SDK's core cannot import the simulator (layer rule), so whoever builds a reliable QP
from config (the ``sdr`` command, applications) calls :func:`resolve_auto` first:

    config = load("sdr.toml")                            # scheme = "auto"
    config, why = resolve_auto(config, size_bytes=64 << 20, drop=1e-3, mtu=8192)
    rqp = ReliableQP(qp, config)                          # e.g. ec-mds, k=32, m=8

The link is described by the config itself: ``rtt``, ``alpha`` and ``link_rate``; the
expected drop rate and its unit come from the caller (the user knows the link, or an
estimator measures it).
"""

from __future__ import annotations

from sdr.errors import ConfigError
from sdr.reliability.config import ReliabilityConfig
from sdr.simulator.link import DropUnit, Link
from sdr.simulator.select import Objective, Selection, select_scheme

__all__ = ["resolve_auto", "AUTO"]

AUTO = "auto"


def resolve_auto(
    config: ReliabilityConfig,
    *,
    size_bytes: int,
    drop: float,
    mtu: int,
    drop_unit: DropUnit = "packet",
    objective: Objective = "mean",
    chunk_sizes: tuple[int, ...] | None = None,
) -> tuple[ReliabilityConfig, Selection | None]:  # noqa: E501
    """The config with ``auto`` replaced by the best scheme for this link and size.

    Returns the concrete config and the selection (None when the scheme was not auto).
    ``chunk_sizes`` limits the chunk sizes tried (default: the config's chunk_size if
    set, else the selector's candidates).
    """
    if config.scheme != AUTO:
        return config, None
    if not config.link_rate:
        raise ConfigError("scheme 'auto' needs link_rate (the provisioned rate of the link)")
    chunk = int(config.chunk_size) if config.chunk_size else 65536
    if chunk_sizes is None and config.chunk_size:
        chunk_sizes = (chunk,)
    link = Link(
        rate=float(config.link_rate),
        rtt=float(config.rtt),
        mtu=mtu,
        chunk_size=chunk,
        alpha=config.alpha,
    )
    selection = select_scheme(
        link, size_bytes, drop, drop_unit=drop_unit, objective=objective, chunk_sizes=chunk_sizes
    )
    params = selection.params
    changes: dict[str, object] = {"scheme": selection.scheme, "chunk_size": params["chunk_size"]}
    if "k" in params:
        changes.update(k=params["k"], m=params["m"])
    if selection.scheme == "sr-rto":
        changes["alpha"] = max(0.0, float(params["rto_rtts"]) - 1.0)
    return config.replace(**changes), selection
