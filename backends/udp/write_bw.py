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

import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

import sdr
from backends.oob import DEFAULT_PORT, recv_obj, send_obj
from backends.udp.roce import ROCE_PORT
from backends.udp.transport import UdpTransport
from sdr.errors import ConfigError, ProtocolError, TransportError

__all__ = ["WriteBwParams", "WriteBwResult", "run_server", "run_client", "source_address_for"]

DEFAULT_TCP_PORT = DEFAULT_PORT  # perftest's default


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

    def attr(self) -> sdr.QPAttr:
        """QP attributes for these parameters (chunk size is clamped to the message)."""
        chunk = max(self.mtu, min(self.chunk_size, -(-self.size // self.mtu) * self.mtu))
        chunk -= chunk % self.mtu
        return sdr.QPAttr(
            mtu=self.mtu,
            chunk_size=chunk,
            max_message_size=max(self.size, self.mtu),
            max_messages=max(3, min(1023, self.inflight)) | 1,  # odd: sdr.id_reuse
            channels=self.channels,
            rate_limit=self.rate_limit,
        )


@dataclass
class WriteBwResult:
    """One side's view of a run. Rates in bits/s and messages/s."""

    role: str
    size: int
    iterations: int
    completed: int = 0
    bytes: int = 0
    seconds: float = 0.0
    bw_peak: float = 0.0
    bw_average: float = 0.0
    msg_rate: float = 0.0
    mismatched: int = 0
    counters: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def _summarise(res: WriteBwResult, stamps: list[float], start: float) -> WriteBwResult:
    res.completed = len(stamps)
    res.bytes = res.completed * res.size
    if stamps:
        res.seconds = max(stamps[-1] - start, 1e-9)
        res.bw_average = res.bytes * 8 / res.seconds
        res.msg_rate = res.completed / res.seconds
        # peak over windows of a few messages: single gaps are quantised by the poll loop
        times = np.asarray([start, *stamps])
        w = max(1, min(16, len(stamps) // 4))
        spans = times[w:] - times[:-w]
        res.bw_peak = max(res.bw_average, w * res.size * 8 / max(float(spans.min()), 1e-9))
    return res


def run_server(
    bind: str = "127.0.0.1",
    udp_port: int = ROCE_PORT,
    tcp_port: int = DEFAULT_TCP_PORT,
    ready: Any = None,
) -> tuple[WriteBwResult, WriteBwResult]:
    """Serve one client run; returns (server result, client result). ``ready`` is called
    with the bound TCP port once the server listens (tests use port 0)."""
    listener = socket.create_server((bind, tcp_port))
    try:
        if ready is not None:
            ready(listener.getsockname()[1])
        conn, _ = listener.accept()
    finally:
        listener.close()
    with conn, sdr.Context(backend=UdpTransport(host=bind, port=udp_port)) as ctx:
        request = recv_obj(conn)
        try:
            params = WriteBwParams(**request["params"])
            attr = params.attr()
        except (TypeError, KeyError, ConfigError) as exc:
            send_obj(conn, {"error": str(exc)})
            raise ProtocolError(f"bad write-bw request: {exc}") from exc
        qp = ctx.create_qp(attr)
        qp.connect(request["info"].encode())
        send_obj(conn, {"info": qp.info().decode()})
        depth = max(1, min(params.inflight, attr.max_messages))
        ring = np.zeros((depth, max(params.size, 1)), dtype=np.uint8)
        regions = [ctx.register(ring[i]) for i in range(depth)]
        expected = pattern(params.size) if params.verify else None
        res = WriteBwResult("server", params.size, params.iterations)
        pending = [
            qp.post_recv(regions[i], 0, params.size) for i in range(min(depth, params.iterations))
        ]
        posted, stamps, start = len(pending), [], None
        last_change = ctx.now()
        base = qp.counters()["packets_accepted"]
        while pending:
            work = ctx.progress()
            now = ctx.now()
            if start is None and qp.counters()["packets_accepted"] > base:
                start = now
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
            elif now - last_change > params.timeout:
                break  # the rest is lost
            else:
                ctx.transport.wait(0.0005)
        _summarise(res, stamps, start if start is not None else ctx.now())
        res.counters = {**qp.counters(), **qp.transport_qp.stats}
        client = WriteBwResult(**recv_obj(conn)["result"])
        send_obj(conn, {"result": res.as_dict()})
        return res, client


def run_client(
    server: str,
    params: WriteBwParams,
    tcp_port: int = DEFAULT_TCP_PORT,
    bind: str | None = None,
    udp_port: int = 0,
) -> tuple[WriteBwResult, WriteBwResult]:
    """Run against a server; returns (client result, server result)."""
    attr = params.attr()
    bind = bind or source_address_for(server)
    try:
        conn = socket.create_connection((server, tcp_port), timeout=params.timeout + 30)
    except OSError as exc:
        raise TransportError(f"cannot reach write-bw server {server}:{tcp_port}: {exc}") from exc
    with conn, sdr.Context(backend=UdpTransport(host=bind, port=udp_port)) as ctx:
        qp = ctx.create_qp(attr)
        send_obj(conn, {"params": asdict(params), "info": qp.info().decode()})
        reply = recv_obj(conn)
        if "error" in reply:
            raise ConfigError(f"server refused the parameters: {reply['error']}")
        qp.connect(reply["info"].encode())
        data = pattern(params.size) if params.size else np.zeros(1, dtype=np.uint8)
        region = ctx.register(data)
        depth = max(1, min(params.inflight, attr.max_messages))
        res = WriteBwResult("client", params.size, params.iterations)
        outstanding: list[Any] = []
        stamps: list[float] = []
        posted = 0
        start = ctx.now()
        while posted < params.iterations or outstanding:
            while posted < params.iterations and len(outstanding) < depth:
                outstanding.append(qp.post_send(region, 0, params.size))
                posted += 1
            if ctx.progress() == 0:
                ctx.transport.wait(0.0005)
            while outstanding and outstanding[0].record.done:
                outstanding.pop(0)
                stamps.append(ctx.now())
            if outstanding and outstanding[0].record.error is not None:
                raise outstanding[0].record.error
            if ctx.now() - (stamps[-1] if stamps else start) > params.timeout:
                break
        _summarise(res, stamps, start)
        res.counters = {**qp.counters(), **qp.transport_qp.stats}
        end = time.monotonic() + 0.2
        while time.monotonic() < end:  # answer late CTSs so the server is not left waiting
            if ctx.progress() == 0:
                ctx.transport.wait(0.001)
        send_obj(conn, {"result": res.as_dict()})
        server_res = WriteBwResult(**recv_obj(conn)["result"])
        return res, server_res
