"""Fuzz targets for what arrives as text or small control messages.

- ``reliability_message``: the reliability control codec (sdr.reliability.messages). Most
  random inputs fail the CRC-32 trailer, so an odd first byte asks the target to seal
  the rest with a correct trailer: the fuzzer then explores every body parser. A message
  that decodes re-encodes canonically (encode -> decode -> encode is stable) and its
  derived views (acked chunks, NACK ranges) stay within what it claims.
- ``reliability_config``: ``loads`` on TOML text, then the derived timers.
- ``plan``: a collective execution plan from JSON, validated; a valid plan round-trips.
- ``units``: the size/rate/time/distance parsers on arbitrary strings.
- ``oob_frame``: the out-of-band channel's length-prefixed JSON frames.
- ``loss_trace``: a recorded loss trace for the simulator (``sdr sim ... --trace``).
"""

from __future__ import annotations

import json
import math
import socket
import zlib

import numpy as np
from registry import target

import sdr
from sdr.backends import oob
from sdr.collectives.plan import Plan, validate_plan
from sdr.reliability.config import loads
from sdr.reliability.messages import Digest, EcNack, Nack, Sack, decode_message
from sdr.simulator.loss import TraceReplay
from sdr.units import parse_distance, parse_rate, parse_size, parse_time

__all__ = [
    "fuzz_reliability_message",
    "fuzz_reliability_config",
    "fuzz_plan",
    "fuzz_units",
    "fuzz_loss_trace",
]

_MAX_CHUNKS = 1 << 40
_LIMIT = 4096  # chunks of the message a decoded SACK/NACK is applied to


@target("reliability_message")
def fuzz_reliability_message(data: bytes) -> None:
    """Decode a control message; what decodes must re-encode stably and stay in range."""
    if data and data[0] & 1:
        body = data[1:]
        data = body + zlib.crc32(body).to_bytes(4, "big")
    try:
        msg = decode_message(data)
    except sdr.ProtocolError:
        return
    wire = msg.encode()
    again = decode_message(wire)
    assert type(again) is type(msg) and again.seq == msg.seq
    assert again.encode() == wire
    if isinstance(msg, Sack):  # what the reliable QP hands a sender: clipped to its message
        acked = msg.clipped(_LIMIT).acked()
        assert len(acked) <= _LIMIT and (acked < _LIMIT).all()
        assert (np.diff(acked) > 0).all()
        if msg.cum + 1 + len(msg.bits) <= _LIMIT:
            assert len(acked) == msg.cum + int(msg.bits.sum())
    elif isinstance(msg, Nack):
        chunks = msg.clipped(_LIMIT).chunks()
        assert ((chunks >= 0) & (chunks < _LIMIT)).all()
        if all(first + n <= _LIMIT for first, n in msg.ranges):
            assert len(chunks) == sum(n for _, n in msg.ranges)
    elif isinstance(msg, EcNack):
        assert all(len(flags) == msg.k for flags in msg.missing.values())
        assert len(msg.chunks()) == sum(int(f.sum()) for f in msg.missing.values())
    elif isinstance(msg, Digest):
        assert msg.first + len(msg.crcs) < _MAX_CHUNKS


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@target("reliability_config")
def fuzz_reliability_config(data: bytes) -> None:
    """TOML text -> ReliabilityConfig (or ConfigError); derived timers are finite."""
    try:
        config = loads(_text(data) + "\n")
        resolved = config.resolved(config.chunk_size or 65536, None)
    except sdr.ConfigError:
        return
    for value in (resolved.rto, resolved.ack_delay, resolved.t_inj, resolved.timeout_for(1 << 20)):
        assert math.isfinite(value) and value >= 0, value
    assert resolved.fto(resolved.k, resolved.m) >= 0


@target("plan")
def fuzz_plan(data: bytes) -> None:
    """JSON text -> validated execution plan (or ConfigError); a plan round-trips."""
    try:
        plan = Plan.loads(_text(data))
    except sdr.ConfigError:
        return
    validate_plan(plan)
    again = Plan.loads(plan.dumps())
    assert again.to_json() == plan.to_json()


_PARSERS = (parse_size, parse_rate, parse_time, parse_distance)


@target("units")
def fuzz_units(data: bytes) -> None:
    """Unit strings ("64KiB", "25ms" ...): a value >= 0 and finite, or ConfigError."""
    if not data:
        return
    parse = _PARSERS[data[0] % len(_PARSERS)]
    try:
        value = parse(_text(data[1:]))
    except sdr.ConfigError:
        return
    assert math.isfinite(value) and value >= 0, value


@target("loss_trace")
def fuzz_loss_trace(data: bytes) -> None:
    """A recorded loss trace for the simulator: 0/1 tokens, ``#`` comments."""
    try:
        model = TraceReplay.from_text(_text(data))
    except sdr.ConfigError:
        return
    tokens = [t for line in _text(data).splitlines() for t in line.split("#", 1)[0].split()]
    assert np.asarray(model.trace).dtype == bool and len(model.trace) == len(tokens)
    assert 0.0 <= model.mean_rate() <= 1.0


_OOB: tuple[socket.socket, socket.socket] | None = None


@target("oob_frame")
def fuzz_oob_frame(data: bytes) -> None:
    """One frame of the out-of-band channel: an object, or ProtocolError/TransportError."""
    global _OOB
    if _OOB is None:
        _OOB = socket.socketpair()
        for s in _OOB:
            s.settimeout(1.0)
    a, b = _OOB
    frame = len(data).to_bytes(4, "big") + data if data[:1] != b"\xff" else data[1:]
    if len(frame) < 4:
        frame = frame.ljust(4, b"\0")
    size = int.from_bytes(frame[:4], "big")
    if size > len(frame) - 4:  # the peer would block waiting for the rest: send a short frame
        frame = (len(frame) - 4).to_bytes(4, "big") + frame[4:]
    a.sendall(frame)
    try:
        obj = oob.recv_obj(b)
    except (sdr.ProtocolError, sdr.TransportError):
        obj = None
    finally:
        _drain(b)
    json.dumps(obj)


def _drain(sock: socket.socket) -> None:
    sock.setblocking(False)
    try:
        while sock.recv(1 << 16):
            pass
    except BlockingIOError:
        pass
    finally:
        sock.settimeout(1.0)
