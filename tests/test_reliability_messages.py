"""The reliability control messages: round trips, size limits, damage detection."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sdr
from sdr.reliability.messages import (
    DIGEST_PER_MESSAGE,
    Abort,
    Ack,
    Digest,
    EcNack,
    Nack,
    Probe,
    Sack,
    decode_message,
    is_reliability_message,
)
from sdr.transport import MAX_CONTROL_SIZE


def roundtrip(msg):
    data = msg.encode()
    assert len(data) <= MAX_CONTROL_SIZE
    assert is_reliability_message(data) and 16 <= data[0] < 64
    back = decode_message(data)
    assert type(back) is type(msg) and back.seq == msg.seq
    return back


def test_simple_messages_roundtrip():
    assert roundtrip(Ack(3)) == Ack(3)
    assert roundtrip(Ack(2**64 - 1, failed=True)) == Ack(2**64 - 1, failed=True)
    assert roundtrip(Probe(7)) == Probe(7)
    assert roundtrip(Abort(8, mismatch=True)) == Abort(8, mismatch=True)


def test_digest_roundtrip_and_capacity():
    crcs = np.random.default_rng(0).integers(0, 2**32, DIGEST_PER_MESSAGE, dtype=np.uint64)
    msg = Digest(5, 1 << 30, 0xDEADBEEF, 65536, 1000, crcs.astype(np.uint32))
    back = roundtrip(msg)
    assert (back.length, back.scheme, back.chunk_size, back.first) == (
        1 << 30,
        0xDEADBEEF,
        65536,
        1000,
    )
    assert (back.crcs == msg.crcs).all()
    too_big = Digest(5, 1, 1, 1, 0, np.zeros(DIGEST_PER_MESSAGE + 1, dtype=np.uint32))
    assert len(too_big.encode()) > MAX_CONTROL_SIZE


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=0, max_size=3000), st.booleans())
def test_sack_reports_exactly_what_arrived(have, digest_ok):
    have = np.array(have, dtype=bool)
    back = roundtrip(Sack.build(1, have, digest_ok))
    assert back.digest_ok == digest_ok
    acked = back.acked()
    missing = np.flatnonzero(~have)
    assert back.cum == (missing[0] if len(missing) else len(have))
    assert set(acked.tolist()) == set(np.flatnonzero(have).tolist())


def test_sack_of_a_huge_message_fits_and_starts_at_the_cumulative_point():
    have = np.ones(200_000, dtype=bool)
    have[10] = False
    have[150_000] = False
    back = roundtrip(Sack.build(0, have, True))
    assert back.cum == 10
    acked = set(back.acked().tolist())
    assert 11 in acked and 9 in acked and 10 not in acked
    assert max(acked) < 150_000  # what did not fit is unknown, never "lost"


def test_sack_carries_its_ack_delay_in_microseconds_and_only_when_it_has_one():
    have = np.ones(200_000, dtype=bool)
    have[150_000] = False
    plain, held = Sack.build(3, have, True), Sack.build(3, have, True, ack_delay=0.0061234)
    assert len(held.encode()) == len(plain.encode()) + 4 <= MAX_CONTROL_SIZE  # a full bitmap too
    assert roundtrip(plain).ack_delay == 0.0
    back = roundtrip(held)
    assert back.ack_delay == pytest.approx(0.006123, abs=1e-9) and back.digest_ok
    assert (back.acked() == plain.acked()).all()
    assert roundtrip(Sack.build(3, have, False, ack_delay=1e9)).ack_delay == (2**32 - 1) / 1e6
    assert roundtrip(held.clipped(10)).ack_delay == back.ack_delay
    # flag 2 without its four bytes (or with a bitmap one byte short) is refused
    data = bytearray(Sack.build(3, np.ones(0, bool), True).encode())
    data[3] |= 2
    data[-4:] = zlib.crc32(bytes(data[:-4])).to_bytes(4, "big")
    with pytest.raises(sdr.ProtocolError, match="SACK"):
        decode_message(bytes(data))


def test_nack_splits_many_ranges_over_messages():
    chunks = np.arange(0, 20_000, 2)  # 10000 single-chunk holes
    msgs = Nack.build(4, chunks)
    assert len(msgs) > 1
    got = np.concatenate([roundtrip(m).chunks() for m in msgs])
    assert (got == chunks).all()
    assert Nack.build(4, np.array([3, 4, 5, 9]))[0].ranges == ((3, 3), (9, 1))


@pytest.mark.parametrize("k", [1, 8, 12, 32])
def test_ec_nack_roundtrip(k):
    rng = np.random.default_rng(k)
    missing = {s: rng.random(k) < 0.3 for s in (0, 5, 77)}
    msgs = EcNack.build(2, k, missing, digest_ok=False)
    back = [roundtrip(m) for m in msgs]
    assert all(b.k == k and not b.digest_ok for b in back)
    merged = {s: f for b in back for s, f in b.missing.items()}
    assert merged.keys() == missing.keys()
    for s, flags in missing.items():
        assert (merged[s] == flags).all()
    expected = np.concatenate([s * k + np.flatnonzero(missing[s]) for s in sorted(missing)])
    assert (np.concatenate([b.chunks() for b in back]) == expected).all()


def test_ec_nack_splits_many_submessages():
    missing = {s: np.ones(32, dtype=bool) for s in range(2000)}
    msgs = EcNack.build(0, 32, missing)
    assert len(msgs) > 1 and all(len(m.encode()) <= MAX_CONTROL_SIZE for m in msgs)
    assert sum(len(m.missing) for m in msgs) == 2000


@pytest.mark.parametrize(
    "mangle, match",
    [
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "checksum"),
        (lambda b: b[:5], "expected >= 16"),
        (lambda b: bytes([b[0], 9]) + b[2:], "checksum"),
    ],
)
def test_damaged_messages_are_rejected(mangle, match):
    data = Sack.build(3, np.array([True, False, True]), True).encode()
    with pytest.raises(sdr.ProtocolError, match=match):
        decode_message(mangle(data))


def test_unknown_type_and_version_are_rejected():
    import struct
    import zlib

    def framed(kind, version):
        head = struct.pack("!BBHQ", kind, version, 0, 1)
        return head + struct.pack("!I", zlib.crc32(head))

    with pytest.raises(sdr.ProtocolError, match="unknown reliability message type 40"):
        decode_message(framed(40, 1))
    with pytest.raises(sdr.ProtocolError, match="version 2"):
        decode_message(framed(17, 2))


def test_truncated_bodies_are_rejected():
    import struct
    import zlib

    head = struct.pack("!BBHQ", 18, 1, 0, 1) + struct.pack("!II", 0, 64)  # SACK missing bitmap
    data = head + struct.pack("!I", zlib.crc32(head))
    with pytest.raises(sdr.ProtocolError, match="SACK of 64 bits"):
        decode_message(data)


def test_nack_build_takes_chunks_in_any_order_with_repeats():
    msgs = Nack.build(1, np.array([9, 3, 4, 3, 5, 9, 4]))
    assert [m.ranges for m in msgs] == [((3, 3), (9, 1))]
    assert roundtrip(msgs[0]).ranges == ((3, 3), (9, 1))


def test_nack_in_memory_ranges_encode_as_their_union():
    msg = Nack(2, ((10, 5), (0, 3), (12, 10), (3, 2), (40, 0)))
    assert msg.covered() == 17 and msg.chunks().tolist() == [*range(5), *range(10, 22)]
    assert roundtrip(msg).ranges == ((0, 5), (10, 12))
    assert msg.clipped(11).ranges == ((0, 5), (10, 1))
    assert Nack(2, ((0, 2**40),)).clipped(7).ranges == ((0, 7),)  # beyond u32: clipped
    assert roundtrip(Nack(2, ((5, 2**32 - 1),))).ranges == ((5, 2**32 - 6),)  # index space


def test_ec_nack_clipped_keeps_only_the_messages_chunks():
    missing = {0: np.ones(8, bool), 2: np.ones(8, bool), 3: np.ones(8, bool)}
    clipped = EcNack(1, 8, missing, digest_ok=False).clipped(20)  # submessage 2 holds 16..19
    assert sorted(clipped.missing) == [0, 2] and not clipped.digest_ok
    assert clipped.chunks().tolist() == [*range(8), 16, 17, 18, 19]


def test_the_retired_cts_request_type_is_refused():
    """Type 23 was the reliability layer's CTS_REQUEST; the SDR core asks for CTSs now."""
    import struct
    import zlib

    head = struct.pack("!BBHQ", 23, 1, 0, 9) + struct.pack("!Q", 17)
    with pytest.raises(sdr.ProtocolError, match="unknown reliability message type 23"):
        decode_message(head + struct.pack("!I", zlib.crc32(head)))
