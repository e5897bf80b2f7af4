"""The set-up exchange of a file transfer: challenge, hello, reply (out-of-band JSON).

::

    receiver -> sender    {"challenge": R}                        R: 16 fresh random bytes
    sender   -> receiver  {"name", "size", "message_size", "attr", "reliability", "qp",
                           "challenge": R, ["tail",] ["digest",] "nonce": S, "hmac"}
                                                                   the hello
    receiver -> sender    {"qp", "challenge": S, "nonce", "hmac"}  the reply

With a shared secret the HMAC-SHA256 (:mod:`sdr.auth`) of the hello covers every field
the receiver acts on, and that of the reply covers the receiver's QP info; each answers
the other side's fresh nonce, so a set-up recorded on one connection and replayed on
another answers the wrong challenge and is refused (as in any challenge-response
protocol). Without a secret nothing can be authenticated, but everything stays bounded:
the announced size against the receiver's ``--max-size`` and its free disk space, every
frame by the out-of-band size limit, and every wait by one deadline for the whole
exchange (a peer that trickles a byte at a time gains nothing).

The functions here do no I/O beyond the socket they are given (no clock but the
deadline's, no files), so the exchange can be fuzzed in-process (tools/fuzz).
"""

from __future__ import annotations

import re
import secrets
import socket
from dataclasses import dataclass
from typing import Any

import sdr
from sdr import errors
from sdr.auth import sign_info
from sdr.backends import oob
from sdr.cli.transfer_digest import DIGESTS
from sdr.cli.transfer_peer import check_secret_of, peer_error
from sdr.cli.transfer_tail import Tail, parse_tail
from sdr.errors import RemoteProtocolError, SDRError
from sdr.peer_info import check_keys, field_int, field_str, require_object, show
from sdr.reliability import ReliabilityConfig
from sdr.units import format_size

__all__ = [
    "HELLO_FIELDS",
    "Request",
    "expect",
    "hello",
    "new_challenge",
    "parse_challenge",
    "parse_hello",
    "parse_reply",
    "reply",
]

HELLO_FIELDS = ("name", "size", "message_size", "attr", "reliability", "qp", "challenge")
"""What a hello carries (and, with a secret, its ``nonce`` and ``hmac``; with a tail under
erasure coding, ``tail``: :mod:`~sdr.cli.transfer_tail`; and ``digest``, the algorithm of
the closing digest, so the receiver can hash as the pieces land)."""
_SIGNED = ("nonce", "hmac")
_CHALLENGE = re.compile(r"[0-9a-f]{32}")
_MAX_SIZE = (1 << 63) - 1  # the largest file offset; --max-size is the real bound


@dataclass(frozen=True)
class Request:
    """A sender's hello, checked: what the receiver may act on."""

    name: str
    size: int
    attr: sdr.QPAttr
    config: ReliabilityConfig
    info: str
    """The sender's QP info (JSON; ``qp.connect`` checks it, its own HMAC too)."""
    nonce: str | None
    """The sender's challenge, for the reply to answer (None without a secret)."""
    tail: Tail | None = None
    """The file's last bytes as a message of their own, under erasure coding."""
    digest: str | None = None
    """The algorithm of the sender's closing digest, when the hello names it (a sender
    that does not is answered by hashing the file once it is whole)."""


def new_challenge() -> str:
    """A fresh random challenge: 16 bytes as 32 hex digits."""
    return secrets.token_hex(16)


def expect(sock: socket.socket, deadline: float, timeout: float, what: str) -> Any:
    """The peer's next out-of-band message, whole by ``deadline`` (monotonic s);
    sdr.TimeoutError naming ``what`` and ``timeout`` (the whole exchange's) after."""
    try:
        return oob.recv_obj(sock, deadline)
    except errors.TimeoutError as exc:
        raise errors.TimeoutError(f"no {what} within {timeout:g} s ({exc})") from None


def parse_challenge(message: Any) -> str:
    """The receiver's challenge from its first message (its error, if it sent one)."""
    if isinstance(message, dict) and "error" in message:
        raise peer_error(message, "receiver")
    challenge = message.get("challenge") if isinstance(message, dict) else None
    if not isinstance(challenge, str) or not _CHALLENGE.fullmatch(challenge):
        raise RemoteProtocolError(
            f"expected the receiver's challenge (32 hex digits), got {show(message)}"
        )
    return challenge


