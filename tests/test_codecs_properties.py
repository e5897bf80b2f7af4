"""Property tests: random data, random geometry, random loss patterns always round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdr.codecs import MDSCodec, TooManyLosses, XORCodec

SETTINGS = settings(
    max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def submessages(draw: st.DrawFn, max_k: int = 12, max_m: int = 4) -> tuple:
    """(k, m, chunk_size, data chunks of a possibly short submessage)."""
    k = draw(st.integers(1, max_k))
    m = draw(st.integers(1, max_m))
    cs = draw(st.integers(1, 96))
    k_real = draw(st.integers(1, k))
    last = draw(st.integers(0, cs))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    data = [rng.integers(0, 256, size=cs, dtype=np.uint8) for _ in range(k_real)]
    data[-1] = data[-1][:last].copy()
    return k, m, cs, data


def round_trip(codec, data: list[np.ndarray], lost: set[int]) -> list[np.ndarray]:
    """Encode, drop ``lost`` (garbage in their slots), decode into one receive buffer."""
    cs, m = codec.chunk_size, codec.m
    parity = codec.encode(data)
    recv = np.full(len(data) * cs + 16, 0x5A, dtype=np.uint8)
    slots = [recv[i * cs : i * cs + c.size] for i, c in enumerate(data)]
    for i, c in enumerate(data):
        if i not in lost:
            slots[i][:] = c
    present = [i not in lost for i in range(len(data) + m)]
    codec.decode([*slots, *parity], present)
    end = (len(data) - 1) * cs + data[-1].size
    assert (recv[end:] == 0x5A).all(), "decode wrote past the end of the data"
    return slots


@SETTINGS
@given(sub=submessages(), data_=st.data())
def test_mds_any_m_losses_round_trip(sub: tuple, data_: st.DataObject) -> None:
    k, m, cs, data = sub
    n = len(data) + m
    lost = data_.draw(st.sets(st.integers(0, n - 1), max_size=m))
    slots = round_trip(MDSCodec(k, m, cs), data, lost)
    for s, c in zip(slots, data, strict=True):
        assert np.array_equal(s, c)


@SETTINGS
@given(sub=submessages(), data_=st.data())
def test_mds_more_than_m_losses_raise(sub: tuple, data_: st.DataObject) -> None:
    k, m, cs, data = sub
    n = len(data) + m
    lost = data_.draw(st.sets(st.integers(0, n - 1), min_size=min(m + 1, n)))
    codec = MDSCodec(k, m, cs)
    present = [i not in lost for i in range(n)]
    if len(lost) <= m:  # fewer chunks exist than m + 1
        assert codec.can_recover(present)
        return
    assert not codec.can_recover(present)
    with pytest.raises(TooManyLosses):
        round_trip(codec, data, lost)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n_lost=st.integers(0, 8))
def test_mds_32_8_random_patterns(seed: int, n_lost: int) -> None:
    rng = np.random.default_rng(seed)
    data = list(rng.integers(0, 256, size=(32, 64), dtype=np.uint8))
    lost = set(rng.choice(40, size=n_lost, replace=False).tolist())
    slots = round_trip(MDSCodec(32, 8, 64), data, lost)
    assert np.array_equal(np.stack(slots), np.stack(data))


@SETTINGS
@given(sub=submessages(), data_=st.data())
def test_xor_one_loss_per_group_round_trips(sub: tuple, data_: st.DataObject) -> None:
    k, m, cs, data = sub
    k_real = len(data)
    lost: set[int] = set()
    for g in range(m):  # per group: lose nothing, one data chunk, or the parity
        members = list(range(g, k_real, m))
        choice = data_.draw(st.sampled_from([None, k_real + g, *members]))
        if choice is not None:
            lost.add(choice)
    slots = round_trip(XORCodec(k, m, cs), data, lost)
    for s, c in zip(slots, data, strict=True):
        assert np.array_equal(s, c)


@SETTINGS
@given(sub=submessages(), data_=st.data())
def test_xor_can_recover_matches_group_rule(sub: tuple, data_: st.DataObject) -> None:
    k, m, cs, data = sub
    n = len(data) + m
    lost = data_.draw(st.sets(st.integers(0, n - 1)))
    codec = XORCodec(k, m, cs)
    present = [i not in lost for i in range(n)]
    groups_ok = all(
        sum(1 for j in range(g, len(data), m) if j in lost) == 0
        or (sum(1 for j in range(g, len(data), m) if j in lost) == 1 and len(data) + g not in lost)
        for g in range(m)
    )
    assert codec.can_recover(present) == groups_ok
    if groups_ok:
        slots = round_trip(codec, data, lost)
        assert all(np.array_equal(s, c) for s, c in zip(slots, data, strict=True))
    else:
        with pytest.raises(TooManyLosses):
            round_trip(codec, data, lost)
