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
import json
import mmap
import os
import socket
import time
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import sdr
from sdr import errors
from sdr.auth import check_secret, verify_info
from sdr.backends import oob
from sdr.backends.udp import UdpTransport
from sdr.errors import ConfigError, MessageFailed, ProtocolError, SDRError, TransportError
from sdr.reliability import ReliabilityConfig, ReliableQP, load_config
from sdr.reliability.handles import drive
from sdr.reliability.registry import available_schemes, create_scheme
from sdr.units import format_size, parse_size

__all__ = ["TransferOptions", "send_file", "serve_file", "validate_send", "Progress"]

Progress = Callable[[int, int], None]
"""Called with (bytes done, bytes total) as the transfer advances."""


# What a transfer uses for a reliability field that neither the command line nor the
# ``--config`` file sets (a flag overrides the file, the file overrides these).
DEFAULTS: dict[str, Any] = {
    "scheme": "auto",
    "rtt": "25ms",
    "link_rate": "1Gbit/s",
    "alpha": 2.0,
    "chunk_size": "64KiB",
}

_WATCH_S = 0.1  # how often a transfer looks at the out-of-band connection (peer alive?)


@dataclass
class TransferOptions:
    """How to move a file. Sizes, rates and times accept units.

    The reliability fields (scheme, rate, rtt, alpha, chunk_size, k, m) left at None take
    the value of the ``[reliability]`` table in ``config`` when it sets one, else
    :data:`DEFAULTS`; a value given here overrides the file.
    """

    scheme: str | None = None
    rate: str | float | None = None
    rtt: str | float | None = None
    loss: float = 1e-3
    message_size: str | int = "8MiB"
    mtu: str | int = 8192
    chunk_size: str | int | None = None
    channels: int = 2
    alpha: float | None = None
    k: int | None = None
    m: int | None = None
    config: str | None = None
    secret: str | None = None
    timeout: float = 300.0
    extra: dict[str, Any] = field(default_factory=dict)


def _file_table(path: str) -> dict[str, Any]:
    """The keys that the ``[reliability]`` table of ``path`` sets (validated)."""
    load_config(path)  # ConfigError for a missing file, bad TOML, unknown keys, bad values
    with open(path, "rb") as fh:
        doc = tomllib.load(fh)
    return dict(doc.get("reliability", doc))


def merged_config(opts: TransferOptions) -> ReliabilityConfig:
    """The reliability config: :data:`DEFAULTS`, then the file, then the options given."""
    table = dict(DEFAULTS)
    if opts.config:
        table.update(_file_table(opts.config))
    given = {
        "scheme": opts.scheme,
        "rtt": opts.rtt,
        "link_rate": opts.rate,
        "alpha": opts.alpha,
        "chunk_size": opts.chunk_size,
        "k": opts.k,
        "m": opts.m,
    }
    table.update({k: v for k, v in given.items() if v is not None})
    table.update(opts.extra)
    config = ReliabilityConfig.from_mapping(table)
    if config.scheme != "auto" and config.scheme.lower() not in available_schemes():
        raise ConfigError(
            f"unknown scheme {config.scheme!r}; expected auto or one of {available_schemes()}"
        )
    return config


def plan(opts: TransferOptions, size: int) -> tuple[ReliabilityConfig, Any]:
    """The concrete reliability config for this transfer (``auto`` goes through the
    simulator's selector) and the selection that chose it (or None)."""
    config = merged_config(opts)
    if config.scheme != "auto":
        return config, None
    from sdr.simulator.auto import resolve_auto  # the selector loads SciPy: only when needed

    piece = min(parse_size(opts.message_size), max(size, 1))
    return resolve_auto(
        config,
        size_bytes=piece,
        drop=opts.loss,
        mtu=parse_size(opts.mtu),
        chunk_sizes=(int(config.chunk_size),),  # type: ignore[arg-type]
    )


