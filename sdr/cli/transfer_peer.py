"""The out-of-band conversation with the peer during a transfer.

Both sides agree on the shared secret (and name a mismatch in the same words), pass
errors to each other, and watch the out-of-band TCP connection while the reliable QP
progresses: when it closes, the peer is gone, reported at once rather than after the
scheme's timers.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

from sdr import errors
from sdr.auth import verify_info
from sdr.backends import oob
from sdr.errors import ProtocolError, SDRError, TransportError
from sdr.runtime import ReliableQP, drive

__all__ = ["WATCH_S", "agree_secret", "peer_error", "tell_peer", "watch"]

WATCH_S = 0.1  # how often a transfer looks at the out-of-band connection (peer alive?)


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


def agree_secret(sock: socket.socket, info: str, secret: bytes | None, me: str, peer: str) -> None:
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


def peer_error(message: Any, peer: str) -> SDRError:
    """The error to raise for an unexpected out-of-band ``message`` from the peer."""
    if isinstance(message, dict) and "error" in message:
        if "secret" in message:
            return ProtocolError(str(message["error"]))
        return ProtocolError(f"the {peer} failed: {message['error']}")
    return ProtocolError(f"unexpected out-of-band message from the {peer}: {message!r:.200}")


def tell_peer(sock: socket.socket, exc: BaseException) -> None:
    """Best effort: send the peer our error before closing (it may be gone already)."""
    try:
        oob.send_obj(sock, {"error": " ".join(str(exc).split())})
    except OSError:
        pass


def watch(
    rqp: ReliableQP,
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    sock: socket.socket,
    peer: str,
) -> Any | None:
    """Progress ``rqp`` until ``condition()`` holds (None) or the peer sends a message
    (returned). The out-of-band connection is looked at every ``WATCH_S`` s: when it
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
            drive([rqp], condition, min(left, WATCH_S), what)
        except errors.TimeoutError:
            pass  # one slice over: look at the out-of-band connection again
        except (SDRError, OSError) as exc:  # e.g. ICMP unreachable: is the peer gone?
            time.sleep(WATCH_S)
            try:
                oob.poll_obj(sock)
            except (TransportError, OSError) as gone:
                raise TransportError(f"the {peer} is gone ({gone})") from exc
            raise
