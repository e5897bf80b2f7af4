"""The public API (names mirror the paper's Table 1): Context, QP and handles.

This is the thin layer that joins the sans-I/O core (:class:`QueuePairCore`) to a driver
(:class:`Transport`). It reads time only through the driver and does no I/O of its own;
all work happens inside :meth:`Context.progress` (CPU progress, no hidden threads)::

    ctx = sdr.Context(backend="inproc")
    qp = ctx.create_qp(sdr.QPAttr(mtu=4096, chunk_size="64KiB"))
    qp.connect(peer_info)            # bytes from the peer's qp.info(), exchanged out of band
    mr = ctx.register(numpy_array)
    rh = qp.post_recv(mr)            # rh.bitmap fills as chunks land
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from sdr.actions import Bind, Reopen, Seal, SendControl, Unbind
from sdr.auth import check_secret, sign_info, verify_info
from sdr.backend_registry import load_backend
from sdr.chunk_bitmap import bitmap_chunk_expand
from sdr.config import QPAttr
from sdr.errors import ConfigError, ProtocolError, SDRError, TimeoutError, TransportError
from sdr.id_reuse import DESIGN_RTT, warn_if_short
from sdr.peer_info import check_int, check_keys, field_int, field_str, require_object
from sdr.queue_pair import QueuePairCore
from sdr.recv_table import RecvRecord, RecvState
from sdr.send_table import DEFAULT_CTS_TIMEOUT, SendRecord, SendState
from sdr.transport import MemoryRegion, Transport

__all__ = ["Context", "QP", "RecvHandle", "SendHandle", "SendStream"]

_INFO_VERSION = 1
_INFO_FIELDS = ("version", "backend", "attr", "transport")
_SIGNED_FIELDS = ("nonce", "hmac")  # sdr/auth.py adds them when the peer has a secret
_ATTR_MAX = (1 << 63) - 1
_POLL_BATCH = 4096
_IDLE_WAIT_S = 0.001


class Context:
    """A device context: one backend (transport) and the QPs created on it."""

    def __init__(
        self,
        backend: str | Transport = "inproc",
        *,
        secret: bytes | str | None = None,
        **attrs: Any,
    ) -> None:
        """``secret``: shared key that authenticates connection set-up (sdr/auth.py)."""
        self.secret = check_secret(secret)
        if isinstance(backend, Transport):
            if attrs:
                raise ConfigError("pass backend attributes to the Transport itself")
            self.transport = backend
        else:
            self.transport = load_backend(backend)(**attrs)
        self._qps: list[QP] = []

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now(self) -> float:
        """The backend's clock (seconds)."""
        return self.transport.now()

    def register(self, buffer: object) -> MemoryRegion:
        """Register a writable buffer (NumPy array, bytearray, mmap ...) for SDR I/O."""
        return self.transport.register(buffer)

    def create_qp(self, attr: QPAttr | None = None) -> QP:
        """Create an SDR queue pair with these attributes (defaults: the paper's)."""
        attr = attr or QPAttr()
        # at the rate limit, one-chunk messages, the longest RTT of the design range
        warn_if_short(attr, DESIGN_RTT, attr.rate_limit)  # type: ignore[arg-type]
        qp = QP(self, attr)
        self._qps.append(qp)
        return qp

    def progress(self) -> int:
        """Drive every QP once: receive, apply, send. Returns the units of work done."""
        return sum(qp.progress() for qp in self._qps)

    def wait_until(self, condition: Any, timeout: float | None, what: str) -> None:
        """Progress until ``condition()`` holds; sdr.TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else self.now() + timeout
        while not condition():
            if self.progress() == 0:
                if deadline is not None and self.now() >= deadline:
                    raise TimeoutError(f"{what} did not finish within {timeout} s")
                self.transport.wait(_IDLE_WAIT_S)

    def close(self) -> None:
        for qp in self._qps:
            qp.close()
        self._qps.clear()
        self.transport.close()


class QP:
    """An SDR queue pair: unreliable one-packet writes with a receive chunk bitmap."""

    def __init__(self, ctx: Context, attr: QPAttr) -> None:
        self.ctx = ctx
        self.attr = attr
        self.core = QueuePairCore(attr)
        self.transport_qp = ctx.transport.create_qp(attr)
        self.connected = False

    def info(self) -> bytes:
        """Bytes to hand to the peer's :meth:`connect` (out of band)."""
        body = {
            "version": _INFO_VERSION,
            "backend": self.ctx.transport.name,
            "attr": self.attr.wire_dict(),
            "transport": self.transport_qp.info(),
        }
        return json.dumps(sign_info(body, self.ctx.secret)).encode()

    def connect(self, remote_info: bytes) -> None:
        """Connect to the peer QP whose :meth:`info` this is; attributes must agree.

        The info comes from the network: every field is validated (:mod:`sdr.peer_info`)
        before anything changes. Malformed info raises ProtocolError, info that does not
        fit this QP (backend, attributes, shape) ConfigError, both naming the field and
        the value; the QP stays unconnected and may connect again. A QP connects once: a
        second connect raises ConfigError (create a new QP for a restarted peer).
        """
        remote = self._parse_info(remote_info)
        if self.connected:
            raise ConfigError(
                "QP already connected; a QP connects once: create a new QP "
                "(ctx.create_qp) to connect to a restarted or another peer"
            )
        backend, transport = remote["backend"], remote["transport"]
        try:
            self.transport_qp.connect(transport)
        except SDRError:
            raise
        except OSError as exc:  # a backend that does not validate its own part
            raise TransportError(f"the {backend} backend could not connect: {exc}") from exc
        except Exception as exc:
            raise ProtocolError(
                f"peer info.transport is not valid {backend} transport info: {exc!r}"
            ) from exc
        self.connected = True

    def _parse_info(self, remote_info: bytes) -> dict[str, Any]:
        """The peer's info, decoded and checked against this QP (raises, changes nothing)."""
        try:
            decoded = json.loads(remote_info)
        except (ValueError, TypeError, RecursionError) as exc:
            raise ProtocolError(f"peer info is not valid JSON: {exc}") from exc
        try:
            remote = verify_info(require_object(decoded, "peer info"), self.ctx.secret)
        except RecursionError as exc:
            raise ProtocolError("peer info is nested too deeply") from exc
        version = field_int(remote, "version", 0, _ATTR_MAX)
        if version != _INFO_VERSION:
            raise ProtocolError(f"peer info version {version}, expected {_INFO_VERSION}")
        check_keys(remote, "peer info", _INFO_FIELDS, _SIGNED_FIELDS)
        backend = field_str(remote, "backend")
        if backend != self.ctx.transport.name:
            raise ConfigError(f"peer uses backend {backend!r}, this QP {self.ctx.transport.name!r}")
        mine = self.attr.wire_dict()
        attr = require_object(remote["attr"], "peer info.attr")
        check_keys(attr, "peer info.attr", mine)
        theirs = {k: check_int(attr[k], f"peer info.attr.{k}", 0, _ATTR_MAX) for k in mine}
        differ = {k: (mine[k], theirs[k]) for k in mine if theirs[k] != mine[k]}
        if differ:
            detail = ", ".join(f"{k}: ours {a}, peer {b}" for k, (a, b) in differ.items())
            raise ConfigError(f"QP attributes differ from the peer's: {detail}")
        require_object(remote["transport"], "peer info.transport")
        return remote

    def _check_connected(self) -> None:
        if not self.connected:
            raise ConfigError("connect the QP (qp.connect(peer_info)) before posting")

    def post_recv(self, mr: MemoryRegion, offset: int = 0, length: int | None = None) -> RecvHandle:
        """Post a receive into mr[offset:offset+length]; matched to the peer's next send."""
        self._check_connected()
        return RecvHandle(self, self.core.post_recv(self.ctx.now(), mr, offset, length))

    def post_send(
        self,
        mr: MemoryRegion,
        offset: int = 0,
        length: int | None = None,
        imm: int | None = None,
        *,
        cts_timeout: float | None = DEFAULT_CTS_TIMEOUT,
    ) -> SendHandle:
        """Send mr[offset:offset+length] as one message into the peer's next posted receive.

        If the peer's clear-to-send (its matching receive) does not come within
        ``cts_timeout`` seconds (default 30; None: wait forever), the send fails with
        sdr.TimeoutError.
        """
        self._check_connected()
        rec = self.core.post_send(self.ctx.now(), mr, offset, length, imm, cts_timeout)
        return SendHandle(self, rec)

    def send_stream(
        self, imm: int | None = None, *, cts_timeout: float | None = None
    ) -> SendStream:
        """Start a streaming send: write ranges at any offset, then end().

        No CTS deadline by default (the reliable layer's lanes are streams and have their
        own timers); ``cts_timeout`` seconds sets one, as for :meth:`post_send`.
        """
        self._check_connected()
        return SendStream(self, self.core.stream_start(self.ctx.now(), imm, cts_timeout))

    def send_control(self, data: bytes) -> None:
        """Queue a control message for the peer (used by reliability schemes)."""
        self.core.queue_control(data)

    def poll_control(self) -> list[bytes]:
        """Control messages for the layer above (not SDR's own CTS)."""
        out = list(self.core.upper_control)
        self.core.upper_control.clear()
        return out

    def counters(self) -> dict[str, int]:
        """Core counters plus the driver's discards (summed where both count)."""
        merged = self.core.counters.as_dict()
        for key, value in self.transport_qp.counters().items():
            merged[key] = merged.get(key, 0) + value
        return merged

    def progress(self) -> int:
        """One round of work: control in, completions in, actions out, packets out."""
        if not self.connected:
            return 0
        core, tqp = self.core, self.transport_qp
        now = self.ctx.now()
        work = 0
        for data in tqp.poll_control():
            core.receive_control(now, data)
            work += 1
        while True:
            batch = tqp.poll_completions(_POLL_BATCH)
            if not len(batch):
                break
            core.receive_completions(now, batch)
            work += len(batch)
        work += self._carry_out()
        budget = tqp.send_budget(now)
        for batch in core.writes_to_send(now, budget):  # with no budget: only CTS deadlines
            tqp.post_writes(batch)
            work += len(batch)
        return work + self._carry_out()

    def _carry_out(self) -> int:
        actions = self.core.actions_to_do()
        tqp = self.transport_qp
        for action in actions:
            if isinstance(action, Bind):
                tqp.bind(
                    action.generation,
                    action.slot,
                    action.region,
                    action.offset,
                    action.length,
                    action.msg_id,
                )
            elif isinstance(action, Unbind):
                tqp.unbind(action.generation, action.slot)
            elif isinstance(action, Seal):
                tqp.seal(action.generation, action.slot, action.start, action.stop)
            elif isinstance(action, Reopen):
                tqp.reopen(action.generation, action.slot, action.start, action.stop)
            elif isinstance(action, SendControl):
                tqp.send_control(action.data)
        return len(actions)

    def close(self) -> None:
        self.transport_qp.close()


