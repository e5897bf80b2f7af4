"""One offload QP: its channel sources (in workers or inline), rings and keys in shared memory.

Sending happens here in the application (one datagram per packet, simple or RoCEv2
format); receiving is the engine's job (:mod:`sdr.backends.offload.engine`), in the workers
that serve this QP's channels or, with ``progress="cpu"``, inside :meth:`poll_completions`.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import numpy as np

from sdr.backends.offload.contracts import QPHost
from sdr.backends.offload.engine import ChannelEngine, drain
from sdr.backends.offload.shared_state import QPShared, Segment, layout_for
from sdr.backends.offload.wire import HEADER, MAX_DATAGRAM, PacketSource, encode_header, make_source
from sdr.config import MAX_GENERATIONS, QPAttr
from sdr.errors import ConfigError, LocalProtocolError, TransportError
from sdr.pacing import TokenBucket
from sdr.peer_info import (
    check_address,
    check_int_grid,
    check_keys,
    check_list,
    field_address,
    require_object,
)
from sdr.queue_pair import MAX_QUEUED_CONTROL
from sdr.transport import (
    MAX_CONTROL_SIZE,
    Bind,
    CompletionBatch,
    TransportQP,
    WriteBatch,
)

__all__ = ["OffloadQP", "CONTROL_READS_PER_POLL"]

CONTROL_READS_PER_POLL = MAX_QUEUED_CONTROL
"""Most control datagrams one :meth:`OffloadQP.poll_control` reads; the rest wait in the
kernel's bounded socket buffer (which drops beyond it), so a flood cannot keep one
progress call reading forever nor queue without bound."""
_QPNS = (2, (1 << 24) - 1)  # RoCE QPNs: 24 bits, 0 and 1 reserved


class OffloadQP(TransportQP):
    """Transport side of one QP: channel sources in workers, rings and keys in shared memory."""

    def __init__(self, transport: QPHost, attr: QPAttr) -> None:
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
            from sdr.backends.offload.roce_wire import qpn_of

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
        """Connect to the peer's :meth:`info`; every field is validated first (ProtocolError
        or ConfigError naming it), so a refused connect changes nothing."""
        attr, path = self.attr, "transport"
        info = require_object(remote, path)
        check_keys(info, path, ("channels", "control", "qpns"))
        rows = check_list(info["channels"], f"{path}.channels", attr.channels)
        channels = [
            check_address(row, f"{path}.channels[{ch}]", ipv4_only=True)
            for ch, row in enumerate(rows)
        ]
        control = field_address(info, "control", path=path, ipv4_only=True)
        roce = None
        if self.qpns is not None:
            from sdr.backends.offload.roce_wire import RoceSender

            if info["qpns"] is None:
                raise ConfigError("peer does not use the RoCE wire (no QPNs in its info)")
            qpns = check_int_grid(
                info["qpns"], f"{path}.qpns", attr.generations, attr.channels, *_QPNS, True
            )
            roce = RoceSender(self.data_sock, channels, qpns)
        elif info["qpns"] is not None:
            raise ConfigError("peer uses the RoCE wire (QPNs in its info), this QP the simple one")
        self._roce = roce
        self._peer, self._peer_control = channels, control

    def bind(self, binding: Bind) -> None:
        binding.check(self.layout.slot_size)
        segment, base = self.transport.placement_of(binding.region)
        self.shared.reset_slot(binding.slot)
        self.shared.write_entry(
            binding.generation,
            binding.slot,
            segment,
            base + binding.offset,
            binding.length,
            binding.msg_id,
        )

    guards_placement = True  # the engine places each packet once (its shared packet byte)

    def seal(self, generation: int, slot: int, start: int, stop: int) -> None:
        self.shared.set_packets(slot, start, stop, 1)

    def reopen(self, generation: int, slot: int, start: int, stop: int) -> None:
        self.shared.set_packets(slot, start, stop, 0)

    def unbind(self, generation: int, slot: int) -> None:
        self.shared.clear_entry(generation, slot)
        if self._workers and not self._closed:
            self.transport.pool.call(self._workers, ("fence",))  # type: ignore[union-attr]

    def set_pacing_rate(self, now: float, bits_per_s: float) -> None:
        self.pacer.set_rate(now, bits_per_s)

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
            try:
                if roce is not None:
                    roce.send(gen, ch, imm, roff, view[src : src + n])
                else:
                    send([encode_header(gen, ch, imm, roff), view[src : src + n]], (), 0, peer[ch])
            except (BlockingIOError, InterruptedError):
                continue  # send queue full: the packet is lost, as on an unreliable wire
            except OSError as exc:
                raise TransportError(f"sending to the peer at {peer[ch]}: {exc}") from exc
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
            raise LocalProtocolError(f"control message of {len(data)} bytes > {MAX_CONTROL_SIZE}")
        if self._peer_control is None:
            raise TransportError("QP is not connected")
        try:
            self.control_sock.sendto(bytes(data), self._peer_control)
        except (BlockingIOError, InterruptedError):
            pass  # unreliable, like the data path
        except OSError as exc:
            raise TransportError(
                f"sending a control message to {self._peer_control}: {exc}"
            ) from exc

    def poll_control(self) -> list[bytes]:
        out: list[bytes] = []
        for _ in range(CONTROL_READS_PER_POLL):
            try:
                out.append(self.control_sock.recv(MAX_CONTROL_SIZE + 1))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                continue  # e.g. an ICMP error reported on the socket: nothing to read
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
