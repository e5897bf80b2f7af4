"""The receiving side of a file transfer: :func:`serve_file`."""

from __future__ import annotations

import json
import mmap
import os
import socket
import time
import warnings
from collections.abc import Callable
from typing import Any, BinaryIO

import sdr
from sdr.auth import check_secret
from sdr.backends import oob
from sdr.backends.udp import UdpTransport
from sdr.backends.udp.sockets import ReceiveBufferWarning
from sdr.backends.udp.transport import MAX_PATHS
from sdr.cli.transfer_digest import file_digest, hasher, peer_digest
from sdr.cli.transfer_options import Progress
from sdr.cli.transfer_output import (
    check_out,
    check_space,
    create_partial,
    partial_path,
    publish,
)
from sdr.cli.transfer_peer import WATCH_S, peer_error, tell_peer, watch
from sdr.cli.transfer_pieces import PieceWindow, map_file, with_arrived
from sdr.cli.transfer_prefault import PrefaultAhead
from sdr.cli.transfer_relay import RelaySide, load_side
from sdr.cli.transfer_ring import ReceiveRing, ring_slots
from sdr.cli.transfer_setup import Request, expect, new_challenge, parse_hello, reply
from sdr.cli.transfer_tail import policies
from sdr.errors import ConfigError, MessageFailed, RemoteProtocolError, SDRError
from sdr.errors import TimeoutError as SDRTimeoutError
from sdr.runtime import ReliableQP, drive
from sdr.units import parse_size

__all__ = ["DEFAULT_MAX_SIZE", "partial_path", "serve_file"]

DEFAULT_MAX_SIZE = "64GiB"
"""The largest file a receiver accepts unless told otherwise (``--max-size``)."""


def check_max_size(max_size: str | int) -> int:
    """``max_size`` in bytes (units accepted); ConfigError unless it is a size >= 0."""
    try:
        value = parse_size(max_size)
    except (SDRError, ValueError, TypeError) as exc:
        raise ConfigError(f"--max-size must be a size such as 64GiB, got {max_size!r}") from exc
    if value < 0:
        raise ConfigError(f"--max-size must be >= 0, got {max_size!r}")
    return value


def serve_file(
    out: str,
    bind: str = "0.0.0.0",
    port: int = oob.DEFAULT_PORT,
    progress: Progress | None = None,
    ready: Callable[[int], None] | None = None,
    secret: str | None = None,
    timeout: float = 300.0,
    keep_partial: bool = False,
    relay: str | None = None,
    data_port: int = 0,
    max_size: str | int = DEFAULT_MAX_SIZE,
) -> dict[str, Any]:
    """Receive one file into ``out`` from a :func:`~sdr.cli.transfer_send.send_file` peer;
    returns a report.

    The data lands in :func:`partial_path` ``(out)`` (created new: nothing there may
    exist, :mod:`~sdr.cli.transfer_output`), renamed to ``out`` only once its digest
    (:mod:`~sdr.cli.transfer_digest`, the sender's choice) matches the sender's; on
    failure that file is removed (kept, when ``keep_partial``) and ``out`` is left as
    it was. The set-up (:mod:`~sdr.cli.transfer_setup`) must
    be complete within ``timeout`` s of the sender's connection; a file larger than
    ``max_size`` bytes (units accepted) or than the free disk space is refused before
    anything is created. ``progress`` counts verified bytes only. A sender that exits or
    is killed is reported within about a second. With ``relay`` (a map file of ``sdr
    emulate relay``) the UDP traffic crosses the relay as its side B. ``data_port``:
    receive the UDP data on ports ``data_port`` ... ``data_port + paths - 1`` (``paths``
    is the sender's); 0 (default) takes free ports.
    """
    if isinstance(data_port, bool) or not isinstance(data_port, int) or not 0 <= data_port < 65536:
        raise ConfigError(f"--data-port must be in [0, 65535], got {data_port!r}")
    key = check_secret(secret)
    limit = check_max_size(max_size)
    check_out(out)
    side = load_side(relay, "b", timeout) if relay else None
    srv = oob.listen(bind, port)
    try:
        if ready:
            ready(srv.getsockname()[1])
        srv.settimeout(timeout)
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            raise SDRTimeoutError(f"no sender connected within {timeout:g} s") from None
    finally:
        srv.close()
    try:
        conn.settimeout(None)
        deadline = time.monotonic() + timeout  # the whole set-up, however the bytes come
        challenge = new_challenge()
        oob.send_obj(conn, {"challenge": challenge})
        request = parse_hello(
            expect(conn, deadline, timeout, "complete set-up from the sender"),
            challenge,
            key,
            limit,
        )
        oob.keepalive(conn)
        check_space(out, request.size)
        info = side.rewrite(request.info, key) if side else request.info
        return _receive(conn, out, request, progress, key, timeout, info, keep_partial, side,
                        data_port)  # fmt: skip
    except (SDRError, OSError) as exc:
        tell_peer(conn, exc)
        raise
    finally:
        conn.close()