class RecvHandle:
    """A posted receive: its chunk bitmap, immediate and completion."""

    def __init__(self, qp: QP, record: RecvRecord) -> None:
        self.qp = qp
        self.record = record

    @property
    def bitmap(self) -> np.ndarray:
        """Read-only chunk bitmap: one bool per chunk, True once all its packets arrived."""
        return self.record.bitmap.view()

    @property
    def imm(self) -> int | None:
        """The sender's 32-bit immediate; None until all its fragments arrived."""
        return self.record.imm

    @property
    def length(self) -> int:
        return self.record.length

    @property
    def completed(self) -> bool:
        return self.record.state is RecvState.COMPLETED

    def poll(self) -> bool:
        """Progress once; True when every chunk and the immediate have arrived."""
        self.qp.ctx.progress()
        return self.record.arrived

    def wait(self, timeout: float | None = None) -> RecvHandle:
        """Progress until everything arrived (sdr.TimeoutError after ``timeout`` s)."""
        self.qp.ctx.wait_until(lambda: self.record.arrived, timeout, f"receive {self.record.seq}")
        return self

    def complete(self) -> None:
        """Release the receive (early completion allowed): later packets are discarded."""
        self.qp.core.complete_recv(self.qp.ctx.now(), self.record)
        self.qp._carry_out()

    def seal(self, chunks: object) -> None:
        """Declare these chunks final (e.g. verified against a checksum): the driver refuses
        every later packet for them, so their bytes can no longer change."""
        self.qp.core.seal_chunks(self.qp.ctx.now(), self.record, chunks)
        self.qp._carry_out()

    def reopen(self, chunks: object) -> None:
        """These chunks failed a check: clear their bits and accept their packets again
        (a retransmission repairs them; the bits set again when it has landed)."""
        self.qp.core.reopen_chunks(self.qp.ctx.now(), self.record, chunks)
        self.qp._carry_out()

    def chunk_ranges(self, chunks: object) -> np.ndarray:
        """Byte ranges [start, stop) of chunk indices or a chunk mask (bitmap_chunk_expand)."""
        return bitmap_chunk_expand(chunks, self.qp.attr.chunk_size, self.record.length)

    def missing_chunks(self) -> np.ndarray:
        """Indices of chunks not yet arrived."""
        return self.record.bitmap.missing_chunks()


