"""The primitive interface every collective backend implements (no I/O here).

- :class:`Bootstrap`: rank, world size and small host-side exchanges (all-gather of bytes,
  barrier) used while setting up.
- :class:`Semaphore`: a counter a peer bumps (``signal``) and this rank waits on.
- :class:`MemoryChannel`: a directed connection to one peer whose registered memory is
  mapped here: ``put``/``get`` copy bytes, ``signal``/``wait`` synchronise,
  ``flush`` waits until prior puts landed, ``put_packets``/``read_packets`` move LL packets
  (data and a flag in one store, so the reader needs no separate signal).
- :class:`MappedChannel`: a memory channel whose peer scratch this process can also read in
  place (host memory); what the host interpreter
  (:mod:`~sdr.backends.collectives.interpreter`) needs of a memory channel.
- :class:`PortChannel`: the same verbs where a proxy moves the data instead of the peer's
  memory being mapped (no ``get``, no LL packets). The SDR transport between datacenters
  implements it (``sdr.backends.hierarchical.SdrPortChannel``); plans name it as channel
  kind ``"port"``.
- :class:`Communicator`: registers memory, exchanges it through the bootstrap and builds
  channels; runs collectives.

Offsets and sizes are in bytes. GPU channels run these verbs inside kernels; their Python
objects expose the same verbs launched from the host, for tests and small tools.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Bootstrap(Protocol):
    """Host-side group membership and small exchanges."""

    rank: int
    world_size: int

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (objects must be picklable)."""
        ...

    def barrier(self) -> None:
        """Return once every rank has called barrier."""
        ...

    def close(self) -> None:
        """Release sockets."""
        ...


@runtime_checkable
class Semaphore(Protocol):
    """A monotonically increasing counter in this rank's registered memory."""

    def signal(self) -> None:
        """(Remote end) make prior writes visible, then increment the counter."""
        ...

    def wait(self, timeout: float | None = None) -> None:
        """(Local end) wait until the counter reaches the next expected value."""
        ...


@runtime_checkable
class MemoryChannel(Protocol):
    """A connection from this rank to ``peer`` whose scratch and packet buffers are mapped."""

    peer: int

    def put(self, dst_offset: int, src: Any, src_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` of local ``src`` into the peer's scratch at ``dst_offset``."""
        ...

    def get(self, dst: Any, dst_offset: int, src_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` of the peer's scratch at ``src_offset`` into local ``dst``."""
        ...

    def signal(self) -> None:
        """Make prior puts visible to the peer, then bump the peer's semaphore for us."""
        ...

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the peer's next signal."""
        ...

    def flush(self) -> None:
        """Return once prior puts have landed in the peer's memory."""
        ...

    def put_packets(
        self, dst_offset: int, src: Any, src_offset: int, nbytes: int, flag: int
    ) -> None:
        """Write ``nbytes`` of ``src`` as LL packets carrying ``flag`` into the peer."""
        ...


@runtime_checkable
class MappedChannel(MemoryChannel, Protocol):
    """A memory channel in host memory: the peer's scratch is also read in place."""

    def read(self, src_offset: int, nbytes: int) -> Any:
        """The peer's scratch bytes ``[src_offset, src_offset + nbytes)``, not copied."""
        ...


@runtime_checkable
class PortChannel(Protocol):
    """A proxy-driven channel (``sdr.backends.hierarchical.SdrPortChannel``: SDR writes)."""

    peer: int

    def put(self, dst_offset: int, src: Any, src_offset: int, nbytes: int) -> None:
        """Queue a write of local ``src`` into the peer's registered memory."""
        ...

    def signal(self) -> None:
        """Queue a semaphore increment ordered after prior puts."""
        ...

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the peer's next signal."""
        ...

    def flush(self) -> None:
        """Wait until the proxy has drained every queued put."""
        ...


@runtime_checkable
class Communicator(Protocol):
    """Collectives over a group of ranks (one process per rank)."""

    rank: int
    world_size: int

    def allreduce(self, x: Any, out: Any = None, *, dtype: str | None = None) -> Any:
        """Elementwise sum of every rank's ``x`` on every rank."""
        ...

    def allgather(self, x: Any, out: Any = None, *, dtype: str | None = None) -> Any:
        """Every rank's ``x`` concatenated in rank order, on every rank."""
        ...

    def reduce_scatter(self, x: Any, out: Any = None, *, dtype: str | None = None) -> Any:
        """Chunk ``rank`` of the elementwise sum of every rank's ``x``."""
        ...

    def broadcast(self, x: Any, root: int = 0, *, dtype: str | None = None) -> Any:
        """``root``'s ``x`` on every rank, in place."""
        ...

    def close(self) -> None:
        """Release registered memory and the bootstrap."""
        ...
