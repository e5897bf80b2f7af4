"""Fuzz target for the set-up exchange of ``sdr send`` / ``sdr recv`` (transfer_setup).

``transfer_setup`` writes out-of-band frames into a fresh socket pair and runs one side's
reading and checking of them, exactly as the commands do: the receiver reads a hello
(``expect`` + ``parse_hello``), or the sender reads a challenge and then a reply
(``parse_challenge``, ``parse_reply``). The deadline has passed already, so a frame that
is not whole in the socket (a partial frame) fails at once with ``sdr.TimeoutError``
(or ``sdr.TransportError`` when the writer closed): nothing waits, and the target stays
deterministic and fast.

Input: ``mode u8 | edits u8 | cut u8 | size u8 | limit u8 | edit bytes ...``.

- mode bit 0: the sides share a secret (the frames are signed); bit 1: the sender's
  side (else the receiver's); bit 2: replay (the hello or reply answers another
  challenge, as a recorded one would); bit 3: close the writer after the frames;
  bit 4: the hello has a tail; bits 5-6: its digest (blake3, sha256, none, or none named);
  bit 7: the rest of the input is the wire as is (any bytes; no edits, no cut).
- edits (0-4, low 3 bits): edits of the valid message's JSON tree (targets_connect's:
  replace a node with an interesting value, delete it, add a key or item).
- cut: when non-zero, only the first ``cut/256`` of the frame is written.
- size, limit: the announced size and the receiver's ``--max-size``, each picked from
  boundary values (0, 1, 2^63 - 1, 2^63, 2^64, -1, 1 TiB ...).

Checks beyond "only SDRError escapes": a message that is accepted was whole, answers
the challenge it was sent, announces a size in [0, limit], and, with a secret, is the
signed message unchanged (any edit that changes its canonical JSON is refused: the HMAC
covers every field the receiver acts on); an untouched message is accepted exactly when
its size is within the limit.
"""

from __future__ import annotations

import copy
import json
import socket
import time
from typing import Any

from registry import Reader, target
from targets_connect import _edit

import sdr
from sdr.adaptive import Candidate
from sdr.cli.transfer_setup import (
    Request,
    expect,
    hello,
    parse_challenge,
    parse_hello,
    parse_reply,
    reply,
)
from sdr.cli.transfer_tail import Tail

__all__ = ["fuzz_transfer_setup"]

_SECRET = b"a fuzzing secret of 32 bytes...."
_CHALLENGE = "0123456789abcdef" * 2
_OTHER = "fedcba9876543210" * 2  # the challenge a recorded (replayed) message answered
_NONCE = "00112233445566778899aabbccddeeff"
_OWN = "ffeeddccbbaa99887766554433221100"
_SIZES = (0, 1, 4096, (1 << 20) + 1, 1 << 40, (1 << 63) - 1, 1 << 63, 1 << 64, -1, 10**30)
_ATTR = sdr.QPAttr(mtu=1024, chunk_size=4096, max_message_size=1 << 20, max_messages=63)
_RELIABILITY = {"scheme": "sr-rto", "rtt": 0.005, "chunk_size": 4096}
_INFO = json.dumps({"version": 1, "backend": "udp", "transport": {"host": "127.0.0.1"}})
_DIGESTS = ("blake3", "sha256", "none", None)  # mode bits 5-6: the hello's digest, if named
_REFUSED = (sdr.ProtocolError, sdr.TimeoutError, sdr.TransportError)
_LARGEST = (1 << 63) - 1  # the largest size a hello may announce


def _tail(size: int) -> Tail | None:
    """An erasure-coded tail a real sender could announce for ``size`` bytes (None where
    none fits: the file must be longer than its tail)."""
    if not 2 <= size <= _LARGEST:
        return None
    return Tail(min(size - 1, _ATTR.max_message_size), Candidate("ec-mds", 128, 4))


def _canonical(tree: Any) -> str:
    return json.dumps(tree, sort_keys=True)


def _frame(tree: Any) -> bytes:
    data = json.dumps(tree).encode()
    return len(data).to_bytes(4, "big") + data


def _read(wire: bytes, close: bool, side: str, secret: bytes | None, limit: int) -> Any:
    """Write ``wire`` into a fresh socket pair and run ``side``'s reading of it: the
    receiver's Request, or the receiver's QP info as the sender takes it."""
    a, b = socket.socketpair()
    try:
        a.sendall(wire)
        if close:
            a.shutdown(socket.SHUT_WR)
        deadline = time.monotonic()  # passed already: what is in the socket, nothing more
        if side == "receiver":
            return parse_hello(expect(b, deadline, 1.0, "set-up"), _CHALLENGE, secret, limit)
        parse_challenge(expect(b, deadline, 1.0, "challenge"))
        return parse_reply(expect(b, deadline, 1.0, "reply"), _NONCE, secret)
    finally:
        a.close()
        b.close()


@target("transfer_setup")
def fuzz_transfer_setup(data: bytes) -> None:
    """Hellos, challenges and replies, valid or edited, replayed, cut or raw."""
    r = Reader(data)
    mode, edits, cut = r.u8(), r.u8() & 7, r.u8()
    size, limit = _SIZES[r.u8() % len(_SIZES)], _SIZES[r.u8() % len(_SIZES)]
    secret = _SECRET if mode & 1 else None
    side = "sender" if mode & 2 else "receiver"
    replay, close = bool(mode & 4), bool(mode & 8)
    limit = limit if 0 <= limit <= _LARGEST else 1 << 20
    if mode & 0x80:
        try:
            got = _read(r.rest(), close, side, secret, limit)
        except _REFUSED:
            return
        assert isinstance(got, str) or 0 <= got.size <= limit
        return
    answered = _OTHER if replay else _CHALLENGE
    if side == "receiver":  # any size: boundaries that a real sender could not announce
        tail = _tail(size) if mode & 0x10 else None
        digest = _DIGESTS[(mode >> 5) & 3]
        tree = hello("in.bin", size, _ATTR, _RELIABILITY, _INFO, answered, secret, _NONCE, tail,
                     digest)  # fmt: skip
    else:
        tree = reply(_INFO, _OTHER if replay else _NONCE, secret, _OWN)
    tree, signed = copy.deepcopy(tree), _canonical(tree)  # edits must not reach _RELIABILITY
    for _ in range(edits % 5):
        if tree:
            _edit(tree, r)
    message = _frame(tree)
    if cut:
        message = message[: len(message) * cut // 256]  # a partial frame
    wire = (_frame({"challenge": _CHALLENGE}) if side == "sender" else b"") + message
    try:
        got = _read(wire, close, side, secret, limit)
    except _REFUSED:
        got = None
    changed = _canonical(tree) != signed
    if got is None:
        fits = side == "sender" or 0 <= size <= limit
        assert cut or replay or changed or not fits, "a valid, untouched message was refused"
        return
    assert not cut and not replay, "a partial or replayed message was accepted"
    assert secret is None or not changed, "an altered signed message was accepted"
    if side == "receiver":
        assert isinstance(got, Request) and 0 <= got.size <= limit
        assert got.nonce == (_NONCE if secret is not None else None)
        assert changed or (got.size, got.info, got.attr) == (size, _INFO, _ATTR)
        assert changed or got.tail == (_tail(size) if mode & 0x10 else None)
        assert changed or got.digest == _DIGESTS[(mode >> 5) & 3]
    else:
        assert isinstance(got, str) and (changed or got == _INFO)
