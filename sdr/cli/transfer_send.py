"""The sending side of a file transfer: :func:`send_file`."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import attrs

import sdr
from sdr.backends import oob
from sdr.backends.udp import UdpTransport
from sdr.cli.transfer_digest import file_digest
from sdr.cli.transfer_options import Progress, TransferOptions, plan, qp_attr, validate_send
from sdr.cli.transfer_peer import peer_error, tell_peer, watch
from sdr.cli.transfer_pieces import PieceWindow, map_file, with_arrived
from sdr.cli.transfer_relay import RelaySide, load_side
from sdr.cli.transfer_setup import expect, hello, parse_challenge, parse_reply
from sdr.cli.transfer_tail import Tail, file_tail, policies
from sdr.errors import ConfigError, MessageFailed, RemoteProtocolError, SDRError
from sdr.reliability import ReliabilityConfig
from sdr.reliability.registry import create_scheme
from sdr.runtime import ReliableQP

__all__ = ["send_file"]


def _source_address(peer: str) -> str:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((peer, 9))
        return str(probe.getsockname()[0])
    finally:
        probe.close()


def send_file(
    path: str,
    host: str,
    port: int = oob.DEFAULT_PORT,
    opts: TransferOptions | None = None,
    progress: Progress | None = None,
    waiting: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Send ``path`` to a receiver running :func:`~sdr.cli.transfer_receive.serve_file` at
    ``host:port``.

    Everything is validated before the network is touched (ConfigError, OSError). The
    receiver is awaited up to ``opts.timeout`` s (``waiting`` is called once if it is not
    listening yet), the set-up exchange (:mod:`~sdr.cli.transfer_setup`) must then be
    complete within ``opts.timeout`` s (a receiver that stops answering is an error, not
    a hang), and the transfer gets up to ``opts.timeout`` s. ``progress``
    counts verified (acknowledged) bytes only. A receiver that exits or is killed is
    reported within about a second, with how much of the file it had verified. With
    ``opts.relay`` (a map file of ``sdr emulate relay``) the UDP traffic crosses the relay
    as its side A.
    """
    opts = opts or TransferOptions()
    secret, size = validate_send(path, opts)
    config, selection = plan(opts, size)
    attr = qp_attr(opts, config)
    tail = file_tail(opts, config, selection is not None, size, attr)
    create_scheme(config.resolved(attr.chunk_size, attr.rate_limit))  # a bad scheme fails here
    side = load_side(opts.relay, "a", opts.timeout) if opts.relay else None
    fh = open(path, "rb")  # noqa: SIM115 - closed below
    buf = map_file(fh, size, write=False)
    ctx: sdr.Context | None = None
    sock: socket.socket | None = None
    try:
        sock = oob.connect(host, port, opts.timeout, waiting)
        if side and opts.paths > 1:
            raise ConfigError("--paths needs a direct link: a relay carries one path")
        transport = side.transport(prefault=False) if side else _transport(host, opts.paths)
        ctx = sdr.Context(transport, secret=secret)
        return _send(sock, ctx, path, size, buf, opts, attr, config, selection, tail, progress,
                     side)  # fmt: skip
    except (SDRError, OSError) as exc:
        if sock is not None:
            tell_peer(sock, exc)
        raise
    finally:
        if ctx is not None:
            ctx.close()
        if sock is not None:
            sock.close()
        fh.close()


