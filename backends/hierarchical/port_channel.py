"""The SDR port channel: a collective PortChannel whose puts are SDR reliable writes.

The collective layer's :class:`~sdr.backends.collectives.interfaces.PortChannel` seam, implemented
over one :class:`~sdr.ReliableQP` per peer. SDR matches writes to receives by
order (the n-th write lands in the n-th posted receive), so the receiving side does not
learn offsets from the wire: at the start of every call the executor reads the *peer's*
op list from the plan (every rank holds the whole plan) and posts one receive into its
own scratch for each put the peer will make, in the peer's order. A ``signal`` then needs
no message of its own: the receiver knows which writes precede the peer's k-th signal,
and its k-th ``wait`` returns once exactly those receives are verified complete.

Flow control comes for free: the peer's writes of call n+1 cannot land before this rank
posted the receives of call n+1 (SDR's clear-to-send), which it does only after it has
finished reading call n's scratch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from sdr.errors import ConfigError, SDRError
from sdr.runtime import ReceiveHandle, ReliableQP, WriteHandle
from sdr.transport import MemoryRegion

__all__ = ["SdrPortChannel"]

log = logging.getLogger(__name__)

#: ``drive(condition, timeout, what)``: progress every QP of this rank until condition().
Driver = Callable[[Callable[[], bool], float, str], None]


class SdrPortChannel:
    """This rank's port channel to ``peer`` (another datacenter) over ``rqp``.

    ``drive`` progresses all reliable QPs of this rank (they share one SDR context), so
    waiting on one peer keeps the other directions moving (a ring sends and receives at
    once). ``timeout`` bounds every wait, in seconds.
    """

    def __init__(self, peer: int, rqp: ReliableQP, drive: Driver, timeout: float = 60.0) -> None:
        self.peer = peer
        self.rqp = rqp
        self.timeout = timeout
        self._drive = drive
        self._recvs: list[ReceiveHandle] = []
        self._bounds: list[int] = []
        self._waits = 0
        self._writes: list[WriteHandle] = []
        self.bytes_sent = 0
        self.bytes_received = 0

    # --- receiving side ----------------------------------------------------------------
    def begin_call(self, mr: MemoryRegion, puts: list[tuple[int, int]], bounds: list[int]) -> None:
        """Post one receive per ``(scratch offset, nbytes)`` the peer will put this call.

        ``bounds[k]`` is how many of those puts precede the peer's (k+1)-th signal to us.
        """
        if self._waits != len(self._bounds):
            raise ConfigError(
                f"port channel to {self.peer}: previous call waited {self._waits} of "
                f"{len(self._bounds)} signals"
            )
        self._recvs = [self.rqp.post_recv(mr, off, n) for off, n in puts]
        self._bounds = bounds
        self._waits = 0
        self.bytes_received += sum(n for _, n in puts)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the peer's next signal: the receives it covers are verified complete."""
        if self._waits >= len(self._bounds):
            raise ConfigError(f"port channel to {self.peer}: wait without a matching signal")
        need = self._recvs[: self._bounds[self._waits]]
        self._waits += 1
        self._drive(
            lambda: all(h.finished for h in need),
            self.timeout if timeout is None else timeout,
            f"signal #{self._waits} from datacenter peer {self.peer}",
        )
        for h in need:
            h._check()  # raises MessageFailed / ProtocolError of a failed receive

    # --- sending side ------------------------------------------------------------------
    def put(self, dst_offset: int, src: np.ndarray, src_offset: int, nbytes: int) -> None:
        """Reliably write ``src[src_offset:src_offset+nbytes]`` into the peer's scratch.

        The bytes are staged (copied) first, so the caller may reuse ``src`` at once;
        ``dst_offset`` is where the peer posted the matching receive (order-matched).
        """
        self._prune()
        staged = np.array(src[src_offset : src_offset + nbytes], dtype=np.uint8, copy=True)
        mr = self.rqp.ctx.register(staged)
        self._writes.append(self.rqp.write(mr, 0, nbytes))
        self.bytes_sent += nbytes
        log.debug("put %d B -> peer %d scratch+%d", nbytes, self.peer, dst_offset)

    def signal(self) -> None:
        """Nothing to send: the peer derives our signals from the plan (module docs)."""

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every write to the peer is acknowledged (verified by the peer)."""
        pending = list(self._writes)
        self._drive(
            lambda: all(h.finished for h in pending),
            self.timeout if timeout is None else timeout,
            f"writes to datacenter peer {self.peer}",
        )
        self._prune()

    def _prune(self) -> None:
        """Forget finished writes; raise the error of a failed one."""
        left = []
        for h in self._writes:
            if h.finished:
                try:
                    h._check()
                except SDRError:
                    log.error("write to datacenter peer %d failed", self.peer)
                    raise
            else:
                left.append(h)
        self._writes = left

    @property
    def pending_writes(self) -> int:
        """Writes not acknowledged yet."""
        return sum(not h.finished for h in self._writes)
