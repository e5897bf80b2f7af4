"""Fuzz target for the WAN emulator's native forwarder (backends/wan/_forward.c).

``forward_loop`` builds a loop over two datagram socket pairs from the fuzz input (packet
size limit, slot pool, corruption skip, delay), feeds it decision columns drawn from the
input (in range or not: out-of-range columns must be refused whole), sends datagrams of
drawn sizes (some above the limit) and runs the loop briefly. Whatever the input: every
delivered datagram is one that was sent, at most one bit apart and only past the skip;
none is longer than the limit; the counters add up. Run it against the sanitizer build
(docs/native.md, "Tests, sanitizers, fuzzing"; ``SDR_FORWARD_NATIVE`` names it).

``forward_vnet`` drives the TUN offload path (ports of kind 2: a virtio header in front of
every datagram) with GSO packets built from the input (TCP or UDP, IPv4 or IPv6, payload,
segment size, TCP options and flags, slot size), then maybe edited (any byte, header or
virtio field) or cut. Whatever the input: every frame written is one the reference
(sdr.backends.wan.gso_reference) can segment, into packets no longer than the limit, and
the counters add up; an unedited packet arrives as exactly the reference's segments less
the ones the decisions dropped, or not at all when it does not fit.
"""

from __future__ import annotations

import socket

import numpy as np
from registry import Reader, target

__all__ = ["fuzz_forward_loop", "fuzz_forward_vnet"]


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


def _vnet_input(r: Reader) -> tuple[list[bytes], int, bool]:
    """GSO frames from the input, the segment limit they were made for, whether edited."""
    from sdr.backends.wan.gso_reference import gso_frame

    shape = r.u8()
    v6, tcp = bool(shape & 1), bool(shape & 2)
    payload_len, gso = r.u16() % 12000, 1 + r.u16() % 3000
    options = bytes([1]) * (4 * (r.u8() % 11)) if tcp else b""  # NOPs, up to 40 bytes
    flags = (r.u8() & 0xC9) | 0x10 if tcp else 0  # ACK, maybe CWR, ECE, PSH, FIN
    frames = []
    for i in range(1 + r.u8() % 3):
        payload = (bytes(range(i, 256)) + bytes(range(i))) * (payload_len // 256 + 1)
        frames.append(
            gso_frame(
                v6,
                6 if tcp else 17,
                payload[:payload_len],
                gso,
                seq=1 + payload_len * i,
                ident=i * 50,
                flags=flags,
                options=options,
            )  # fmt: skip
        )
    edited = False
    for _ in range(r.u8() % 4):
        which, at, value = r.u8() % len(frames), r.u16(), r.u8()
        b = bytearray(frames[which])
        b[at % len(b)] = value
        edited = edited or bytes(b) != frames[which]
        frames[which] = bytes(b)
    if r.u8() >= 224:
        frames[0] = frames[0][: r.u16() % len(frames[0])]
        edited = True
    return frames, gso, edited


def _check_frame(frame: bytes, max_packet: int, edited: bool) -> list[bytes]:
    """The wire packets of one frame the loop wrote to a vnet port (reference-segmented;
    a single packet's partial checksum finished unless the input was edited: it may not
    be TCP or UDP then)."""
    from sdr.backends.wan.gso_reference import NEEDS_CSUM, VNET, wire_packets

    assert len(frame) >= VNET.size, "a frame shorter than its virtio header"
    flags, kind, _, _, start, offset = VNET.unpack_from(frame)
    if not kind:
        pkt = frame[VNET.size :]
        assert len(pkt) <= max_packet, "a packet longer than the limit got through"
        assert not flags & NEEDS_CSUM or start + offset + 2 <= len(pkt), "checksum past the end"
        return [pkt] if edited else wire_packets(frame)
    packets = wire_packets(frame)  # raises on a GSO frame the reference cannot take
    assert all(len(p) <= max_packet for p in packets), "a merged segment over the limit"
    return packets


@target("forward_vnet")
def fuzz_forward_vnet(data: bytes) -> None:
    from sdr.backends.wan import native_forwarder
    from sdr.backends.wan.gso_reference import VNET, wire_packets

    forward = native_forwarder._forward
    if forward is None:
        raise RuntimeError("the native forwarder is not built")
    r = Reader(data)
    max_packet = 68 + r.u16() % 9000
    mode = r.u8()
    out_kind, coalesce = (2 if mode & 1 else 0), bool(mode & 2)
    frames, gso, edited = _vnet_input(r)
    n = 256
    loss = (np.frombuffer(r.take(n).ljust(n, b"\xff"), np.uint8) < 30).astype(np.uint8)
    zeros = np.zeros(n, np.uint8)
    a_in, a_user = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b_out, b_user = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    socks = (a_in, a_user, b_out, b_user)
    try:
        for sock in socks:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        loop = forward.Loop(
            [(a_in.fileno(), 2, 0, 0), (b_out.fileno(), out_kind, 0, 0)],
            (1e12, 1e12), (0.0, 0.0), (1e8, 1e8), [[], []], 28, max_packet, 256, 1e-3, coalesce,
        )  # fmt: skip
        loop.feed(0, loss, np.zeros(n), zeros, zeros, np.zeros(n), zeros)
        loop.feed(1, zeros, np.zeros(n), zeros, zeros, np.zeros(n), zeros)
        for frame in frames:
            a_user.send(frame)
        loop.run(0.003, 0, 0)
        written: list[bytes] = []
        while True:
            try:
                written.append(b_user.recv(1 << 17))
            except BlockingIOError:
                break
        if out_kind == 2:
            got = [p for f in written for p in _check_frame(f, max_packet, edited)]
        else:
            got = written
            assert all(len(p) <= max_packet for p in got), "a packet over the limit got through"
        s = loop.stats(0)
        drops = sum(s[k] for k in ("loss_random", "loss_burst", "oversize", "malformed",
                                   "pool_drops", "queue_drops", "write_errors"))  # fmt: skip
        assert s["packets"] == s["forwarded"] + drops + s["in_flight"], "counters do not add up"
        if edited or s["in_flight"] or s["pool_drops"] or s["write_errors"]:
            return
        want: list[bytes] = []
        offered = 0
        for frame in frames:
            segs = wire_packets(frame)
            hdr = VNET.unpack_from(frame)[2]
            if not segs or hdr + min(gso, len(segs[0]) - hdr) > max_packet or len(segs) > 64:
                offered += 1  # refused whole: one decision
                continue
            want += [p for k, p in enumerate(segs) if not loss[offered + k]]
            offered += len(segs)
        assert got == want, "delivered packets are not the reference's segments"
        assert s["packets"] == offered
    finally:
        for sock in socks:
            sock.close()
