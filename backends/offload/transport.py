"""Backend ``offload``: per-packet receive work in worker processes (DPA-style).

Each channel of a QP has a packet source (a UDP socket by default) polled by one worker
process. The worker validates packets against the QP's shared key table, writes payload
straight into shared-memory registered buffers and appends completion records to the
channel's ring; the application only reads rings (``poll_completions``) and chunk
state. With ``progress="cpu"`` the same engine runs inline in the application.

Receive buffers must live in shared memory, so allocate them here::

    t = OffloadTransport(workers=4)
    ctx = sdr.Context(backend=t)
    buf = t.alloc(64 << 20)          # NumPy uint8 array backed by shared memory
    mr = ctx.register(buf)           # zero copy: workers write into buf

Any buffer may be registered for sending (the application sends). With
``progress="offload"``, binding a receive to a buffer not from :meth:`alloc` raises
ConfigError; ``progress="cpu"`` accepts any buffer.
"""

from __future__ import annotations

import itertools
import select
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from sdr.backends.offload.pool import WorkerPool
from sdr.backends.offload.qp import OffloadQP
from sdr.backends.offload.shared_state import Segment
from sdr.config import QPAttr
from sdr.errors import ConfigError, TransportError
from sdr.transport import MemoryRegion, Transport, as_byte_view

__all__ = ["OffloadTransport", "OffloadQP", "PROGRESS_MODES"]

PROGRESS_MODES = ("offload", "cpu")
WIRES = ("simple", "roce")
_WAIT_CAP_S = 0.0005
_keys = itertools.count(1)


def _address_of(view: memoryview) -> int:
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data) if len(view) else 0


class OffloadTransport(Transport):
    """Backend ``offload``.

    progress: ``"offload"`` (worker processes do the per-packet work) or ``"cpu"``
        (the same work inline in :meth:`OffloadQP.poll_completions`).
    workers: worker processes to start (ignored with ``progress="cpu"`` or ``pool``).
    pool: an existing :class:`WorkerPool` to share (not stopped by :meth:`close`).
    host: the address the UDP wire binds to.
    wire: ``"simple"`` (this backend's 20-byte header) or ``"roce"`` (RoCEv2 UC packets
        with ICRC, the ``udp`` backend's codec: :mod:`sdr.backends.offload.roce_wire`).
    source: ``(attr, channel) -> spec`` of each channel's packet source (default: a UDP
        socket on ``host``); e.g. ``("synthetic", packets)`` to measure the engine alone.
    """

    name: ClassVar[str] = "offload"

    def __init__(
        self,
        progress: str = "offload",
        workers: int = 1,
        pool: WorkerPool | None = None,
        host: str = "127.0.0.1",
        wire: str = "simple",
        source: Callable[[QPAttr, int], tuple[Any, ...]] | None = None,
    ) -> None:
        if progress not in PROGRESS_MODES:
            raise ConfigError(f"progress must be one of {PROGRESS_MODES}, got {progress!r}")
        if wire not in WIRES:
            raise ConfigError(f"wire must be one of {WIRES}, got {wire!r}")
        self.progress = progress
        self.wire = wire
        self.host = host
        self.source = source or (lambda _attr, _ch: ("udp", host))
        self._own_pool = progress == "offload" and pool is None
        self.pool = None if progress == "cpu" else (pool or WorkerPool(workers))
        self.local_segments: dict[int, memoryview] = {}
        self._segments: dict[int, Segment] = {}
        self._placements: dict[int, tuple[int, int]] = {}
        self._qps: list[OffloadQP] = []
        self._ids = itertools.count(1)
        self._closed = False

    @classmethod
    def from_config(cls, table: Mapping[str, Any]) -> OffloadTransport:
        """From a config table, e.g. TOML ``[backend]`` with ``name = "offload"``,
        ``progress = "offload" | "cpu"``, ``workers = N``, ``wire``, ``host``."""
        options = {k: v for k, v in table.items() if k != "name"}
        unknown = set(options) - {"progress", "workers", "host", "wire"}
        if unknown:
            raise ConfigError(
                f"unknown offload option(s) {sorted(unknown)}; known: progress, workers, host, wire"
            )
        return cls(**options)

    def new_id(self) -> int:
        """An id unique within the pool (QPs and segments)."""
        return self.pool.new_id() if self.pool is not None else next(self._ids)

    def now(self) -> float:
        return time.monotonic()

    def alloc(self, nbytes: int) -> np.ndarray:
        """A zeroed uint8 array of ``nbytes`` in shared memory that workers can write into."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ConfigError(f"alloc needs a byte count >= 0, got {nbytes!r}")
        seg = Segment(nbytes)
        seg_id = self.new_id()
        try:
            if self.pool is not None:
                self.pool.broadcast(("segment", seg_id, seg.name, seg.size))
        except BaseException:
            seg.destroy()
            raise
        self._segments[seg_id] = seg
        self.local_segments[seg_id] = seg.buf
        return np.frombuffer(seg.buf, dtype=np.uint8, count=nbytes)

    def register(self, buffer: object) -> MemoryRegion:
        view = as_byte_view(buffer)
        region = MemoryRegion(key=next(_keys), view=view, owner=buffer)
        address = _address_of(view)
        for seg_id, seg in self._segments.items():
            base = seg.address()
            if base <= address and address + len(view) <= base + seg.size:
                self._placements[region.key] = (seg_id, address - base)
                return region
        if self.pool is None:  # inline engine: any local buffer can be written
            seg_id = self.new_id()
            self.local_segments[seg_id] = view
            self._placements[region.key] = (seg_id, 0)
        return region

    def placement_of(self, region: MemoryRegion) -> tuple[int, int]:
        """(segment id, offset of the region in it) for a receive binding."""
        where = self._placements.get(region.key)
        if where is None:
            raise ConfigError(
                "offload receive buffers must live in shared memory: allocate them with "
                "OffloadTransport.alloc(nbytes) and register that array"
            )
        return where

    def create_qp(self, attr: QPAttr) -> OffloadQP:
        if self._closed:
            raise TransportError("transport is closed")
        qp = OffloadQP(self, attr)
        self._qps.append(qp)
        return qp

    def forget(self, qp: OffloadQP) -> None:
        if qp in self._qps:
            self._qps.remove(qp)

    def wait(self, timeout: float) -> None:
        """Wait for a control message or (inline engine) a packet, at most ``timeout``.

        Raises TransportError when a worker has died (its channels would stay silent).
        """
        if self.pool is not None and not self.pool.alive:
            raise TransportError(f"an offload worker exited (pids {self.pool.pids})")
        fds = [fd for qp in self._qps for fd in qp.fds()]
        if any(qp.pending() for qp in self._qps):
            return
        limit = timeout if self.pool is None else min(timeout, _WAIT_CAP_S)
        if fds:
            select.select(fds, [], [], max(0.0, limit))
        else:
            time.sleep(max(0.0, limit))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for qp in list(self._qps):
            qp.close()
        if self.pool is not None and self.pool.alive:
            try:
                for seg_id in self._segments:
                    self.pool.broadcast(("drop_segment", seg_id))
            except TransportError:
                pass
        self.local_segments.clear()
        for seg in self._segments.values():
            seg.destroy()
        self._segments.clear()
        if self._own_pool and self.pool is not None:
            self.pool.stop()
