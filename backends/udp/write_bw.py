"""A write-bandwidth test in the style of perftest's ib_write_bw, over the UDP backend.

The server listens on a TCP port for the out-of-band exchange (as perftest does); the
client connects, sends its parameters and QP info, receives the server's QP info, and
then writes ``iterations`` one-shot messages of ``size`` bytes over UDP, at most
``inflight`` outstanding. The server posts receives ahead, times every completed
message, and reports back over TCP; both sides print the same perftest columns.

Receiver-side numbers are the truth for an unreliable transport: a message counts once
all its chunks arrived; messages that never complete within ``timeout`` count as lost.
"""

from __future__ import annotations

import builtins
import errno
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

import sdr
from sdr.backends.oob import DEFAULT_PORT, recv_obj, send_obj
from sdr.backends.udp.qp import UdpQP
from sdr.backends.udp.roce import ROCE_PORT
from sdr.backends.udp.transport import UdpTransport
from sdr.backends.udp.write_bw_reliable import (
    RELIABLE_MAX_MESSAGES,
    counters,
    receive_all,
    reliable_qp,
    write_all,
)
from sdr.errors import ConfigError, RemoteProtocolError, TransportError
from sdr.errors import TimeoutError as SDRTimeoutError
from sdr.reliability.registry import available_schemes
from sdr.runtime.qp import QP

__all__ = [
    "DEFAULT_BIND",
    "IntervalReporter",
    "PEAK_INTERVAL",
    "Stamps",
    "WriteBwParams",
    "WriteBwResult",
    "peak_bandwidth",
    "run_client",
    "run_server",
    "source_address_for",
]

DEFAULT_TCP_PORT = DEFAULT_PORT  # perftest's default
DEFAULT_BIND = "0.0.0.0"  # the server listens on every interface, as perftest does
#: shortest interval the peak bandwidth is measured over: completions are timestamped by a
#: poll loop in batches, so shorter windows measure the batching, not the link
PEAK_INTERVAL = 0.1


