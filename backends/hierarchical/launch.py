"""Setting up a hierarchical communicator in each process of a job.

    comm = connect(rank, world, local_size=2, master="10.200.0.1", port=29600,
                   host="10.200.0.2", options=SdrLinkOptions(scheme="auto", rtt="25ms"))

- ``master:port``: a TCP bootstrap for the whole job (rank 0 listens there; used only to
  exchange SDR QP information and at close);
- ``port + 1 + datacenter``: each datacenter's own bootstrap on loopback (so several
  emulated datacenters can share one host);
- ``host``: the address of this rank's datacenter that other datacenters reach (the SDR
  UDP socket binds to it).

:func:`connect_from_env` reads the same from environment variables, for programs started
by a launcher (``torchrun`` sets RANK and WORLD_SIZE; see docs/training.md).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from sdr.backends.hierarchical.communicator import HierarchicalCommunicator, Topology
from sdr.backends.hierarchical.links import SdrLinkOptions, SdrLinks
from sdr.backends.shm import ShmCommunicator, TcpBootstrap
from sdr.errors import ConfigError

if TYPE_CHECKING:  # imported at run time only for a GPU rank (it needs CuPy then)
    from sdr.backends.gpu.communicator import GpuCommunicator

__all__ = ["connect", "connect_from_env"]

log = logging.getLogger(__name__)


def connect(
    rank: int,
    world_size: int,
    local_size: int,
    *,
    master: str = "127.0.0.1",
    port: int = 29600,
    host: str = "127.0.0.1",
    options: SdrLinkOptions | None = None,
    algorithm: str = "ring",
    slices: int = 4,
    timeout: float = 120.0,
    device: int | None = None,
) -> HierarchicalCommunicator:
    """This rank's :class:`HierarchicalCommunicator` (collective: every rank calls it).

    ``device``: a CUDA device for this rank; its datacenter then uses the GPU communicator
    (CUDA IPC memory channels) inside, and allreduce takes CuPy arrays.
    """
    if local_size < 1 or world_size % local_size:
        raise ConfigError(f"world_size {world_size} is not a multiple of local_size {local_size}")
    topo = Topology(world_size // local_size, local_size, rank)
    world = TcpBootstrap(rank, world_size, port, host=master, timeout=timeout)
    intra: ShmCommunicator | GpuCommunicator | None = None
    try:
        if local_size > 1:
            boot = TcpBootstrap(
                topo.local_rank, local_size, port + 1 + topo.datacenter, timeout=timeout
            )
            if device is None:
                intra = ShmCommunicator(boot, timeout=timeout)
            else:
                from sdr.backends.gpu.communicator import GpuCommunicator  # noqa: PLC0415

                intra = GpuCommunicator(boot, device=device)
        shared = (options or SdrLinkOptions()).replace(sharers=local_size)  # one link, L ranks
        links = SdrLinks(world, topo.wan_peers(), host, shared)
    except BaseException:
        if intra is not None:
            intra.close()
        world.close()
        raise
    comm = HierarchicalCommunicator(
        topo, intra, links, algorithm=algorithm, slices=slices, bootstrap=world
    )
    log.info(
        "rank %d: datacenter %d local %d, WAN scheme %s",
        rank,
        topo.datacenter,
        topo.local_rank,
        links.scheme,
    )
    return comm


def connect_from_env(options: SdrLinkOptions | None = None) -> HierarchicalCommunicator:
    """:func:`connect` from RANK, WORLD_SIZE, SDR_LOCAL_SIZE, SDR_MASTER (or MASTER_ADDR),
    SDR_PORT, SDR_HOST, SDR_SCHEME, SDR_RTT, SDR_RATE, SDR_LOSS and SDR_SLICES."""
    env = os.environ
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("SDR_LOCAL_SIZE", env.get("LOCAL_WORLD_SIZE", "1")))
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"RANK, WORLD_SIZE and SDR_LOCAL_SIZE must be integers: {exc}") from exc
    opts = options or SdrLinkOptions()
    changes = {
        key: env[var]
        for key, var in (("scheme", "SDR_SCHEME"), ("rtt", "SDR_RTT"), ("rate", "SDR_RATE"))
        if var in env
    }
    if "SDR_LOSS" in env:
        changes["loss"] = float(env["SDR_LOSS"])  # type: ignore[assignment]
    return connect(
        rank,
        world,
        local,
        master=env.get("SDR_MASTER", env.get("MASTER_ADDR", "127.0.0.1")),
        port=int(env.get("SDR_PORT", "29600")),
        host=env.get("SDR_HOST", "127.0.0.1"),
        options=opts.replace(**changes),
        slices=int(env.get("SDR_SLICES", "4")),
    )
