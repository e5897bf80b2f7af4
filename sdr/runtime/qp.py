"""An SDR queue pair over a driver: the sans-I/O core joined to a transport QP.

:meth:`QP.progress` is the one driver loop: control in, completion batches in, timers,
actions out (bind, unbind, seal, reopen, control), packets out within the transport's
budget. It feeds :attr:`QP.protocol`, which is the QP's :class:`~sdr.queue_pair.
QueuePairCore` or a :class:`~sdr.reliability.ReliableConnection` wrapping it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from typing import Protocol as TypingProtocol

from sdr.actions import Action, Bind, Reopen, Seal, SendControl, Unbind
from sdr.auth import sign_info, verify_info
from sdr.config import QPAttr
from sdr.errors import ConfigError, RemoteProtocolError, SDRError, TransportError
from sdr.peer_info import check_int, check_keys, field_int, field_str, require_object
from sdr.queue_pair import QueuePairCore
from sdr.recv_table import RecvRecord
from sdr.runtime.qp_handles import RecvHandle, SendHandle, SendStream
from sdr.send_table import DEFAULT_CTS_TIMEOUT, SendRecord
from sdr.transport import CompletionBatch, MemoryRegion, WriteBatch

if TYPE_CHECKING:
    from sdr.runtime.context import Context

__all__ = ["QP", "Protocol"]

_INFO_VERSION = 1
_INFO_FIELDS = ("version", "backend", "attr", "transport")
_SIGNED_FIELDS = ("nonce", "hmac")  # sdr/auth.py adds them when the peer has a secret
_ATTR_MAX = (1 << 63) - 1
_POLL_BATCH = 4096


class Protocol(TypingProtocol):
    """The driver interface of the sans-I/O protocol objects (core or reliable connection)."""

    def receive_completions(self, now: float, batch: CompletionBatch) -> object: ...
    def receive_control(self, now: float, data: bytes) -> None: ...
    def writes_to_send(self, now: float, budget: int) -> list[WriteBatch]: ...
    @property
    def pacing_rate(self) -> float | None: ...
    def actions_to_do(self) -> list[Action]: ...
    def get_timer(self) -> float | None: ...
    def handle_timer(self, now: float) -> None: ...


class QP:
    """An SDR queue pair: unreliable one-packet writes with a receive chunk bitmap."""

    def __init__(self, ctx: Context, attr: QPAttr) -> None:
        self.ctx = ctx
        self.attr = attr
        self.core = QueuePairCore(attr)
        self.protocol: Protocol = self.core
        """What the progress loop feeds: the core, or the reliable connection over it
        (:class:`sdr.runtime.ReliableQP` installs one); both take the same calls."""
        self.transport_qp = ctx.transport.create_qp(attr)
        self.connected = False
        self._paced_at: float | None = None  # the rate last handed to the transport's pacer

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
            raise RemoteProtocolError(
                f"peer info.transport is not valid {backend} transport info: {exc!r}"
            ) from exc
        self.connected = True

    def _parse_info(self, remote_info: bytes) -> dict[str, Any]:
        """The peer's info, decoded and checked against this QP (raises, changes nothing)."""
        try:
            decoded = json.loads(remote_info)
        except (ValueError, TypeError, RecursionError) as exc:
            raise RemoteProtocolError(f"peer info is not valid JSON: {exc}") from exc
        try:
            remote = verify_info(require_object(decoded, "peer info"), self.ctx.secret)
        except RecursionError as exc:
            raise RemoteProtocolError("peer info is nested too deeply") from exc
        version = field_int(remote, "version", 0, _ATTR_MAX)
        if version != _INFO_VERSION:
            raise RemoteProtocolError(f"peer info version {version}, expected {_INFO_VERSION}")
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

    # --- what the handles ask of their QP ------------------------------------------------
    def release_recv(self, record: RecvRecord) -> None:
        """Give a receive back (early completion allowed): later packets are discarded."""
        self.core.complete_recv(self.ctx.now(), record)
        self._carry_out()

    def seal_chunks(self, record: RecvRecord, chunks: object) -> None:
        """These chunks of a receive are final: the driver refuses their later packets."""
        self.core.seal_chunks(self.ctx.now(), record, chunks)
        self._carry_out()

    def reopen_chunks(self, record: RecvRecord, chunks: object) -> None:
        """These chunks failed a check: clear their bits and accept their packets again."""
        self.core.reopen_chunks(self.ctx.now(), record, chunks)
        self._carry_out()

    def stream_send(
        self, record: SendRecord, mr: MemoryRegion, src_offset: int, dst_offset: int, length: int
    ) -> None:
        """Queue ``mr[src_offset:+length]`` of a streaming send at remote ``dst_offset``."""
        self.core.stream_send(self.ctx.now(), record, mr, src_offset, dst_offset, length)

    def stream_end(self, record: SendRecord) -> None:
        """No more ranges for a streaming send."""
        self.core.stream_end(self.ctx.now(), record)

    def counters(self) -> dict[str, int]:
        """Core counters plus the driver's discards (summed where both count)."""
        merged = self.core.counters.as_dict()
        for key, value in self.transport_qp.counters().items():
            merged[key] = merged.get(key, 0) + value
        return merged

    def progress(self) -> int:
        """One round of work: completions in, control in, timers, actions and packets out."""
        if not self.connected:
            return 0
        protocol, tqp = self.protocol, self.transport_qp
        now = self.ctx.now()
        work = 0
        while True:  # packets before control: a PROBE must see the chunks that came with it
            batch = tqp.poll_completions(_POLL_BATCH)
            if len(batch):
                protocol.receive_completions(now, batch)
                work += len(batch)
            if len(batch) < _POLL_BATCH:
                break  # fewer than asked: nothing more had arrived (no empty read to learn it)
        for data in tqp.poll_control():
            protocol.receive_control(now, data)
            work += 1
        deadline = protocol.get_timer()
        if deadline is not None and now >= deadline:
            protocol.handle_timer(now)
            work += 1
        work += self._carry_out()
        return work + self._send(now)

    def send_pending(self) -> int:
        """Only the sending half of a round: what the pacer allows goes on the wire now,
        before anything that arrived is read. A message that must leave at once (the
        deadline allreduce's note) does not wait behind a round's arrivals (one round
        took 0.9-1.9 ms in the DiLoCo example). Returns the packets and actions sent."""
        if not self.connected:
            return 0
        return self._carry_out() + self._send(self.ctx.now(), at_once=True)

    def _send(self, now: float, at_once: bool = False) -> int:
        """Post what the pacer allows; ``at_once``: what the rate allows now, not waiting
        for a whole batch (a 4 ms batch would hold a one-packet note up to 4 ms)."""
        protocol, tqp = self.protocol, self.transport_qp
        work = 0
        rate = protocol.pacing_rate  # a congestion controller's, when one runs
        if rate is not None and rate != self._paced_at:
            tqp.set_pacing_rate(now, rate)
            self._paced_at = rate
        budget = tqp.send_budget_now(now) if at_once else tqp.send_budget(now)
        for writes in protocol.writes_to_send(now, budget):  # no budget: only CTS deadlines
            tqp.post_writes(writes)
            work += len(writes)
        return work + self._carry_out()

    def next_timer(self) -> float | None:
        """When the protocol next has timed work (a CTS request, a scheme's RTO)."""
        return self.protocol.get_timer()

    def pacer_wait(self) -> float | None:
        """Seconds until the transport's pacer allows the next batch (0: it does now);
        None: the transport cannot say."""
        now = self.ctx.now()
        when = self.transport_qp.next_send_time(now)
        return None if when is None else max(when - now, 0.0)

    def _carry_out(self) -> int:
        actions = self.protocol.actions_to_do()
        tqp = self.transport_qp
        for action in actions:
            if isinstance(action, Bind):
                tqp.bind(action)  # the record itself: TransportQP.bind takes a Bind
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
