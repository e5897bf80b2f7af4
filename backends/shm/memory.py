"""CPU primitives: registered shared memory, semaphores and memory channels.

Each rank owns one shared-memory segment laid out as::

    [ semaphores: world_size x uint64 | scratch half 0 | scratch half 1 | packets 0 | packets 1 ]

Semaphore ``s`` of rank ``b`` counts signals from rank ``s`` (only ``s`` writes it, so a
plain store of the sender's running count is enough). Scratch and packets are double
buffered by call parity. LL packets are four uint32 words ``(data0, flag, data1, flag)``;
a writer stores the data words before the flags, a reader checks the flags before reading
data (x86 keeps stores, and loads, in program order).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from sdr.backends.collectives.layout import PACKET_DATA, packet_bytes
from sdr.errors import TimeoutError

log = logging.getLogger(__name__)

_SPIN = 200  # polls with sleep(0) before backing off to short sleeps


Check = Callable[[], None]
"""Called while a wait backs off; raises to end the wait early (a peer is gone, say)."""


def spin_until(cond, what: str, timeout: float, check: Check | None = None) -> None:  # noqa: ANN001 - a zero-arg predicate
    """Poll ``cond()`` until true; yields the core, then sleeps a little; raises on timeout,
    or whatever ``check()`` raises (asked between the short sleeps)."""
    deadline = None
    i = 0
    while not cond():
        i += 1
        if i < _SPIN:
            time.sleep(0)
            continue
        if check is not None:
            check()
        now = time.monotonic()
        if deadline is None:
            deadline = now + timeout
        elif now > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(2e-5)


class Region:
    """One rank's registered segment (see module docs); ``create`` makes it, else attaches."""

    def __init__(
        self, name: str, world_size: int, scratch: int, packets: int, create: bool
    ) -> None:
        self.name = name
        self.world_size = world_size
        self.scratch_cap = scratch
        self.packets_cap = packets
        self._sem_bytes = -(-world_size * 8 // 64) * 64
        size = self._sem_bytes + 2 * scratch + 2 * packets
        self.shm = shared_memory.SharedMemory(name=name, create=create, size=max(size, 64))
        if not create:
            # Python < 3.13 tracks attached segments too and would unlink them at exit. The
            # tracker keys on the private _name (with its leading slash), which typeshed omits.
            with contextlib.suppress(Exception):
                resource_tracker.unregister(self.shm._name, "shared_memory")  # type: ignore[attr-defined]  # noqa: SLF001
        self.owner = create
        self.buf = np.ndarray((self.shm.size,), np.uint8, self.shm.buf)
        if create:
            self.buf[:] = 0
        self.sems = self.buf[: world_size * 8].view(np.uint64)

    def scratch(self, parity: int) -> np.ndarray:
        """The scratch half used by calls of this parity (bytes)."""
        start = self._sem_bytes + parity * self.scratch_cap
        return self.buf[start : start + self.scratch_cap]

    def packets(self, parity: int) -> np.ndarray:
        """The packet half used by calls of this parity (bytes)."""
        start = self._sem_bytes + 2 * self.scratch_cap + parity * self.packets_cap
        return self.buf[start : start + self.packets_cap]

    def unlink(self) -> None:
        """Remove the segment's name (the creating rank, once every rank has mapped it):
        the memory lives on while anyone maps it, and a rank that dies, even by SIGKILL,
        leaves nothing behind in /dev/shm."""
        if self.owner:
            self.owner = False
            self.shm.unlink()

    def close(self) -> None:
        """Detach; the creating rank also unlinks the segment if it has not yet."""
        self.buf = self.sems = None  # type: ignore[assignment]
        self.shm.close()
        self.unlink()


def write_packets(dst: np.ndarray, src: np.ndarray, flag: int) -> None:
    """Write bytes ``src`` as LL packets carrying ``flag`` into packet bytes ``dst``."""
    n = src.size
    npk = -(-n // PACKET_DATA)
    words = np.zeros(npk * 2, np.uint32)
    words.view(np.uint8)[:n] = src
    pk = dst[: npk * 16].view(np.uint32).reshape(npk, 4)
    pk[:, 0] = words[0::2]
    pk[:, 2] = words[1::2]
    pk[:, 1] = flag
    pk[:, 3] = flag


def read_packets(
    src: np.ndarray, nbytes: int, flag: int, timeout: float, check: Check | None = None
) -> np.ndarray:
    """Wait until every packet carrying ``nbytes`` has ``flag``, then return the data bytes
    (``check``: see :func:`spin_until`)."""
    npk = -(-nbytes // PACKET_DATA)
    pk = src[: packet_bytes(nbytes)].view(np.uint32).reshape(npk, 4)
    f = np.uint32(flag)
    spin_until(
        lambda: bool((pk[:, 1] == f).all() and (pk[:, 3] == f).all()),
        f"{npk} LL packets with flag {flag}",
        timeout,
        check,
    )
    words = np.empty(npk * 2, np.uint32)
    words[0::2] = pk[:, 0]
    words[1::2] = pk[:, 2]
    return words.view(np.uint8)[:nbytes]


class ShmMemoryChannel:
    """This rank's connection to ``peer``: the peer's region is mapped here (``check``:
    asked while a wait backs off, see :func:`spin_until`)."""

    def __init__(
        self,
        rank: int,
        peer: int,
        local: Region,
        remote: Region,
        timeout: float,
        check: Check | None = None,
    ):
        self.rank = rank
        self.peer = peer
        self.local = local
        self.remote = remote
        self.timeout = timeout
        self.check = check
        self.parity = 0
        self._sent = 0
        self._expected = 0

    def put(self, dst_offset: int, src: np.ndarray, src_offset: int, nbytes: int) -> None:
        """Copy local bytes into the peer's scratch (current parity)."""
        dst = self.remote.scratch(self.parity)
        dst[dst_offset : dst_offset + nbytes] = src[src_offset : src_offset + nbytes]

    def get(self, dst: np.ndarray, dst_offset: int, src_offset: int, nbytes: int) -> None:
        """Copy the peer's scratch bytes into local ``dst``."""
        src = self.remote.scratch(self.parity)
        dst[dst_offset : dst_offset + nbytes] = src[src_offset : src_offset + nbytes]

    def read(self, src_offset: int, nbytes: int) -> np.ndarray:
        """The peer's scratch bytes (current parity), in place: a reduce reads them."""
        return self.remote.scratch(self.parity)[src_offset : src_offset + nbytes]

    def put_packets(
        self, dst_offset: int, src: np.ndarray, src_offset: int, nbytes: int, flag: int
    ) -> None:
        """Write local bytes as LL packets into the peer's packet buffer (current parity)."""
        dst = self.remote.packets(self.parity)[dst_offset:]
        write_packets(dst, src[src_offset : src_offset + nbytes], flag)

    def signal(self) -> None:
        """Bump the peer's semaphore for this rank (stores before it are already visible)."""
        self._sent += 1
        self.remote.sems[self.rank] = self._sent

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the peer's next signal."""
        self._expected += 1
        sems, me, target = self.local.sems, self.peer, self._expected
        spin_until(
            lambda: int(sems[me]) >= target,
            f"signal #{target} from rank {self.peer}",
            self.timeout if timeout is None else timeout,
            self.check,
        )

    def flush(self) -> None:
        """Puts are synchronous stores here: nothing to drain."""