def hello(
    name: str,
    size: int,
    attr: sdr.QPAttr,
    reliability: dict[str, Any],
    info: str,
    challenge: str,
    secret: bytes | None,
    nonce: str | None = None,
    tail: Tail | None = None,
    digest: str | None = None,
) -> dict[str, Any]:
    """The sender's hello answering ``challenge``, signed with ``secret`` (adds ``nonce``,
    fresh unless given, and ``hmac``; unsigned without); ``tail`` when the file has one;
    ``digest``: the algorithm its closing digest will use."""
    body = {
        "name": name,
        "size": size,
        "message_size": attr.max_message_size,
        "attr": attr.as_dict(),
        "reliability": reliability,
        "qp": info,
        "challenge": challenge,
    }
    if tail is not None:
        body["tail"] = tail.as_dict()
    if digest is not None:
        body["digest"] = digest
    return sign_info(body, secret, nonce)


def parse_hello(message: Any, challenge: str, secret: bytes | None, max_size: int) -> Request:
    """The sender's hello, checked before the receiver acts on any of it.

    In this order: an error the sender sent instead; its HMAC (SecretMismatch when the
    secrets disagree or it was altered); the challenge (a replayed hello answers
    another); every field's type and range; ``size`` at most ``max_size``. ProtocolError
    names the field and the value.
    """
    if isinstance(message, dict) and "error" in message:
        raise peer_error(message, "sender")
    body = check_secret_of(require_object(message, "the sender's hello"), secret, "receiver",
                           "sender")  # fmt: skip
    if body.get("challenge") != challenge:
        raise RemoteProtocolError(
            "the sender's hello answers another challenge (a replayed or stale set-up): "
            f"{show(body.get('challenge'))}"
        )
    check_keys(body, "the sender's hello", HELLO_FIELDS, (*_SIGNED, "tail", "digest"))
    size = field_int(body, "size", 0, _MAX_SIZE, path="hello")
    if size > max_size:
        raise RemoteProtocolError(
            f"the sender announces {format_size(size)} ({size} bytes), more than this "
            f"receiver's --max-size {format_size(max_size)}"
        )
    try:
        attr = sdr.QPAttr(**require_object(body["attr"], "hello.attr"))
        config = ReliabilityConfig.from_mapping(
            require_object(body["reliability"], "hello.reliability")
        )
    except (TypeError, ValueError, OverflowError, SDRError) as exc:
        raise RemoteProtocolError(f"bad transfer request: {exc}") from exc
    message_size = field_int(body, "message_size", 1, _MAX_SIZE, path="hello")
    if message_size != attr.max_message_size:
        raise RemoteProtocolError(
            f"hello.message_size {message_size} differs from hello.attr.max_message_size "
            f"{attr.max_message_size}"
        )
    nonce = body.get("nonce")
    tail = parse_tail(body["tail"], size, message_size) if "tail" in body else None
    digest = body.get("digest")
    if digest is not None and digest not in DIGESTS:
        raise RemoteProtocolError(
            f"hello.digest must be one of {', '.join(DIGESTS)}, got {show(digest)}"
        )
    return Request(
        name=field_str(body, "name", path="hello", max_len=4096),
        size=size,
        attr=attr,
        config=config,
        info=field_str(body, "qp", path="hello", max_len=1 << 20),
        nonce=nonce if isinstance(nonce, str) else None,
        tail=tail,
        digest=digest,
    )


def reply(
    info: str, nonce: str | None, secret: bytes | None, own: str | None = None
) -> dict[str, Any]:
    """The receiver's reply: its QP ``info``, answering the sender's ``nonce``, signed
    (with a fresh nonce of its own unless ``own`` is given)."""
    return sign_info({"qp": info, "challenge": nonce}, secret, own)


def parse_reply(message: Any, nonce: str | None, secret: bytes | None) -> str:
    """The receiver's QP info from its reply, checked: an error it sent instead, its HMAC
    (SecretMismatch), the challenge it answers (our ``nonce``: a replayed reply answers
    another), the info's type."""
    if isinstance(message, dict) and "error" in message:
        if "secret" in message:
            raise RemoteProtocolError(str(message["error"]))
        raise RemoteProtocolError(f"receiver refused the transfer: {message['error']}")
    obj = require_object(message, "the receiver's reply")
    body = check_secret_of(obj, secret, "sender", "receiver")
    if body.get("challenge") != nonce:
        raise RemoteProtocolError(
            "the receiver's reply answers another challenge (a replayed or stale reply): "
            f"{show(body.get('challenge'))}"
        )
    check_keys(body, "the receiver's reply", ("qp", "challenge"), _SIGNED)
    return field_str(body, "qp", path="reply", max_len=1 << 20)
