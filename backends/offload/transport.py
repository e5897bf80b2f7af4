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

import contextlib
import itertools
import select
import socket
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from backends.offload.engine import ChannelEngine, drain
from backends.offload.pool import WorkerPool
from backends.offload.shared_state import QPShared, Segment, layout_for
from backends.offload.wire import HEADER, MAX_DATAGRAM, PacketSource, encode_header, make_source
from sdr.config import MAX_GENERATIONS, QPAttr
from sdr.errors import ConfigError, ProtocolError, TransportError
from sdr.pacing import TokenBucket
from sdr.transport import (
    MAX_CONTROL_SIZE,
    CompletionBatch,
    MemoryRegion,
    Transport,
    TransportQP,
    WriteBatch,
    as_byte_view,
)

__all__ = ["OffloadTransport", "OffloadQP", "PROGRESS_MODES"]

PROGRESS_MODES = ("offload", "cpu")
WIRES = ("simple", "roce")
_WAIT_CAP_S = 0.0005
_keys = itertools.count(1)


def _address_of(view: memoryview) -> int:
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data) if len(view) else 0


class OffloadQP(TransportQP):
    """Transport side of one QP: channel sources in workers, rings and keys in shared memory."""

    def __init__(self, transport: OffloadTransport, attr: QPAttr) -> None:
        if attr.mtu + HEADER.size > MAX_DATAGRAM:
            raise ConfigError(
                f"mtu {attr.mtu} too large for the offload UDP wire: at most "
                f"{MAX_DATAGRAM - HEADER.size} bytes"
            )
        self.transport = transport
        self.attr = attr
        self.layout = layout_for(attr)
        self.segment = Segment(self.layout.nbytes)
        self.shared = QPShared(self.segment.buf, self.layout)
        entries = np.frombuffer(self.segment.buf, dtype=np.int64, count=len(self.shared.keys))
        entries.reshape(-1, 6)[:, [1, 4]] = -1  # every entry starts NULL
        del entries
        self.pacer = TokenBucket(attr.rate_limit, max(attr.chunk_size, 16 * attr.mtu) * 8)
        self._closed = False
        self._peer: list[tuple[str, int]] = []
        self._peer_control: tuple[str, int] | None = None
        self._engines: list[tuple[ChannelEngine, PacketSource]] = []
        self._workers: list[int] = []
        self.qp_id = transport.new_id()
        host = transport.host
        self.qpns: list[list[int]] | None = None
        self._roce: Any = None
        if transport.wire == "roce":
            from backends.offload.roce_wire import qpn_of

            self.qpns = [[qpn_of(self.qp_id, g, c, attr.channels) for c in range(attr.channels)]
                         for g in range(attr.generations)]  # fmt: skip
            # every generation number maps, so the engine counts a stale one as stale
            specs = [("roce", host, {qpn_of(self.qp_id, g, c, attr.channels): g
                                     for g in range(MAX_GENERATIONS)})
                     for c in range(attr.channels)]  # fmt: skip
        else:
            specs = [transport.source(attr, ch) for ch in range(attr.channels)]
        self.data_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.data_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        self.data_sock.bind((host, 0))  # a fixed source address: the RoCE ICRC covers it
        self.control_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.control_sock.bind((host, 0))
        self.control_sock.setblocking(False)
        try:
            if transport.pool is None:
                for ch in range(attr.channels):
                    src = make_source(specs[ch])
                    self._engines.append(
                        (ChannelEngine(self.shared, ch, transport.local_segments), src)
                    )
                self.addresses = [src.address() for _, src in self._engines]
            else:
                self._workers = transport.pool.assign(attr.channels)
                addresses: dict[int, Any] = {}
                for worker in sorted(set(self._workers)):
                    chans = [(ch, specs[ch]) for ch, w in enumerate(self._workers) if w == worker]
                    msg = ("attach", self.qp_id, self.segment.name, self.layout.as_dict(), chans)
                    addresses.update(transport.pool.call([worker], msg)[worker])
                self.addresses = [addresses[ch] for ch in range(attr.channels)]
        except BaseException:
            self.close()
            raise

    def info(self) -> dict[str, Any]:
        return {
            "channels": self.addresses,
            "control": list(self.control_sock.getsockname()),
            "qpns": self.qpns,
        }

    def connect(self, remote: dict[str, Any]) -> None:
        try:
            channels = [(str(h), int(p)) for h, p in remote["channels"]]
            host, port = remote["control"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"offload peer info is malformed: {exc}") from exc
        if len(channels) != self.attr.channels:
            raise ConfigError(f"peer has {len(channels)} channels, this QP {self.attr.channels}")
        if self.qpns is not None:
            from backends.offload.roce_wire import RoceSender

            if not remote.get("qpns"):
                raise ConfigError("peer does not use the RoCE wire (no QPNs in its info)")
            self._roce = RoceSender(self.data_sock, channels, remote["qpns"])
        self._peer, self._peer_control = channels, (str(host), int(port))

    def bind(
        self,
        generation: int,
        slot: int,
        region: MemoryRegion,
        offset: int,
        length: int,
        msg_id: int,
    ) -> None:
        region.check_range(offset, length)
        if length > self.layout.slot_size:
            raise ConfigError(
                f"binding of {length} bytes exceeds slot size {self.layout.slot_size}"
            )
        segment, base = self.transport.placement_of(region)
        self.shared.reset_slot(slot)
        self.shared.write_entry(generation, slot, segment, base + offset, length, msg_id)

    def unbind(self, generation: int, slot: int) -> None:
        self.shared.clear_entry(generation, slot)
        if self._workers and not self._closed:
            self.transport.pool.call(self._workers, ("fence",))  # type: ignore[union-attr]

    def send_budget(self, now: float) -> int:
        return self.pacer.budget(now, self.attr.mtu * 8)

    def post_writes(self, batch: WriteBatch) -> None:
        if not self._peer:
            raise TransportError("QP is not connected")
        view, peer, gen = batch.region.view, self._peer, batch.generation
        send = self.data_sock.sendmsg
        roce = self._roce
        for ch, roff, imm, src, n in zip(
            batch.channels.tolist(),
            batch.remote_offsets.tolist(),
            batch.imms.tolist(),
            batch.src_offsets.tolist(),
            batch.lengths.tolist(),
            strict=True,
        ):
            if roce is not None:
                roce.send(gen, ch, imm, roff, view[src : src + n])
            else:
                send([encode_header(gen, ch, imm, roff), view[src : src + n]], (), 0, peer[ch])
        self.pacer.consume(self.transport.now(), batch.payload_bytes * 8)

    def poll_completions(self, max_packets: int) -> CompletionBatch:
        for engine, source in self._engines:  # progress="cpu": the engine runs here
            drain(engine, source, max_packets)
        parts = []
        left = max_packets
        for ch in range(self.attr.channels):
            if left <= 0:
                break
            records = self.shared.read_ring(ch, left)
            if len(records):
                parts.append(records)
                left -= len(records)
        if not parts:
            return CompletionBatch.empty()
        rec = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return CompletionBatch(
            (rec[:, 0] >> 8).astype(np.uint16),
            (rec[:, 0] & 0xFF).astype(np.uint8),
            rec[:, 1].astype(np.uint32),
            rec[:, 2].copy(),
            rec[:, 3].copy(),
        )

    def pending(self) -> int:
        """Completion records waiting in this QP's rings."""
        return sum(self.shared.pending(ch) for ch in range(self.attr.channels))

    def chunk_bitmap(self, slot: int, length: int) -> np.ndarray:
        """The chunk bitmap of the receive bound to ``slot``, read from shared memory."""
        return self.shared.chunk_bitmap(slot, length)

    def send_control(self, data: bytes) -> None:
        if len(data) > MAX_CONTROL_SIZE:
            raise ProtocolError(f"control message of {len(data)} bytes > {MAX_CONTROL_SIZE}")
        if self._peer_control is None:
            raise TransportError("QP is not connected")
        self.control_sock.sendto(bytes(data), self._peer_control)

    def poll_control(self) -> list[bytes]:
        out = []
        while True:
            try:
                out.append(self.control_sock.recv(MAX_CONTROL_SIZE + 1))
            except (BlockingIOError, InterruptedError):
                return out

    def counters(self) -> dict[str, int]:
        return self.shared.discard_counts()

    def fds(self) -> list[int]:
        """Descriptors that become readable when this QP has work for the application."""
        fds = [self.control_sock.fileno()]
        return fds + [src.fileno() for _, src in self._engines if src.fileno() >= 0]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        pool = self.transport.pool
        if self._workers and pool is not None and pool.alive:
            # if the pool is going away, its workers unmap everything on stop anyway
            with contextlib.suppress(TransportError):
                pool.call(self._workers, ("detach", self.qp_id))
        for _, source in self._engines:
            source.close()
        self._engines.clear()
        self.data_sock.close()
        self.control_sock.close()
        self.shared.release()
        self.segment.destroy()
        self.transport.forget(self)


class OffloadTransport(Transport):
    """Backend ``offload``.

    progress: ``"offload"`` (worker processes do the per-packet work) or ``"cpu"``
        (the same work inline in :meth:`OffloadQP.poll_completions`).
    workers: worker processes to start (ignored with ``progress="cpu"`` or ``pool``).
    pool: an existing :class:`WorkerPool` to share (not stopped by :meth:`close`).
    host: the address the UDP wire binds to.
    wire: ``"simple"`` (this backend's 20-byte header) or ``"roce"`` (RoCEv2 UC packets
        with ICRC, the ``udp`` backend's codec: :mod:`backends.offload.roce_wire`).
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