class _SendBase:
    def __init__(self, qp: QP, record: SendRecord) -> None:
        self.qp = qp
        self.record = record

    def _done(self) -> bool:
        if self.record.state is SendState.FAILED:
            assert self.record.error is not None
            raise self.record.error
        return self.record.done

    def poll(self) -> bool:
        """Progress once; True when every packet was handed to the transport.

        Raises the message's error if it failed (e.g. it does not fit the receive).
        """
        self.qp.ctx.progress()
        return self._done()

    def wait(self, timeout: float | None = None) -> _SendBase:
        """Progress until sent (sdr.TimeoutError after ``timeout`` s)."""
        self.qp.ctx.wait_until(self._done, timeout, f"send {self.record.seq}")
        return self


class SendHandle(_SendBase):
    """A one-shot send."""


class SendStream(_SendBase):
    """A streaming send: ranges at any (MTU-aligned) remote offset, then end()."""

    def send(self, mr: MemoryRegion, src_offset: int, dst_offset: int, length: int) -> None:
        """Write mr[src_offset:+length] to remote bytes [dst_offset, dst_offset+length)."""
        self.qp.core.stream_send(self.qp.ctx.now(), self.record, mr, src_offset, dst_offset, length)

    def end(self) -> None:
        """No more ranges; the stream completes when what is queued is sent."""
        self.qp.core.stream_end(self.qp.ctx.now(), self.record)