@dataclass
class WriteBwParams:
    """What the client asks for (the server adopts it)."""

    size: int = 65536
    iterations: int = 1000
    channels: int = 1
    mtu: int = 4096
    chunk_size: int = 65536
    inflight: int = 16
    rate_limit: float | None = None
    verify: bool = False
    timeout: float = 10.0
    scheme: str | None = None
    """A reliability scheme (``sr-nack``, ...): every message moves reliably
    (:mod:`~sdr.backends.udp.write_bw_reliable`); None: one-shot writes, as perftest's."""
    rtt: float = 0.025
    """The link's round trip, for the scheme's timers."""

    def __post_init__(self) -> None:
        if self.scheme is None:
            return
        if self.scheme not in (names := available_schemes()):
            raise ConfigError(f"--scheme must be one of {', '.join(names)}, got {self.scheme!r}")
        if not 0 < self.rtt < 3600:
            raise ConfigError(f"--rtt must be in (0, 3600) s, got {self.rtt!r}")

    def attr(self) -> sdr.QPAttr:
        """QP attributes for these parameters (chunk size is clamped to the message)."""
        chunk = max(self.mtu, min(self.chunk_size, -(-self.size // self.mtu) * self.mtu))
        chunk -= chunk % self.mtu
        return sdr.QPAttr(
            mtu=self.mtu,
            chunk_size=chunk,
            max_message_size=max(self.size, self.mtu),
            max_messages=RELIABLE_MAX_MESSAGES
            if self.scheme
            else max(3, min(1023, self.inflight)) | 1,  # odd: sdr.id_reuse
            channels=self.channels,
            rate_limit=self.rate_limit,
        )


@dataclass
class WriteBwResult:
    """One side's view of a run. Rates in bits/s (``*_bps``) and messages/s.

    ``bw_peak_bps`` is the best bandwidth over fixed intervals of ``peak_interval_s``
    (at least :data:`PEAK_INTERVAL`); a run shorter than one interval reports its average.
    ``intervals`` holds the per-interval lines of ``-i/--interval`` (empty without it).
    ``cpu_s_per_gib`` is this process's CPU time (user + system, every thread) per GiB
    from its first completed message to its last: start-up, registration and the
    teardown are outside it (perftest's ``--cpu_util``, per byte); None with fewer than
    two completions.
    """

    role: str
    size: int
    iterations: int
    completed: int = 0
    bytes: int = 0
    seconds: float = 0.0
    bw_peak_bps: float = 0.0
    bw_average_bps: float = 0.0
    msg_rate: float = 0.0
    peak_interval_s: float = 0.0
    mismatched: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    intervals: list[dict[str, float]] = field(default_factory=list)
    cpu_s_per_gib: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields, by name."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WriteBwResult:
        """Inverse of :meth:`as_dict` (keys it does not know are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class IntervalReporter:
    """Per-interval bandwidth lines, as iperf3 prints them: feed it the completion count
    as time passes (:meth:`poll`), and :meth:`finish` at the end; each finished interval
    is appended to ``rows`` and handed to ``callback``."""

    def __init__(
        self, size: int, length: float | None, callback: Callable[[dict], None] | None = None
    ) -> None:
        if length is not None and length <= 0:
            raise ConfigError(f"interval {length!r} s: expected a positive number of seconds")
        self.size, self.length, self.callback = size, length, callback
        self.rows: list[dict[str, float]] = []
        self.start: float | None = None
        self._edge_count = 0

    def begin(self, start: float) -> None:
        """Intervals are counted from ``start`` (the first packet, or the first send)."""
        if self.start is None:
            self.start = start

    def _emit(self, begin: float, end: float, completed: int) -> None:
        messages = completed - self._edge_count
        self._edge_count = completed
        seconds = max(end - begin, 1e-9)
        row = {
            "start_s": begin,
            "end_s": end,
            "messages": messages,
            "bytes": messages * self.size,
            "bw_bps": messages * self.size * 8 / seconds,
        }
        self.rows.append(row)
        if self.callback is not None:
            self.callback(row)

    def poll(self, now: float, completed: int) -> None:
        """Close every interval that ended by ``now``; ``completed`` messages so far."""
        if self.length is None or self.start is None:
            return
        while now - self.start >= (len(self.rows) + 1) * self.length:
            k = len(self.rows)
            self._emit(k * self.length, (k + 1) * self.length, completed)

    def finish(self, end: float, completed: int) -> None:
        """Close the last, partial interval (if it has any time in it)."""
        if self.length is None or self.start is None:
            return
        self.poll(end, completed)
        begin = len(self.rows) * self.length
        if end - self.start > begin + 1e-6:
            self._emit(begin, end - self.start, completed)


def pattern(size: int) -> np.ndarray:
    """The bytes every message carries (so the receiver can verify them)."""
    return (np.arange(size, dtype=np.uint64) * 2654435761 >> np.uint64(13)).astype(np.uint8)


def source_address_for(server: str) -> str:
    """The local IPv4 address the kernel would use to reach ``server``."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((server, 9))
        return str(probe.getsockname()[0])
    finally:
        probe.close()


def peak_bandwidth(
    stamps: list[float], start: float, size: int, interval: float = PEAK_INTERVAL
) -> float:
    """The best bandwidth (bits/s) over the complete fixed intervals ``[start + k*interval,
    start + (k+1)*interval)`` of a run whose messages of ``size`` bytes completed at
    ``stamps``; 0.0 when the run is shorter than one interval."""
    if not stamps or stamps[-1] - start < interval:
        return 0.0
    full = int((stamps[-1] - start) // interval)
    bins = np.floor((np.asarray(stamps) - start) / interval).astype(np.int64)
    counts = np.bincount(bins[bins < full], minlength=full)
    return float(counts.max()) * size * 8 / interval


def _datapath_stats(qp: QP) -> dict[str, int]:
    """The UDP datapath's own counters of ``qp`` (packets, GSO sends ...)."""
    udp = qp.transport_qp
    if not isinstance(udp, UdpQP):
        return {}
    transport = udp.transport
    drops = transport.socket_drops() if isinstance(transport, UdpTransport) else None
    return {**udp.stats, **({} if drops is None else {"socket_drops": drops})}


class Stamps(list[float]):
    """Completion times, each with this process's CPU time at that moment."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu: list[float] = []

    def append(self, now: float, /) -> None:
        super().append(now)
        self.cpu.append(time.process_time())

    def cpu_s_per_gib(self, size: int) -> float | None:
        """CPU seconds per GiB between the first completion and the last."""
        if len(self.cpu) < 2 or not size:
            return None
        return (self.cpu[-1] - self.cpu[0]) / ((len(self.cpu) - 1) * size / 2**30)


def _summarise(res: WriteBwResult, stamps: Stamps, start: float) -> WriteBwResult:
    res.completed = len(stamps)
    res.bytes = res.completed * res.size
    res.cpu_s_per_gib = stamps.cpu_s_per_gib(res.size)
    if stamps:
        res.seconds = max(stamps[-1] - start, 1e-9)
        res.bw_average_bps = res.bytes * 8 / res.seconds
        res.msg_rate = res.completed / res.seconds
        res.peak_interval_s = min(PEAK_INTERVAL, res.seconds)
        peak = peak_bandwidth(stamps, start, res.size)
        res.bw_peak_bps = max(res.bw_average_bps, peak)  # a short run: its average
    return res


def _listen(bind: str, port: int) -> socket.socket:
    try:
        return socket.create_server((bind, port))
    except OSError as exc:
        in_use = exc.errno == errno.EADDRINUSE
        hint = " (another server there? pick a port with --port)" if in_use else ""
        raise TransportError(
            f"cannot listen on TCP {bind}:{port}: {exc.strerror or exc}{hint}"
        ) from exc


def _recv_within(conn: socket.socket, seconds: float | None, what: str) -> Any:
    """One out-of-band object, waiting at most ``seconds`` (None: forever)."""
    conn.settimeout(seconds)
    try:
        return recv_obj(conn)
    except builtins.TimeoutError as exc:  # socket.timeout
        raise SDRTimeoutError(f"no {what} from the write-bw client within {seconds:g} s") from exc


def run_server(
    bind: str = DEFAULT_BIND,
    udp_port: int = ROCE_PORT,
    tcp_port: int = DEFAULT_TCP_PORT,
    ready: Callable[[int], None] | None = None,
    timeout: float | None = None,
    interval: float | None = None,
    on_interval: Callable[[dict], None] | None = None,
    transport: UdpTransport | None = None,
    rewrite_peer: Callable[[str], str] | None = None,
) -> tuple[WriteBwResult, WriteBwResult]:
    """Serve one client run; returns (server result, client result).

    The TCP listener binds ``bind`` (default every interface); the UDP data socket binds
    ``bind`` too, or, when that is 0.0.0.0, the local address the client's TCP connection
    arrived on. ``ready`` is called with the bound TCP port once the server listens (tests
    use port 0). ``timeout`` (seconds) bounds each wait for the client's messages and the
    idle time of the run (default: the client's ``--timeout``); the wait for a client to
    connect is not bounded. With ``interval``, per-interval rows go to ``on_interval``.
    ``transport`` replaces the UDP transport the server would bind, and ``rewrite_peer``
    rewrites the client's QP info before connecting (both: a run through a relay).
    """
    listener = _listen(bind, tcp_port)
    try:
        if ready is not None:
            ready(listener.getsockname()[1])
        conn, _ = listener.accept()
    finally:
        listener.close()
    udp_host = conn.getsockname()[0] if bind in ("", DEFAULT_BIND) else bind
    backend = transport or UdpTransport(host=udp_host, port=udp_port)
    with conn, sdr.Context(backend=backend) as ctx:
        request = _recv_within(conn, timeout, "request")
        try:
            params = WriteBwParams(**request["params"])
            attr = params.attr()
        except (TypeError, KeyError, ConfigError) as exc:
            send_obj(conn, {"error": str(exc)})
            raise RemoteProtocolError(f"bad write-bw request: {exc}") from exc
        idle_limit = params.timeout if timeout is None else timeout
        qp = ctx.create_qp(attr)
        info = request["info"] if rewrite_peer is None else rewrite_peer(request["info"])
        qp.connect(info.encode())
        send_obj(conn, {"info": qp.info().decode()})
        depth = max(1, min(params.inflight, attr.max_messages))
        ring = np.zeros((depth, max(params.size, 1)), dtype=np.uint8)
        regions = [ctx.register(ring[i]) for i in range(depth)]
        expected = pattern(params.size) if params.verify else None
        res = WriteBwResult("server", params.size, params.iterations)
        ticker = IntervalReporter(params.size, interval, on_interval)
        stamps = Stamps()
        if params.scheme:
            rqp = reliable_qp(qp, params.scheme, params.rtt, idle_limit)
            base = qp.counters()["packets_accepted"]

            def on_round(now: float) -> None:
                if ticker.start is None and qp.counters()["packets_accepted"] > base:
                    ticker.begin(now)  # the first packet: when the run started
                ticker.poll(now, len(stamps))

            def on_done(now: float, slot: int) -> None:
                stamps.append(now)
                if expected is not None and not np.array_equal(ring[slot], expected):
                    res.mismatched += 1

            receive_all(rqp, regions, params.size, params.iterations, on_done, on_round)
            return _finish_server(
                conn, qp, res, ticker, stamps, ticker.start, idle_limit, counters(rqp)
            )
        pending = [
            qp.post_recv(regions[i], 0, params.size) for i in range(min(depth, params.iterations))
        ]
        posted, start = len(pending), None
        last_change = ctx.now()
        base = qp.counters()["packets_accepted"]
        while pending:
            work = ctx.progress()
            now = ctx.now()
            if start is None and qp.counters()["packets_accepted"] > base:
                start = now
                ticker.begin(start)
            ticker.poll(now, len(stamps))  # before stamping at ``now``: those are the next row's
            head = pending[0]
            if head.record.arrived:
                stamps.append(now)
                slot = len(stamps) - 1
                if expected is not None and not np.array_equal(ring[slot % depth], expected):
                    res.mismatched += 1
                head.complete()
                pending.pop(0)
                if posted < params.iterations:
                    region = regions[posted % depth]
                    pending.append(qp.post_recv(region, 0, params.size))
                    posted += 1
                last_change = now
            elif work:
                last_change = now
            elif now - last_change > idle_limit:
                break  # the rest is lost
            else:
                ctx.transport.wait(0.0005)
        return _finish_server(conn, qp, res, ticker, stamps, start, idle_limit)


def _finish_server(
    conn: socket.socket,
    qp: QP,
    res: WriteBwResult,
    ticker: IntervalReporter,
    stamps: Stamps,
    start: float | None,
    idle_limit: float,
    extra: dict[str, int] | None = None,
) -> tuple[WriteBwResult, WriteBwResult]:
    """Summarise the server's run, trade results with the client."""
    now = qp.ctx.now()
    _summarise(res, stamps, now if start is None else start)
    ticker.finish(stamps[-1] if stamps else now, len(stamps))
    res.intervals = ticker.rows
    res.counters = {**qp.counters(), **_datapath_stats(qp), **(extra or {})}
    client_reply = _recv_within(conn, idle_limit + 30, "result")
    client = WriteBwResult.from_dict(client_reply["result"])
    send_obj(conn, {"result": res.as_dict()})
    return res, client


def run_client(
    server: str,
    params: WriteBwParams,
    tcp_port: int = DEFAULT_TCP_PORT,
    bind: str | None = None,
    udp_port: int = 0,
    interval: float | None = None,
    on_interval: Callable[[dict], None] | None = None,
    transport: UdpTransport | None = None,
    rewrite_peer: Callable[[str], str] | None = None,
) -> tuple[WriteBwResult, WriteBwResult]:
    """Run against a server; returns (client result, server result). With ``interval``
    (seconds), per-interval rows of the client's completions go to ``on_interval``;
    ``transport`` and ``rewrite_peer`` as for :func:`run_server`."""
    attr = params.attr()
    bind = bind or source_address_for(server)
    try:
        conn = socket.create_connection((server, tcp_port), timeout=params.timeout + 30)
    except OSError as exc:
        raise TransportError(f"cannot reach write-bw server {server}:{tcp_port}: {exc}") from exc
    backend = transport or UdpTransport(host=bind, port=udp_port)
    with conn, sdr.Context(backend=backend) as ctx:
        qp = ctx.create_qp(attr)
        send_obj(conn, {"params": asdict(params), "info": qp.info().decode()})
        reply = recv_obj(conn)
        if "error" in reply:
            raise ConfigError(f"server refused the parameters: {reply['error']}")
        info = reply["info"] if rewrite_peer is None else rewrite_peer(reply["info"])
        qp.connect(info.encode())
        data = pattern(params.size) if params.size else np.zeros(1, dtype=np.uint8)
        region = ctx.register(data)
        depth = max(1, min(params.inflight, attr.max_messages))
        res = WriteBwResult("client", params.size, params.iterations)
        outstanding: list[Any] = []
        stamps = Stamps()
        posted = 0
        start = ctx.now()
        ticker = IntervalReporter(params.size, interval, on_interval)
        ticker.begin(start)
        extra: dict[str, int] = {}
        if params.scheme:
            rqp = reliable_qp(qp, params.scheme, params.rtt, params.timeout)
            write_all(
                rqp,
                region,
                params.size,
                params.iterations,
                depth,
                stamps.append,
                lambda now: ticker.poll(now, len(stamps)),
            )
            extra = counters(rqp)
            posted = params.iterations  # the loop below has nothing to do
        while posted < params.iterations or outstanding:
            while posted < params.iterations and len(outstanding) < depth:
                outstanding.append(qp.post_send(region, 0, params.size))
                posted += 1
            if ctx.progress() == 0:
                ctx.transport.wait(0.0005)
            now = ctx.now()
            ticker.poll(now, len(stamps))  # before stamping at ``now``: those are the next row's
            while outstanding and outstanding[0].record.done:
                outstanding.pop(0)
                stamps.append(now)
            if outstanding and outstanding[0].record.error is not None:
                raise outstanding[0].record.error
            if ctx.now() - (stamps[-1] if stamps else start) > params.timeout:
                break
        _summarise(res, stamps, start)
        ticker.finish(stamps[-1] if stamps else ctx.now(), len(stamps))
        res.intervals = ticker.rows
        res.counters = {**qp.counters(), **_datapath_stats(qp), **extra}
        end = time.monotonic() + 0.2
        while time.monotonic() < end:  # answer late CTSs so the server is not left waiting
            if ctx.progress() == 0:
                ctx.transport.wait(0.001)
        send_obj(conn, {"result": res.as_dict()})
        server_res = WriteBwResult.from_dict(recv_obj(conn)["result"])
        return res, server_res
