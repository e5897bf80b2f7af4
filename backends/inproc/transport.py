"""The in-process transport: two contexts in one process joined by an InprocNetwork.

It behaves like a NIC on a lossy wire: payload is copied onto the wire when posted,
placed through the key table when it lands (late, stale and out-of-range packets are
counted and never written), and a completion row is produced per placed packet. Tests
and the simulator use it; with a ManualClock everything is deterministic.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, ClassVar

import numpy as np

from sdr.backends.inproc.network import InprocNetwork, ManualClock
from sdr.config import QPAttr
from sdr.errors import ConfigError, LocalProtocolError, TransportError
from sdr.key_table import KeyTable, KeyTableBindings
from sdr.pacing import TokenBucket
from sdr.placement import int64_column
from sdr.transport import (
    MAX_CONTROL_SIZE,
    CompletionBatch,
    MemoryRegion,
    Transport,
    TransportQP,
    WriteBatch,
    as_byte_view,
    concat_completions,
)

__all__ = ["InprocTransport", "InprocQP"]

_EMPTY = CompletionBatch.empty()
Packet = tuple[int, int, int, int, bytes]
"""A data packet in an inbox: (generation, channel, remote offset, immediate, payload)."""

_DEFAULT_NETWORK: InprocNetwork | None = None


def default_network() -> InprocNetwork:
    """The process-wide lossless wire used when no network is given."""
    global _DEFAULT_NETWORK
    if _DEFAULT_NETWORK is None:
        _DEFAULT_NETWORK = InprocNetwork()
    return _DEFAULT_NETWORK


class InprocQP(KeyTableBindings, TransportQP):
    """Transport side of one QP on the in-process wire."""

    def __init__(self, transport: InprocTransport, attr: QPAttr) -> None:
        self.transport = transport
        self.attr = attr
        self.network = transport.network
        self.eid = self.network.attach()
        self.peer: int | None = None
        self.keys = KeyTable(attr)
        burst = max(attr.chunk_size, 16 * attr.mtu) * 8
        self.pacer = TokenBucket(attr.rate_limit, burst)
        self._counters: dict[str, int] = {}
        self._control: list[bytes] = []

    def info(self) -> dict[str, Any]:
        return {"network": self.network.id, "endpoint": self.eid}

    def connect(self, remote: dict[str, Any]) -> None:
        # every field is checked before it is used: ProtocolError/ConfigError naming it
        from sdr.peer_info import check_keys, field_int, require_object

        info, ids = require_object(remote, "transport"), (1, (1 << 63) - 1)
        check_keys(info, "transport", ("network", "endpoint"))
        network = field_int(info, "network", *ids, path="transport")
        if network != self.network.id:
            raise ConfigError(
                f"inproc peers must share one InprocNetwork: the peer is on network {network}, "
                f"this QP on {self.network.id} (pass the same network= to both contexts)"
            )
        self.peer = field_int(info, "endpoint", *ids, path="transport")

    def set_pacing_rate(self, now: float, bits_per_s: float) -> None:
        self.pacer.set_rate(now, bits_per_s)

    def send_budget(self, now: float) -> int:
        return self.pacer.budget(now, self.attr.mtu * 8)

    def post_writes(self, batch: WriteBatch) -> None:
        if self.peer is None:
            raise TransportError("QP is not connected")
        view, send, peer, gen = batch.region.view, self.network.send, self.peer, batch.generation
        for ch, roff, imm, src, n in zip(
            batch.channels.tolist(),
            batch.remote_offsets.tolist(),
            batch.imms.tolist(),
            batch.src_offsets.tolist(),
            batch.lengths.tolist(),
            strict=True,
        ):
            send(peer, (gen, ch, roff, imm, bytes(view[src : src + n])))
        self.pacer.consume(self.transport.now(), batch.payload_bytes * 8)

    def poll_completions(self, max_packets: int) -> CompletionBatch:
        inbox = self.network.inbox(self.eid)
        parts: list[CompletionBatch] = []
        placed = 0
        while inbox and placed < max_packets:
            items: list[Packet] = []  # the next packets, as many as may still complete
            while inbox and len(items) < max_packets - placed:
                item = inbox.popleft()
                if isinstance(item, bytes):  # control message
                    self._control.append(item)
                else:
                    items.append(item)
            if not items:
                break
            batch = self._place(items)
            placed += len(batch)
            parts.append(batch)
        if not parts:
            return _EMPTY
        return parts[0] if len(parts) == 1 else concat_completions(parts)

    def _place(self, items: list[Packet]) -> CompletionBatch:
        """The software-NIC step over packets taken from the wire, in arrival order."""
        gens, chans, roffs, imms, payloads = zip(*items, strict=True)
        gen, roff, imm = int64_column(gens), int64_column(roffs), int64_column(imms)
        lengths = np.array([len(p) for p in payloads], dtype=np.int64)
        wild = (imm < 0) | (imm > 0xFFFFFFFF)  # no 32-bit immediate: refused as out of range
        if wild.any():
            roff[wild] = -1
        channels = np.asarray(chans, dtype=np.uint16)
        return self.keys.receive(channels, gen, roff, imm.astype(np.uint32), lengths, payloads)

    def send_control(self, data: bytes) -> None:
        if len(data) > MAX_CONTROL_SIZE:
            raise LocalProtocolError(f"control message of {len(data)} bytes > {MAX_CONTROL_SIZE}")
        if self.peer is None:
            raise TransportError("QP is not connected")
        self.network.send(self.peer, bytes(data), control=True)

    def poll_control(self) -> list[bytes]:
        inbox = self.network.inbox(self.eid)
        # control messages are taken in order; data stays queued for poll_completions
        kept: list[Packet] = []
        while inbox:
            item = inbox.popleft()
            (self._control if isinstance(item, bytes) else kept).append(item)
        inbox.extend(kept)
        out, self._control = self._control, []
        # every control message delivered is taken now: the wire's bound starts afresh
        dropped = self.network.take_control(self.eid)
        if dropped:
            self._counters["control_dropped"] = self._counters.get("control_dropped", 0) + dropped
        return out

    def counters(self) -> dict[str, int]:
        return {**self.keys.discards(), **self._counters}

    def close(self) -> None:
        self.network.detach(self.eid)


class InprocTransport(Transport):
    """Backend ``inproc``: contexts in one process sharing an :class:`InprocNetwork`.

    network: the wire to attach to (default: a process-wide lossless one).
    """

    name: ClassVar[str] = "inproc"
    _keys = itertools.count(1)

    def __init__(self, network: InprocNetwork | None = None) -> None:
        self.network = network or default_network()

    def now(self) -> float:
        return self.network.clock()

    def register(self, buffer: object) -> MemoryRegion:
        return MemoryRegion(key=next(self._keys), view=as_byte_view(buffer), owner=buffer)

    def create_qp(self, attr: QPAttr) -> InprocQP:
        return InprocQP(self, attr)

    def wait(self, timeout: float) -> None:
        """Let time pass until the next packet lands (a ManualClock jumps there)."""
        nxt = self.network.next_delivery()
        now = self.now()
        step = timeout if nxt is None else min(timeout, max(0.0, nxt - now))
        clock = self.network.clock
        if isinstance(clock, ManualClock):
            clock.advance(step if step > 0 else timeout)
        elif step > 0:
            time.sleep(step)
