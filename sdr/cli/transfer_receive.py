"""The receiving side of a file transfer: :func:`serve_file`."""

from __future__ import annotations

import json
import mmap
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import sdr
from sdr import errors
from sdr.auth import check_secret
from sdr.backends import oob
from sdr.backends.udp import UdpTransport
from sdr.backends.udp.transport import MAX_PATHS
from sdr.cli.transfer_options import Progress
from sdr.cli.transfer_peer import WATCH_S, agree_secret, peer_error, tell_peer, watch
from sdr.cli.transfer_pieces import map_file, pieces, sha256, stats, verified, with_arrived
from sdr.cli.transfer_relay import RelaySide, load_side
from sdr.errors import ConfigError, MessageFailed, ProtocolError, SDRError
from sdr.reliability import ReliabilityConfig
from sdr.runtime import ReliableQP, drive

__all__ = ["partial_path", "serve_file"]


def partial_path(out: str) -> str:
    """Where :func:`serve_file` writes ``out`` until it is verified: ``out + ".partial"``."""
    return f"{out}.partial"


def _check_out(out: str) -> None:
    """OSError unless ``out`` can be written (its directory exists and is writable)."""
    directory = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out):
        raise IsADirectoryError(f"--out {out!r} is a directory")
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"directory of --out {out!r} does not exist")
    if not os.access(directory, os.W_OK):
        raise PermissionError(f"directory of --out {out!r} is not writable")


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
) -> dict[str, Any]:
    """Receive one file into ``out`` from a :func:`~sdr.cli.transfer_send.send_file` peer;
    returns a report.

    The data lands in :func:`partial_path` ``(out)``, renamed to ``out`` only once its
    SHA-256 matches the sender's; on failure that file is removed (kept, when
    ``keep_partial``) and ``out`` is left as it was. ``progress`` counts verified bytes
    only. A sender that exits or is killed is reported within about a second. With
    ``relay`` (a map file of ``sdr emulate relay``) the UDP traffic crosses the relay as
    its side B. ``data_port``: receive the UDP data on ports ``data_port`` ...
    ``data_port + paths - 1`` (``paths`` is the sender's); 0 (default) takes free ports.
    """
    if isinstance(data_port, bool) or not isinstance(data_port, int) or not 0 <= data_port < 65536:
        raise ConfigError(f"--data-port must be in [0, 65535], got {data_port!r}")
    key = check_secret(secret)
    _check_out(out)
    side = load_side(relay, "b", timeout) if relay else None
    srv = oob.listen(bind, port)
    try:
        if ready:
            ready(srv.getsockname()[1])
        srv.settimeout(timeout)
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            raise errors.TimeoutError(f"no sender connected within {timeout:g} s") from None
    finally:
        srv.close()
    try:
        conn.settimeout(timeout)  # a sender that connects and says nothing
        hello = oob.recv_obj(conn)
        conn.settimeout(None)
        oob.keepalive(conn)
        try:
            size = int(hello["size"])
            attr = sdr.QPAttr(**hello["attr"])
            config = ReliabilityConfig.from_mapping(hello["reliability"])
            info = str(hello["qp"])
        except (KeyError, TypeError, ValueError, SDRError) as exc:
            oob.send_obj(conn, {"error": str(exc)})
            raise ProtocolError(f"bad transfer request: {exc}") from exc
        agree_secret(conn, info, key, "receiver", "sender")
        if side:
            info = side.rewrite(info, key)
        return _receive(
            conn,
            out,
            size,
            attr,
            config,
            progress,
            key,
            timeout,
            info,
            keep_partial,
            side,
            data_port,
        )
    except (SDRError, OSError) as exc:
        tell_peer(conn, exc)
        raise
    finally:
        conn.close()


def _receive(
    conn: socket.socket,
    out: str,
    size: int,
    attr: sdr.QPAttr,
    config: ReliabilityConfig,
    progress: Progress | None,
    secret: bytes | None,
    timeout: float,
    info: str,
    keep_partial: bool,
    side: RelaySide | None,
    data_port: int = 0,
) -> dict[str, Any]:
    partial = partial_path(out)
    open(partial, "wb").close()
    renamed = False
    fh, buf = map_file(partial, size, write=True)
    host = conn.getsockname()[0]
    transport = side.transport() if side else UdpTransport(host, data_port, paths=_paths_of(info))
    ctx = sdr.Context(transport, secret=secret)
    try:
        qp = ctx.create_qp(attr)
        qp.connect(info.encode())
        oob.send_obj(conn, {"qp": qp.info().decode()})
        rqp = ReliableQP(qp, config)
        mr = ctx.register(buf) if size else None
        handles = [rqp.post_recv(mr, off, n) for off, n in pieces(size, attr.max_message_size)]  # type: ignore[arg-type]

        def finished() -> bool:
            if progress:
                progress(verified(handles), size)
            return all(h.finished for h in handles)

        try:
            done = watch(rqp, finished, timeout, f"receiving {out}", conn, "sender")
            if isinstance(done, dict) and "done" in done:
                # the sender had every ACK before our last progress() call reported it
                drive([rqp], finished, WATCH_S, f"receiving {out}")
            elif done is not None:
                raise peer_error(done, "sender")
            for h in handles:
                h._check()
        except SDRError as exc:
            raise with_arrived(_kept(exc, partial, keep_partial), handles, size) from exc
        end = time.monotonic()
        # keep acknowledging until the sender says it is done (a last ACK may be lost)
        if done is None:
            done = watch(rqp, lambda: False, timeout, "the sender's verdict", conn, "sender")
        if not isinstance(done, dict) or "done" not in done:
            raise peer_error(done, "sender")
        if isinstance(buf, mmap.mmap):
            buf.flush()
        digest = sha256(buf)
        ok = digest == done.get("sha256")
        if ok:
            os.replace(partial, out)
            renamed = True
        oob.send_obj(conn, {"ok": ok, "sha256": digest, "end": end})
        if not ok:
            raise _kept(
                MessageFailed(f"{out}: SHA-256 {digest} differs from the sender's"),
                partial,
                keep_partial,
            )
        return {
            "bytes": size,
            "end": end,
            "sha256": digest,
            "scheme": config.scheme,
            "counters": qp.counters(),
            "stats": stats(handles),
        }
    finally:
        ctx.close()
        if isinstance(buf, mmap.mmap):
            try:
                buf.close()
            except BufferError:
                pass  # a registered view still points at it: closed when collected
        fh.close()
        if not renamed and not keep_partial:
            try:
                os.remove(partial)
            except FileNotFoundError:
                pass


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