def _receive(
    conn: socket.socket,
    out: str,
    request: Request,
    progress: Progress | None,
    secret: bytes | None,
    timeout: float,
    info: str,
    keep_partial: bool,
    side: RelaySide | None,
    data_port: int = 0,
) -> dict[str, Any]:
    """Create the partial file, receive into it, rename it once verified; on failure it
    is removed (kept with ``keep_partial``), whatever failed."""
    fh = create_partial(out, request.size)
    partial = partial_path(out)
    report = None
    try:
        with fh:
            slots = _ring_slots(request)
            buf = None if slots else map_file(fh, request.size, write=True)
            try:
                report = _into(conn, out, fh, buf, slots, request, progress, secret, timeout,
                               info, keep_partial, side, data_port)  # fmt: skip
            finally:
                _close_map(buf)
    finally:
        if report is None and not keep_partial:
            try:
                os.remove(partial)
            except FileNotFoundError:
                pass  # renamed to out already (the verdict could not be sent)
    assert report is not None  # every failure above raised
    return report


def _ring_slots(request: Request) -> int:
    """Slots of the receiver's ring for ``request`` (0: receive into the file's mapping)."""
    attr, config = request.attr, request.config
    return ring_slots(
        request.size,
        attr.max_message_size,
        2 * config.max_in_flight,
        attr.rate_limit or config.link_rate,
        config.rtt,
    )


