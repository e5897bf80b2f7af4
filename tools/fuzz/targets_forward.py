"""Fuzz target for the WAN emulator's native forwarder (backends/wan/_forward.c).

``forward_loop`` builds a loop over two datagram socket pairs from the fuzz input (packet
size limit, slot pool, corruption skip, delay), feeds it decision columns drawn from the
input (in range or not: out-of-range columns must be refused whole), sends datagrams of
drawn sizes (some above the limit) and runs the loop briefly. Whatever the input: every
delivered datagram is one that was sent, at most one bit apart and only past the skip;
none is longer than the limit; the counters add up. Run it against the sanitizer build
(docs/native.md, "Tests, sanitizers, fuzzing"; ``SDR_FORWARD_NATIVE`` names it).
"""

from __future__ import annotations

import socket

import numpy as np
from registry import Reader, target

__all__ = ["fuzz_forward_loop"]


def _columns(r: Reader, n: int) -> list[np.ndarray]:
    """Decision columns for ``n`` packets: mostly valid, sometimes one out of range."""
    raw = np.frombuffer(r.take(8 * n).ljust(8 * n, b"\0"), np.uint8).reshape(8, n)
    cols = [
        np.where(raw[0] < 40, raw[1] % 3, 0).astype(np.uint8),  # loss: none/random/burst
        (raw[2] % 4) * 1e-4,  # extra delay, s
        np.where(raw[3] < 30, 1, 0).astype(np.uint8),  # duplicate
        np.where(raw[4] < 60, 1, 0).astype(np.uint8),  # corrupt
        (raw[5].astype(np.float64) * 256 + raw[6]) / 65536,  # where in [0, 1)
        (raw[7] % 8).astype(np.uint8),  # bit
    ]
    if r.u8() >= 240:  # break one column: the whole feed must be refused
        which = r.u8() % len(cols)
        cols[which] = cols[which].copy()
        cols[which][r.u8() % n] = (3, -1.0, 5, 2, 1.0, 8)[which]
    return cols


def _differs_by_one_bit_past(skip: int, sent: bytes, got: bytes) -> bool:
    if len(sent) != len(got):
        return False
    diff = [i for i, (x, y) in enumerate(zip(sent, got, strict=True)) if x != y]
    if not diff:
        return True
    return len(diff) == 1 and diff[0] >= skip and bin(sent[diff[0]] ^ got[diff[0]]).count("1") == 1


@target("forward_loop")
def fuzz_forward_loop(data: bytes) -> None:
    from sdr.backends.wan import native_forwarder

    forward = native_forwarder._forward
    if forward is None:
        raise RuntimeError("the native forwarder is not built")
    r = Reader(data)
    max_packet = 16 + r.u16() % 2048
    slots = 16 + r.u8() % 64
    skip = r.u8() % 64
    a_in, a_user = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b_out, b_user = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    socks = (a_in, a_user, b_out, b_user)
    try:
        for s in socks:
            s.setblocking(False)
        loop = forward.Loop(
            [(a_in.fileno(), 0, 0, 0), (b_out.fileno(), 0, 0, 0)],
            (1e9, 1e9),
            (0.0, 0.0),
            (1e7, 1e7),
            [[], []],
            skip,
            max_packet,
            slots,
            1e-3,
        )
        n = 32
        fed = True
        for direction in (0, 1):
            try:
                loop.feed(direction, *_columns(r, n))
            except (TypeError, ValueError):
                assert loop.pending(direction) == 0, "a refused feed kept decisions"
                fed = False
        if not fed:
            return
        sent: list[bytes] = []
        for i in range(1 + r.u8() % 12):
            size = r.u16() % (max_packet + 64)
            packet = bytes([i & 0xFF]) * size
            try:
                a_user.send(packet)
            except OSError:
                continue
            sent.append(packet)
        loop.run(0.002, 0, 0)
        got: list[bytes] = []
        while True:
            try:
                got.append(b_user.recv(1 << 17))
            except BlockingIOError:
                break
        stats = loop.stats(0)
        for g in got:
            assert len(g) <= max_packet, "a packet longer than the limit got through"
            assert any(_differs_by_one_bit_past(skip, s, g) for s in sent), "not a sent packet"
        assert stats["forwarded"] >= len(got) - stats["duplicated"]
    finally:
        for s in socks:
            s.close()
