"""Hierarchical collectives across datacenters: memory channels inside, SDR between.

- :class:`SdrPortChannel`: the collective layer's PortChannel over SDR reliable writes;
- :class:`PortExecutor`: runs port plans (:mod:`sdr.collectives.port_plans`);
- :class:`SdrLinks`: one UDP SDR context per rank, a reliable QP per peer datacenter;
- :class:`HierarchicalCommunicator`: allreduce / allgather / reduce-scatter composed of
  an intra-datacenter communicator and the WAN plans;
- :func:`connect`: set one up in each process; ``sdr.backends.hierarchical.ddp_hook`` plugs it
  into PyTorch DDP (imported on demand: it needs torch).
"""

from sdr.backends.hierarchical.communicator import HierarchicalCommunicator, Topology
from sdr.backends.hierarchical.launch import connect, connect_from_env
from sdr.backends.hierarchical.links import SdrLinkOptions, SdrLinks
from sdr.backends.hierarchical.port_channel import SdrPortChannel
from sdr.backends.hierarchical.port_executor import PortExecutor

__all__ = [
    "HierarchicalCommunicator",
    "PortExecutor",
    "SdrLinkOptions",
    "SdrLinks",
    "SdrPortChannel",
    "Topology",
    "connect",
    "connect_from_env",
]
