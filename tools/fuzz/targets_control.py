"""Fuzz targets for the control messages a sender acts on, against a large message.

``nack_large`` and ``sack_large`` decode one control message from the input and hand it
to real sender machines of a 64 MiB message of 1 KiB chunks (65,536 chunks): Selective
Repeat (``sr-nack``) and Erasure Coding (``ec-xor``, k=32). Every chunk of the message
left once at t=0 and its first quarter is acknowledged. The message must cost O(its
bytes) plus one pass over the message's chunks, which the campaign's slow-input rule
(100 ms) enforces: the NACK of 509 copies of [0, 2^32) once cost 23 s here. Beyond "only
SDRError escapes" each input checks that a sender queues only data chunks of its
message, each at most once, only chunks the (clipped) message names, and that a SACK
acknowledges exactly the chunks it names below the message's end.

Input: ``flags u8 | when u8 | message``. ``when``: the message arrives at when/16 RTTs.
flags bit 0: seal ``message`` with a correct CRC-32 trailer (appended); bit 1: give it a
valid type (bits 2..3 pick one of the target's types) and version; bit 4: clip it to the
message first, as ReliableQP does (else the machine gets it as decoded, as a custom
driver could hand it over). The message buffer is a calloc'd zero array whose pages are
never touched: nothing here reads the payload.
"""

from __future__ import annotations

import copy
import zlib
from typing import Any

import numpy as np
from registry import target

import sdr
from sdr.reliability import ReliabilityConfig, SendChunks, create_scheme
from sdr.reliability.base import Finished
from sdr.reliability.messages import Ack, EcNack, Nack, Sack, decode_message

__all__ = ["fuzz_nack_large", "fuzz_sack_large", "LENGTH", "CHUNK_SIZE"]

CHUNK_SIZE = 1024
LENGTH = 64 << 20
N_CHUNKS = LENGTH // CHUNK_SIZE
_RTT = 0.01
_K = 32
_NACK_TYPES = (Nack.TYPE, EcNack.TYPE)
_SACK_TYPES = (Sack.TYPE, Sack.TYPE, Sack.TYPE, Ack.TYPE)

_TEMPLATES: list[Any] = []


def _templates() -> list[Any]:
    """An SR and an EC sender whose chunks all left at t=0, the first quarter acked."""
    if not _TEMPLATES:
        data = memoryview(np.zeros(LENGTH, dtype=np.uint8))
        for scheme in ("sr-nack", "ec-xor"):
            config = ReliabilityConfig(scheme=scheme, rtt=_RTT, chunk_size=CHUNK_SIZE, k=_K, m=4)
            sender = create_scheme(config).sender(0, data)
            sender.start(0.0)
            for action in sender.actions():
                if isinstance(action, SendChunks):
                    sender.on_sent(0.0, action.lane, action.chunks)
            sender.tracker.ack(np.arange(N_CHUNKS // 4))
            sender.actions()
            _TEMPLATES.append(sender)
    return _TEMPLATES


def _fresh(template: Any) -> Any:
    """A copy of a template sender that shares its buffers but not its per-chunk state."""
    machine = copy.copy(template)
    tracker = copy.copy(template.tracker)
    for name, value in vars(template.tracker).items():
        if isinstance(value, np.ndarray):
            setattr(tracker, name, value.copy())
    machine.tracker = tracker
    machine.stats = {}
    machine._actions = []
    return machine


def _message(data: bytes, types: tuple[int, ...]) -> tuple[Any, float, bool] | None:
    """(decoded message, arrival time, clip first) from the input, or None."""
    if len(data) < 2:
        return None
    flags, when, raw = data[0], data[1], bytearray(data[2:])
    if flags & 2 and len(raw) >= 2:
        raw[0], raw[1] = types[(flags >> 2) % len(types)], 1
    if flags & 1:
        raw += zlib.crc32(raw).to_bytes(4, "big")
    try:
        msg = decode_message(bytes(raw))
    except sdr.ProtocolError:
        return None
    return msg, _RTT * when / 16, bool(flags & 16)


def _apply(data: bytes, types: tuple[int, ...]) -> None:
    parsed = _message(data, types)
    if parsed is None:
        return
    msg, now, clip = parsed
    named = msg.clipped(N_CHUNKS) if isinstance(msg, Sack | Nack | EcNack) else msg
    if clip:
        msg = named
    for template in _templates():
        machine = _fresh(template)
        try:
            machine.on_control(now, msg)
        except sdr.SDRError:
            continue
        _check(template, machine, msg, named)


def _check(template: Any, machine: Any, msg: Any, named: Any) -> None:
    """What one control message may do to a sender of N_CHUNKS chunks (checked with masks:
    the harness must stay O(n_chunks) too, or the slow-input rule would time it)."""
    seen = np.zeros(N_CHUNKS, dtype=bool)
    for action in machine.actions():
        if isinstance(action, SendChunks):
            assert action.lane == 0, f"a control message queued lane {action.lane}"
            chunks = np.asarray(action.chunks, dtype=np.int64)
            assert ((chunks >= 0) & (chunks < N_CHUNKS)).all()
            assert (chunks[1:] > chunks[:-1]).all(), "queued chunks not sorted and distinct"
            assert not seen[chunks].any(), "a chunk queued twice"
            seen[chunks] = True
        elif isinstance(action, Finished):
            assert isinstance(msg, Ack)
    allowed = np.zeros(N_CHUNKS, dtype=bool)
    if isinstance(msg, Nack):
        for first, n in named.ranges:
            allowed[first : first + n] = True
    elif isinstance(msg, EcNack) and msg.k == getattr(machine, "k", msg.k):
        allowed[named.chunks()] = True  # an EC sender ignores an EC_NACK of another k
    assert not (seen & ~allowed).any(), "queued a chunk the message did not name"
    if isinstance(msg, Sack):
        expect = template.tracker.acked.copy()
        expect[named.acked()] = True
        assert np.array_equal(machine.tracker.acked, expect)


@target("nack_large")
def fuzz_nack_large(data: bytes) -> None:
    """A NACK or EC_NACK against SR and EC senders of a 65,536-chunk message."""
    _apply(data, _NACK_TYPES)


@target("sack_large")
def fuzz_sack_large(data: bytes) -> None:
    """A SACK (or ACK) against SR and EC senders of a 65,536-chunk message."""
    _apply(data, _SACK_TYPES)