def _into(
    conn: socket.socket,
    out: str,
    fh: BinaryIO,
    buf: Any,
    slots: int,
    request: Request,
    progress: Progress | None,
    secret: bytes | None,
    timeout: float,
    info: str,
    keep_partial: bool,
    side: RelaySide | None,
    data_port: int,
) -> dict[str, Any]:
    """The transfer itself, through a ring of ``slots`` buffers written to ``fh``
    (:mod:`~sdr.cli.transfer_ring`), or with no slots into ``buf`` (``fh`` mapped): reply
    to the sender, receive every piece, compare the digests; publishes the file as
    ``out`` when they match."""
    size, attr = request.size, request.attr
    config = request.config.replace(global_timeout=timeout)  # our --timeout: no progress
    partial = partial_path(out)
    host = conn.getsockname()[0]
    # no prefault of the whole output (its size in memory up front): each piece's pages
    # are faulted in by a thread as it is posted (below), so memory follows the window,
    # the first packets of a piece do not page-fault (at these rates that shows as
    # loss), and posting does not wait for it (that held the sender at the start)
    transport = (
        side.transport(prefault=False)
        if side
        else UdpTransport(host, data_port, paths=_paths_of(info), prefault=False)
    )
    ctx = sdr.Context(transport, secret=secret)
    ring = None
    if slots:
        digest = hasher(request.digest) if request.digest else None
        ring = ReceiveRing(fh.fileno(), attr.max_message_size, slots, digest)
    ahead = PrefaultAhead(ring.buffer if ring else buf)
    if ring:
        ring.fresh = ahead.add  # each slot's pages populated once, off the progress loop
    try:
        qp = ctx.create_qp(attr)
        qp.connect(info.encode())
        oob.send_obj(conn, reply(qp.info().decode(), request.nonce, secret))
        tail = request.tail
        rqp = ReliableQP(
            qp, config, adaptive=policies(config, size, attr.max_message_size, tail)[1]
        )
        mr = ctx.register(ring.buffer if ring else buf) if size else None

        def post_recv(off: int, n: int) -> Any:
            return rqp.post_recv(mr, off, n)  # type: ignore[arg-type]

        def post(off: int, n: int) -> Any:
            if ring:
                return ring.post(off, n, post_recv)
            ahead.add(off, n)
            return post_recv(off, n)

        window = PieceWindow(
            post,
            size,
            attr.max_message_size,
            2 * rqp.max_in_flight,
            lambda: rqp.finished_count,
            tail.nbytes if tail else 0,
            room=ring.room if ring else None,
        )

        def finished() -> bool:
            if ring:
                ring.pump()
            return window.advance(progress)

        try:
            done = watch(rqp, finished, timeout, f"receiving {out}", conn, "sender")
            if isinstance(done, dict) and "done" in done:
                # the sender had every ACK before our last progress() call reported it
                drive([rqp], finished, WATCH_S, f"receiving {out}")
            elif done is not None:
                raise peer_error(done, "sender")
            window.check()
        except SDRError as exc:
            if ring and keep_partial:
                ring.salvage()
            raise with_arrived(_kept(exc, partial, keep_partial), window) from exc
        end = time.monotonic()
        # keep acknowledging until the sender says it is done (a last ACK may be lost)
        if done is None:
            done = watch(rqp, lambda: False, timeout, "the sender's verdict", conn, "sender")
        if not isinstance(done, dict) or "done" not in done:
            raise peer_error(done, "sender")
        algorithm, want = peer_digest(done)
        digest = _digest(ring, buf, fh, size, algorithm, request.digest)
        ok = digest == want
        if ok:
            publish(fh, out)
        oob.send_obj(conn, {"ok": ok, "digest": digest, "end": end})
        if not ok:
            raise _kept(
                MessageFailed(f"{out}: {algorithm} digest {digest} differs from the sender's"),
                partial,
                keep_partial,
            )
        drops = transport.socket_drops() if isinstance(transport, UdpTransport) else None
        if drops:
            warnings.warn(
                f"the receiving socket dropped {drops} datagrams: its buffer was full because "
                "this process did not keep up with the sender's rate (the sender repaired "
                "them; the link did not lose them); on a host this busy use a lower --rate "
                "or --congestion bbr, which slows down for them",
                ReceiveBufferWarning,
                stacklevel=2,
            )
        return {
            "bytes": size,
            "end": end,
            "digest_algorithm": algorithm,
            "digest": digest,
            "scheme": config.scheme,
            "tail": tail.as_dict() if tail else None,
            "ring_slots": slots,
            "counters": qp.counters(),
            "stats": window.stats,
            "socket_drops": drops,
        }
    finally:
        if ring:
            ring.close()
        ahead.close()
        ctx.close()
        if ring:
            _close_map(ring.buffer)


def _digest(
    ring: ReceiveRing | None, buf: Any, fh: BinaryIO, size: int, algorithm: str,
    announced: str | None,
) -> str | None:  # fmt: skip
    """The received file's digest by ``algorithm`` (the sender's closing message's): the
    ring's, hashed as it wrote, when the hello ``announced`` that algorithm; else the
    file hashed whole. ProtocolError when the sender closes with another algorithm than
    it announced."""
    if announced is not None and announced != algorithm:
        raise RemoteProtocolError(
            f"the sender closes with a {algorithm} digest; its hello announced {announced}"
        )
    if ring is not None:
        written = ring.finish()
        if announced is not None:
            return written
        with mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as whole:
            return file_digest(whole, algorithm)
    if isinstance(buf, mmap.mmap):
        buf.flush()
    return file_digest(buf, algorithm)


def _close_map(buf: Any) -> None:
    """Close ``buf`` when it is a mapping that nothing points into any more."""
    if isinstance(buf, mmap.mmap):
        try:
            buf.close()
        except BufferError:
            pass  # a registered view still points at it: closed when collected


def _kept(exc: SDRError, partial: str, keep_partial: bool) -> SDRError:
    """``exc``, saying where the partial data was kept (when it is)."""
    if not keep_partial:
        return exc
    return type(exc)(f"{exc}; partial data kept in {partial}")


def _paths_of(info: str) -> int:
    """As many data ports as the sender's QP info lists (its ``connect`` checks them)."""
    try:
        ports = json.loads(info)["transport"].get("ports", [0])
    except (ValueError, KeyError, TypeError, AttributeError):
        return 1
    return len(ports) if isinstance(ports, list) and 1 <= len(ports) <= MAX_PATHS else 1