def _attr(opts: TransferOptions, config: ReliabilityConfig) -> sdr.QPAttr:
    message = parse_size(opts.message_size)
    return sdr.QPAttr(
        mtu=opts.mtu,
        chunk_size=config.chunk_size,
        max_message_size=message,
        max_messages=63,  # odd: see sdr.id_reuse
        channels=opts.channels,
        rate_limit=config.link_rate,
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


def _verified(handles: list[Any]) -> int:
    """Bytes of the messages that completed and were verified (never failed ones)."""
    return sum(h.length for h in handles if h.done)


def _arrived(handles: list[Any], size: int) -> str:
    return f"{format_size(_verified(handles))} of {format_size(size)} verified"


def _with_arrived(exc: SDRError, handles: list[Any], size: int) -> SDRError:
    """``exc`` again (same type), its message saying how much of the file was verified."""
    return type(exc)(f"{exc} ({_arrived(handles, size)})")


_SECRET_TEXT = {
    "peer-only": "the {peer} uses a shared secret (SDR_SECRET) but this {me} has none",
    "self-only": "this {me} requires a shared secret (SDR_SECRET) but the {peer} has none",
    "differ": "the shared secret (SDR_SECRET) of the {peer} does not match this {me}'s",
}
_SWAP = {"peer-only": "self-only", "self-only": "peer-only", "differ": "differ"}


def _secret_text(kind: str, me: str, peer: str) -> str:
    return "shared secret mismatch: " + _SECRET_TEXT[kind].format(me=me, peer=peer)


def _secret_kind(info: str, secret: bytes | None) -> str | None:
    """How the peer's QP ``info`` and our ``secret`` disagree, or None when they agree
    (malformed info is left for ``qp.connect`` to report)."""
    try:
        decoded = json.loads(info)
    except (TypeError, ValueError):
        return None
    if not isinstance(decoded, dict):
        return None
    signed = "hmac" in decoded
    if secret is None:
        return "peer-only" if signed else None
    if not signed:
        return "self-only"
    try:
        verify_info(decoded, secret)
    except ProtocolError:
        return "differ"
    return None


def _agree_secret(sock: socket.socket, info: str, secret: bytes | None, me: str, peer: str) -> None:
    """ProtocolError naming the mismatch when the peer's secret differs from ours; the
    peer is told too (in its own words), so that both sides report the same cause."""
    kind = _secret_kind(info, secret)
    if kind is None:
        return
    try:
        oob.send_obj(sock, {"error": _secret_text(_SWAP[kind], peer, me), "secret": kind})
    except OSError:
        pass  # the peer is gone already: our own report is what counts
    raise ProtocolError(_secret_text(kind, me, peer))


def _peer_error(message: Any, peer: str) -> SDRError:
    """The error to raise for an unexpected out-of-band ``message`` from the peer."""
    if isinstance(message, dict) and "error" in message:
        if "secret" in message:
            return ProtocolError(str(message["error"]))
        return ProtocolError(f"the {peer} failed: {message['error']}")
    return ProtocolError(f"unexpected out-of-band message from the {peer}: {message!r:.200}")


def _tell_peer(sock: socket.socket, exc: BaseException) -> None:
    """Best effort: send the peer our error before closing (it may be gone already)."""
    try:
        oob.send_obj(sock, {"error": " ".join(str(exc).split())})
    except OSError:
        pass


def _watch(
    rqp: ReliableQP,
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    sock: socket.socket,
    peer: str,
) -> Any | None:
    """Progress ``rqp`` until ``condition()`` holds (None) or the peer sends a message
    (returned). The out-of-band connection is looked at every ``_WATCH_S`` s: when it
    closes the peer is gone (TransportError at once, not after the scheme's timers)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return None
        try:
            message = oob.poll_obj(sock)
        except TransportError as exc:
            raise TransportError(f"the {peer} is gone ({exc})") from exc
        if message is not None:
            return message
        left = deadline - time.monotonic()
        if left <= 0:
            raise errors.TimeoutError(f"{what} did not finish within {timeout:g} s")
        try:
            drive([rqp], condition, min(left, _WATCH_S), what)
        except errors.TimeoutError:
            pass  # one slice over: look at the out-of-band connection again
        except (SDRError, OSError) as exc:  # e.g. ICMP unreachable: is the peer gone?
            time.sleep(_WATCH_S)
            try:
                oob.poll_obj(sock)
            except (TransportError, OSError) as gone:
                raise TransportError(f"the {peer} is gone ({gone})") from exc
            raise


def validate_send(path: str, opts: TransferOptions) -> tuple[bytes | None, int]:
    """Check what :func:`send_file` would use without touching the network (ConfigError,
    OSError for an unreadable file); returns the secret and the file's size."""
    secret = check_secret(opts.secret)
    size = os.path.getsize(path)
    with open(path, "rb"):
        pass
    config = merged_config(opts)
    attr = _attr(opts, config)
    if config.scheme != "auto":
        create_scheme(config.resolved(attr.chunk_size, attr.rate_limit))
    return secret, size


def send_file(
    path: str,
    host: str,
    port: int = oob.DEFAULT_PORT,
    opts: TransferOptions | None = None,
    progress: Progress | None = None,
    waiting: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Send ``path`` to a receiver running :func:`serve_file` at ``host:port``.

    Everything is validated before the network is touched (ConfigError, OSError). The
    receiver is awaited up to ``opts.timeout`` s (``waiting`` is called once if it is not
    listening yet), and the transfer then gets up to ``opts.timeout`` s. ``progress``
    counts verified (acknowledged) bytes only. A receiver that exits or is killed is
    reported within about a second, with how much of the file it had verified.
    """
    opts = opts or TransferOptions()
    secret, size = validate_send(path, opts)
    config, selection = plan(opts, size)
    attr = _attr(opts, config)
    create_scheme(config.resolved(attr.chunk_size, attr.rate_limit))  # a bad scheme fails here
    fh, buf = _map(path, size, write=False)
    ctx: sdr.Context | None = None
    sock: socket.socket | None = None
    try:
        sock = oob.connect(host, port, opts.timeout, waiting)
        ctx = sdr.Context(UdpTransport(host=_source_address(host), port=0), secret=secret)
        return _send(sock, ctx, path, size, buf, opts, attr, config, selection, progress)
    except (SDRError, OSError) as exc:
        if sock is not None:
            _tell_peer(sock, exc)
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
    progress: Progress | None,
) -> dict[str, Any]:
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
        if "secret" in reply:
            raise ProtocolError(str(reply["error"]))
        raise ProtocolError(f"receiver refused the transfer: {reply['error']}")
    _agree_secret(sock, reply["qp"], ctx.secret, "sender", "receiver")
    qp.connect(reply["qp"].encode())
    rqp = ReliableQP(qp, config)
    mr = ctx.register(buf) if size else None
    start = time.monotonic()
    handles = [rqp.write(mr, off, n) for off, n in _pieces(size, attr.max_message_size)]  # type: ignore[arg-type]

    def finished() -> bool:
        if progress:
            progress(_verified(handles), size)
        return all(h.finished for h in handles)

    try:
        message = _watch(rqp, finished, opts.timeout, f"sending {path}", sock, "receiver")
        if message is not None:
            raise _peer_error(message, "receiver")
        for h in handles:
            h._check()
    except SDRError as exc:
        raise _with_arrived(exc, handles, size) from exc
    seconds = time.monotonic() - start
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


def _config_dict(config: ReliabilityConfig) -> dict[str, Any]:
    return {k: v for k, v in asdict(config).items() if v is not None}


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
) -> dict[str, Any]:
    """Receive one file into ``out`` from a :func:`send_file` peer; returns a report.

    The data lands in :func:`partial_path` ``(out)``, renamed to ``out`` only once its
    SHA-256 matches the sender's; on failure that file is removed (kept, when
    ``keep_partial``) and ``out`` is left as it was. ``progress`` counts verified bytes
    only. A sender that exits or is killed is reported within about a second.
    """
    key = check_secret(secret)
    _check_out(out)
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
        _agree_secret(conn, info, key, "receiver", "sender")
        return _receive(conn, out, size, attr, config, progress, key, timeout, info, keep_partial)
    except (SDRError, OSError) as exc:
        _tell_peer(conn, exc)
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
) -> dict[str, Any]:
    partial = partial_path(out)
    open(partial, "wb").close()
    renamed = False
    fh, buf = _map(partial, size, write=True)
    ctx = sdr.Context(UdpTransport(host=conn.getsockname()[0], port=0), secret=secret)
    try:
        qp = ctx.create_qp(attr)
        qp.connect(info.encode())
        oob.send_obj(conn, {"qp": qp.info().decode()})
        rqp = ReliableQP(qp, config)
        mr = ctx.register(buf) if size else None
        handles = [rqp.post_recv(mr, off, n) for off, n in _pieces(size, attr.max_message_size)]  # type: ignore[arg-type]

        def finished() -> bool:
            if progress:
                progress(_verified(handles), size)
            return all(h.finished for h in handles)

        try:
            done = _watch(rqp, finished, timeout, f"receiving {out}", conn, "sender")
            if isinstance(done, dict) and "done" in done:
                # the sender had every ACK before our last progress() call reported it
                drive([rqp], finished, _WATCH_S, f"receiving {out}")
            elif done is not None:
                raise _peer_error(done, "sender")
            for h in handles:
                h._check()
        except SDRError as exc:
            raise _with_arrived(_kept(exc, partial, keep_partial), handles, size) from exc
        end = time.monotonic()
        # keep acknowledging until the sender says it is done (a last ACK may be lost)
        if done is None:
            done = _watch(rqp, lambda: False, timeout, "the sender's verdict", conn, "sender")
        if not isinstance(done, dict) or "done" not in done:
            raise _peer_error(done, "sender")
        if isinstance(buf, mmap.mmap):
            buf.flush()
        digest = _sha256(buf)
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
