"""Properties of the hardening helpers, checked with hypothesis.

Clipping a SACK or NACK to a message of n chunks must keep exactly the chunks below n
(the sender ignores the rest anyway), and the wire codecs must round-trip what they
build.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sdr.backends.udp.roce import decode_packet, encode_packet
from sdr.reliability.messages import Nack, Sack, decode_message

_SRC, _DST = ("10.0.0.1", 4791), ("10.0.0.2", 4791)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 5000),
    st.lists(st.booleans(), max_size=300),
    st.integers(0, 6000),
    st.booleans(),
)
def test_sack_clipped_keeps_exactly_the_chunks_below_n(cum, bits, n, digest_ok):
    sack = Sack(3, cum, np.array(bits, dtype=bool), digest_ok)
    full = sack.acked()
    clipped = sack.clipped(n)
    assert np.array_equal(clipped.acked(), full[full < n])
    assert clipped.seq == 3 and clipped.digest_ok == digest_ok
    assert decode_message(clipped.encode()).encode() == clipped.encode()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 300)), max_size=20),
    st.integers(0, 4000),
)
def test_nack_clipped_keeps_exactly_the_chunks_below_n(ranges, n):
    nack = Nack(9, tuple(ranges))
    full = nack.chunks()
    assert np.array_equal(nack.clipped(n).chunks(), full[full < n])


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, (1 << 24) - 1),
    st.integers(0, (1 << 24) - 1),
    st.integers(0, (1 << 64) - 1),
    st.integers(0, (1 << 32) - 1),
    st.integers(0, (1 << 32) - 1),
    st.binary(max_size=600),
)
def test_roce_packets_round_trip(qpn, psn, va, rkey, imm, payload):
    packet = encode_packet(_SRC, _DST, qpn, psn, va, rkey, imm, payload)
    fields, body, good = decode_packet(packet, _SRC, _DST)
    assert good is True
    assert (fields.dest_qpn, fields.psn, fields.va, fields.rkey, fields.imm) == (
        qpn,
        psn,
        va,
        rkey,
        imm,
    )
    assert bytes(body) == payload and fields.dma_len == len(payload)
    flipped = bytearray(packet)
    flipped[len(packet) // 2] ^= 0x10
    assert decode_packet(bytes(flipped), _SRC, _DST)[2] is False  # any one-bit flip is caught
    assert decode_packet(packet, ("10.0.0.3", 4791), _DST)[2] is False  # another source
