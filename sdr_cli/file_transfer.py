"""A real file transfer over SDR: UDP backend (software RoCEv2), a reliability scheme from
config or ``auto``, zero-copy into a memory-mapped output file, end-to-end SHA-256.

    receiver: serve_file("out.bin", bind="10.0.0.2")
    sender:   send_file("in.bin", "10.0.0.2", TransferOptions(scheme="auto", loss=1e-3))

The file moves as reliable messages of ``message_size`` bytes, each verified by the
scheme (per-chunk checksums on the control path); the whole file is hashed on both sides
after the transfer and compared over the out-of-band TCP connection.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import select
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import sdr
from backends import oob
from backends.udp import UdpTransport
from sdr.errors import MessageFailed, ProtocolError, SDRError
from sdr.reliability import ReliabilityConfig, ReliableQP, load_config
from sdr.reliability.handles import drive
from sdr.units import parse_rate, parse_size, parse_time

__all__ = ["TransferOptions", "send_file", "serve_file", "Progress"]

Progress = Callable[[int, int], None]
"""Called with (bytes done, bytes total) as the transfer advances."""


@dataclass
class TransferOptions:
    """How to move a file. Sizes, rates and times accept units."""

    scheme: str = "auto"
    rate: str | float = "1Gbit/s"
    rtt: str | float = "25ms"
    loss: float = 1e-3
    message_size: str | int = "8MiB"
    mtu: str | int = 8192
    chunk_size: str | int = "64KiB"
    channels: int = 2
    alpha: float = 2.0
    k: int | None = None
    m: int | None = None
    config: str | None = None
    secret: str | None = None
    timeout: float = 300.0
    extra: dict[str, Any] = field(default_factory=dict)


def plan(opts: TransferOptions, size: int) -> tuple[ReliabilityConfig, Any]:
    """The concrete reliability config for this transfer (``auto`` goes through the
    simulator's selector) and the selection that chose it (or None)."""
    base = load_config(opts.config) if opts.config else ReliabilityConfig()
    changes: dict[str, Any] = {
        "scheme": opts.scheme if not opts.config else base.scheme,
        "rtt": parse_time(opts.rtt),
        "link_rate": parse_rate(opts.rate),
        "alpha": opts.alpha,
        "chunk_size": parse_size(opts.chunk_size),
    }
    if opts.k is not None and opts.m is not None:
        changes.update(k=opts.k, m=opts.m)
    config = base.replace(**changes, **opts.extra)
    if config.scheme != "auto":
        return config, None
    from simulator.auto import resolve_auto  # the selector loads SciPy: only when needed

    piece = min(parse_size(opts.message_size), max(size, 1))
    return resolve_auto(
        config,
        size_bytes=piece,
        drop=opts.loss,
        mtu=parse_size(opts.mtu),
        chunk_sizes=(int(config.chunk_size),),
    )


def _attr(opts: TransferOptions, config: ReliabilityConfig) -> sdr.QPAttr:
    message = parse_size(opts.message_size)
    return sdr.QPAttr(
        mtu=opts.mtu,
        chunk_size=config.chunk_size,
        max_message_size=message,
        max_messages=63,  # odd: see sdr.id_reuse
        channels=opts.channels,
        rate_limit=opts.rate,
    )


def _pieces(size: int, message: int) -> list[tuple[int, int]]:
    return [(off, min(message, size - off)) for off in range(0, size, message)]


def _source_address(peer: str) -> str:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((peer, 9))
        return str(probe.getsockname()[0])
    finally:
        probe.close()


def _map(path: str, size: int, write: bool) -> tuple[Any, Any]:
    fh = open(path, "r+b" if write else "rb")  # noqa: SIM115 - closed by the caller
    if write:
        fh.truncate(size)
    if size == 0:
        return fh, bytearray(0)
    access = mmap.ACCESS_WRITE if write else mmap.ACCESS_COPY  # COPY: writable, never saved
    return fh, mmap.mmap(fh.fileno(), size, access=access)


def _sha256(buffer: Any) -> str:
    return hashlib.sha256(memoryview(buffer)).hexdigest()


def _stats(handles: list[Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for handle in handles:
        for key, value in handle.stats.items():
            total[key] = total.get(key, 0) + value
    return total


def _arrived_bytes(qp: sdr.QP, done_bytes: int) -> int:
    chunk = qp.attr.chunk_size
    return done_bytes + sum(int(r.bitmap.chunks.sum()) * chunk for r in qp.core.recv.records())


def send_file(
    path: str,
    host: str,
    port: int = oob.DEFAULT_PORT,
    opts: TransferOptions | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:  # noqa: E501
    """Send ``path`` to a receiver running :func:`serve_file` at ``host:port``."""
    opts = opts or TransferOptions()
    size = os.path.getsize(path)
    config, selection = plan(opts, size)
    attr = _attr(opts, config)
    sock = oob.connect(host, port)
    fh, buf = _map(path, size, write=False)
    ctx = sdr.Context(UdpTransport(host=_source_address(host), port=0), secret=opts.secret)
    try:
        qp = ctx.create_qp(attr)
        oob.send_obj(
            sock,
            {
                "name": os.path.basename(path),
                "size": size,
                "message_size": attr.max_message_size,
                "attr": attr.as_dict(),
                "reliability": _config_dict(config),
                "qp": qp.info().decode(),
            },
        )
        reply = oob.recv_obj(sock)
        if "error" in reply:
            raise ProtocolError(f"receiver refused the transfer: {reply['error']}")
        qp.connect(reply["qp"].encode())
        rqp = ReliableQP(qp, config)
        mr = ctx.register(buf) if size else None
        start = time.monotonic()
        handles = [rqp.write(mr, off, n) for off, n in _pieces(size, attr.max_message_size)]  # type: ignore[arg-type]

        def finished() -> bool:
            if progress:
                progress(sum(h.length for h in handles if h.finished), size)
            return all(h.finished for h in handles)

        drive([rqp], finished, opts.timeout, f"sending {path}")
        seconds = time.monotonic() - start
        for h in handles:
            h._check()
        digest = _sha256(buf)
        oob.send_obj(sock, {"done": True, "sha256": digest})
        verdict = oob.recv_obj(sock)
        if not verdict.get("ok"):
            raise MessageFailed(f"receiver reports a bad file: {verdict}")
        counters = qp.counters()
        return {
            "bytes": size,
            "seconds": seconds,
            "start": start,
            "recv_end": verdict["end"],
            "scheme": config.scheme,
            "config": _config_dict(config),
            "predicted_mean_s": selection.mean_s if selection else None,
            "wire_bytes": counters["bytes_sent"],
            "packets_sent": counters["packets_sent"],
            "stats": _stats(handles),
            "sha256": digest,
        }
    finally:
        ctx.close()
        sock.close()
        fh.close()


def _config_dict(config: ReliabilityConfig) -> dict[str, Any]:
    return {k: v for k, v in asdict(config).items() if v is not None}


def serve_file(
    out: str,
    bind: str = "0.0.0.0",
    port: int = oob.DEFAULT_PORT,
    progress: Progress | None = None,
    ready: Callable[[int], None] | None = None,
    secret: str | None = None,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Receive one file into ``out`` from a :func:`send_file` peer; returns a report."""
    srv = oob.listen(bind, port)
    if ready:
        ready(srv.getsockname()[1])
    srv.settimeout(timeout)
    conn, _ = srv.accept()
    srv.close()
    try:
        hello = oob.recv_obj(conn)
        try:
            size = int(hello["size"])
            attr = sdr.QPAttr(**hello["attr"])
            config = ReliabilityConfig.from_mapping(hello["reliability"])
        except (KeyError, TypeError, ValueError, SDRError) as exc:
            oob.send_obj(conn, {"error": str(exc)})
            raise ProtocolError(f"bad transfer request: {exc}") from exc
        return _receive(conn, out, size, attr, config, progress, secret, timeout, hello)
    finally:
        conn.close()


def _receive(
    conn: socket.socket,
    out: str,
    size: int,
    attr: sdr.QPAttr,
    config: ReliabilityConfig,
    progress: Progress | None,
    secret: str | None,
    timeout: float,
    hello: dict[str, Any],
) -> dict[str, Any]:
    if not os.path.exists(out):
        open(out, "wb").close()
    fh, buf = _map(out, size, write=True)
    ctx = sdr.Context(UdpTransport(host=conn.getsockname()[0], port=0), secret=secret)
    try:
        qp = ctx.create_qp(attr)
        qp.connect(hello["qp"].encode())
        oob.send_obj(conn, {"qp": qp.info().decode()})
        rqp = ReliableQP(qp, config)
        mr = ctx.register(buf) if size else None
        handles = [rqp.post_recv(mr, off, n) for off, n in _pieces(size, attr.max_message_size)]  # type: ignore[arg-type]

        def finished() -> bool:
            if progress:
                done = sum(h.length for h in handles if h.finished)
                progress(min(size, _arrived_bytes(qp, done)), size)
            return all(h.finished for h in handles)

        drive([rqp], finished, timeout, f"receiving {out}")
        end = time.monotonic()
        for h in handles:
            h._check()
        # keep acknowledging until the sender says it is done (a last ACK may be lost)
        drive([rqp], lambda: bool(select.select([conn], [], [], 0)[0]), timeout, "sender")
        done = oob.recv_obj(conn)
        if isinstance(buf, mmap.mmap):
            buf.flush()
        digest = _sha256(buf)
        ok = digest == done.get("sha256")
        oob.send_obj(conn, {"ok": ok, "sha256": digest, "end": end})
        if not ok:
            raise MessageFailed(f"{out}: SHA-256 {digest} differs from the sender's")
        return {
            "bytes": size,
            "end": end,
            "sha256": digest,
            "scheme": config.scheme,
            "counters": qp.counters(),
            "stats": _stats(handles),
        }
    finally:
        ctx.close()
        if isinstance(buf, mmap.mmap):
            try:
                buf.close()
            except BufferError:
                pass  # a registered view still points at it: closed when collected
        fh.close()
