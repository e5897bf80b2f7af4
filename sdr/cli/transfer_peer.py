"""The out-of-band conversation with the peer during a transfer.

Both sides check the peer's shared secret (and name a mismatch in the same words), pass
errors to each other, and watch the out-of-band TCP connection while the reliable QP
progresses: when it closes, the peer is gone, reported at once rather than after the
scheme's timers.
"""

from __future__ import annotations

import gc
import socket
import time
from collections.abc import Callable
from typing import Any

from sdr import errors
from sdr.auth import verify_info
from sdr.backends import oob
from sdr.errors import ProtocolError, SDRError, TransportError
from sdr.runtime import ReliableQP, drive

__all__ = ["WATCH_S", "SecretMismatch", "check_secret_of", "peer_error", "tell_peer", "watch"]

WATCH_S = 0.1  # how often a transfer looks at the out-of-band connection (peer alive?)
TELL_S = 1.0  # at most this long to hand the peer our error (it may not be reading)


_SECRET_TEXT = {
    "peer-only": "the {peer} uses a shared secret (SDR_SECRET) but this {me} has none",
    "self-only": "this {me} requires a shared secret (SDR_SECRET) but the {peer} has none",
    "differ": "the shared secret (SDR_SECRET) of the {peer} does not match this {me}'s "
    "(or the set-up was altered on the way)",
}


_SWAP = {"peer-only": "self-only", "self-only": "peer-only", "differ": "differ"}


def _secret_text(kind: str, me: str, peer: str) -> str:
    return "shared secret mismatch: " + _SECRET_TEXT[kind].format(me=me, peer=peer)


class SecretMismatch(ProtocolError):
    """The peer's shared secret differs from ours (``kind``: peer-only, self-only, differ).

    :func:`tell_peer` hands the peer :attr:`peer_text`, the same cause in its own words,
    so that both sides report it alike.
    """

    def __init__(self, kind: str, me: str, peer: str) -> None:
        super().__init__(_secret_text(kind, me, peer))
        self.kind = kind
        self.peer_text = _secret_text(_SWAP[kind], peer, me)


def check_secret_of(
    message: dict[str, Any], secret: bytes | None, me: str, peer: str
) -> dict[str, Any]:
    """The peer's signed set-up ``message`` once its HMAC verified, without the HMAC (as
    it is when neither side has a secret); SecretMismatch when the secrets disagree."""
    signed = "hmac" in message
    if secret is None:
        if signed:
            raise SecretMismatch("peer-only", me, peer)
        return message
    if not signed:
        raise SecretMismatch("self-only", me, peer)
    try:
        return verify_info(message, secret)
    except ProtocolError:
        raise SecretMismatch("differ", me, peer) from None


def peer_error(message: Any, peer: str) -> SDRError:
    """The error to raise for an unexpected out-of-band ``message`` from the peer."""
    if isinstance(message, dict) and "error" in message:
        if "secret" in message:
            return ProtocolError(str(message["error"]))
        return ProtocolError(f"the {peer} failed: {message['error']}")
    return ProtocolError(f"unexpected out-of-band message from the {peer}: {message!r:.200}")


def tell_peer(sock: socket.socket, exc: BaseException) -> None:
    """Best effort: send the peer our error before closing (it may be gone already, or
    not reading: given up after :data:`TELL_S`)."""
    if isinstance(exc, SecretMismatch):
        message = {"error": exc.peer_text, "secret": exc.kind}
    else:
        message = {"error": " ".join(str(exc).split())}
    try:
        sock.settimeout(TELL_S)
        oob.send_obj(sock, message)
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
    closes the peer is gone (TransportError at once, not after the scheme's timers).
    ``timeout`` is a no-progress timeout: sdr.TimeoutError once no chunk was newly
    acknowledged or received for that long (a transfer that moves is never cut short)."""
    # what the command imported and set up lives to the end: out of the collector's
    # sight, a full collection no longer walks it (gc_collect_main was ~4% of the
    # receiver's CPU, docs/benchmarks.md "CPU per byte, round 5")
    gc.freeze()
    deadline = time.monotonic() + timeout
    seen = rqp.connection.progress_at
    while True:
        if condition():
            return None
        if rqp.connection.progress_at != seen:  # it moved: the timeout starts again
            seen = rqp.connection.progress_at
            deadline = time.monotonic() + timeout
        try:
            message = oob.poll_obj(sock, time.monotonic() + timeout)
        except TransportError as exc:
            raise TransportError(f"the {peer} is gone ({exc})") from exc
        if message is not None:
            return message
        left = deadline - time.monotonic()
        if left <= 0:
            raise errors.TimeoutError(f"{what}: no progress for {timeout:g} s")
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