def _send(
    sock: socket.socket,
    ctx: sdr.Context,
    path: str,
    size: int,
    buf: Any,
    opts: TransferOptions,
    attr: sdr.QPAttr,
    config: ReliabilityConfig,
    selection: Any,
    tail: Tail | None,
    progress: Progress | None,
    side: RelaySide | None,
) -> dict[str, Any]:
    deadline = time.monotonic() + opts.timeout  # the whole set-up, however the bytes come
    what = "answer from the receiver"
    challenge = parse_challenge(expect(sock, deadline, opts.timeout, what))
    qp = ctx.create_qp(attr)
    request = hello(os.path.basename(path), size, attr, _config_dict(config),
                    qp.info().decode(), challenge, ctx.secret, tail=tail,
                    digest=opts.digest)  # fmt: skip
    oob.send_obj(sock, request)
    answer = expect(sock, deadline, opts.timeout, what)
    theirs = parse_reply(answer, request.get("nonce"), ctx.secret)
    info = side.rewrite(theirs, ctx.secret) if side else theirs
    qp.connect(info.encode())
    rqp = ReliableQP(qp, config, adaptive=policies(config, size, attr.max_message_size, tail)[0])
    mr = ctx.register(buf) if size else None
    start, clock_start = time.monotonic(), ctx.now()  # the selector's moves use ctx's clock
    window = PieceWindow(
        lambda off, n: rqp.write(mr, off, n),  # type: ignore[arg-type]
        size,
        attr.max_message_size,
        2 * rqp.max_in_flight,
        lambda: rqp.finished_count,
        tail.nbytes if tail else 0,
    )

    def finished() -> bool:
        return window.advance(progress)

    try:
        message = watch(rqp, finished, opts.timeout, f"sending {path}", sock, "receiver")
        if message is not None:
            raise peer_error(message, "receiver")
        window.check()
    except SDRError as exc:
        raise with_arrived(exc, window) from exc
    seconds = time.monotonic() - start
    hashing = time.monotonic()
    digest = file_digest(buf, opts.digest)
    oob.send_obj(sock, {"done": True, "digest_algorithm": opts.digest, "digest": digest})
    # the receiver hashes its copy first: as long as we took, and then the usual timeout
    wait = opts.timeout + time.monotonic() - hashing
    verdict = expect(sock, time.monotonic() + wait, wait, "verdict from the receiver")
    if not isinstance(verdict, dict) or not verdict.get("ok"):
        if isinstance(verdict, dict) and "error" in verdict:
            raise peer_error(verdict, "receiver")
        raise MessageFailed(f"receiver reports a bad file: {verdict!r:.200}")
    recv_end = verdict.get("end")
    if isinstance(recv_end, bool) or not isinstance(recv_end, int | float):
        raise RemoteProtocolError(f"the receiver's verdict lacks its end time: {verdict!r:.200}")
    counters = qp.counters()
    return {
        "bytes": size,
        "seconds": seconds,
        "start": start,
        "recv_end": recv_end,
        "scheme": config.scheme,
        "tail": tail.as_dict() if tail else None,
        "config": _config_dict(config),
        "predicted_mean_s": selection.mean_s if selection else None,
        "wire_bytes": counters["bytes_sent"],
        "packets_sent": counters["packets_sent"],
        "paths": len(getattr(qp.ctx.transport, "ports", (0,))),
        "multipath": _multipath_report(rqp, clock_start),
        "stats": window.stats,
        "digest_algorithm": opts.digest,
        "digest": digest,
    }


def _multipath_report(rqp: ReliableQP, start: float) -> dict[str, Any] | None:
    """Per path (channel): bytes sent, acknowledged and lost, smoothed RTT, loss, active;
    and the selector's moves as (seconds since the first write, path, active)."""
    paths = rqp.connection.paths
    if paths is None:
        return None
    selector = paths.selector
    return {
        "paths": [
            {
                "sent": s.sent,
                "acked": s.acked,
                "lost": s.lost,
                "srtt_s": s.srtt,
                "loss": s.loss,
                "active": s.active,
                "alive": s.alive,
            }
            for s in selector.stats
        ],
        "moves": [(t - start, path, active) for t, path, active in selector.moves],
        "liveness": [(t - start, path, alive) for t, path, alive in selector.liveness],
    }


def _config_dict(config: ReliabilityConfig) -> dict[str, Any]:
    return {k: v for k, v in attrs.asdict(config).items() if v is not None}


def _transport(host: str, paths: int) -> UdpTransport:
    # No prefault: the sender only reads its file, and faulting a copy-on-write mapping in
    # for writing would copy every page of it (the file's size in private memory).
    return UdpTransport(host=_source_address(host), port=0, paths=paths, prefault=False)
