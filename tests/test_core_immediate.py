import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdr.errors import ConfigError
from sdr.immediate import ImmediateLayout

LAYOUTS = [ImmediateLayout(), ImmediateLayout(8, 22, 2), ImmediateLayout(6, 20, 6)]


@given(st.sampled_from(LAYOUTS), st.data())
def test_encode_decode_round_trip(layout, data):
    msg = data.draw(st.integers(0, layout.max_message_ids - 1))
    off = data.draw(st.integers(0, layout.max_packets - 1))
    frag = data.draw(st.integers(0, (1 << layout.user_bits) - 1))
    imm = layout.encode(msg, off, frag)
    assert 0 <= imm < 1 << 32
    assert layout.decode(imm) == (msg, off, frag)
    ids, offs, frags = layout.decode_many(np.array([imm], dtype=np.uint32))
    assert (int(ids[0]), int(offs[0]), int(frags[0])) == (msg, off, frag)


@given(st.sampled_from(LAYOUTS), st.integers(0, (1 << 32) - 1))
def test_user_immediate_spreads_and_reassembles(layout, user_imm):
    offsets = np.arange(layout.fragments, dtype=np.int64)
    imms = layout.encode_many(5, offsets, user_imm)
    _, offs, frags = layout.decode_many(imms)
    assert offs.tolist() == offsets.tolist()
    assert layout.assemble(frags) == user_imm


def test_default_split_is_the_papers():
    layout = ImmediateLayout()
    assert (layout.max_message_ids, layout.max_packets, layout.fragments) == (1024, 1 << 18, 8)
    assert ImmediateLayout(8, 22, 2).fragments == 16


@pytest.mark.parametrize("bits", [(10, 18, 5), (0, 28, 4), (16, 16, 0), (10.0, 18, 4)])
def test_bad_split(bits):
    with pytest.raises(ConfigError):
        ImmediateLayout(*bits)


def test_encode_rejects_overflow():
    layout = ImmediateLayout()
    with pytest.raises(ConfigError, match="message id 1024"):
        layout.encode(1024, 0, 0)
    with pytest.raises(ConfigError, match="packet offset"):
        layout.encode(0, 1 << 18, 0)
    with pytest.raises(ConfigError):
        layout.decode(1 << 32)
