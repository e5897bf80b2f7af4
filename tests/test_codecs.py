"""Unit tests of the erasure codecs: layout, padding, in-place decode, errors, registry."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from pyeclib.ec_iface import ECDriver

from sdr import ConfigError, MessageFailed, SDRError
from sdr.codecs import (
    Codec,
    MDSCodec,
    TooManyLosses,
    XORCodec,
    available_codecs,
    get_codec,
    register_codec,
)
from sdr.codecs.mds import HEADER_SIZE

RNG = np.random.default_rng(1234)


def random_chunks(k: int, size: int) -> np.ndarray:
    return RNG.integers(0, 256, size=(k, size), dtype=np.uint8)


def lose(chunks: list[np.ndarray], lost: set[int], k_real: int) -> list[np.ndarray]:
    """Copies of the chunks with lost data chunks overwritten by garbage."""
    out = [c.copy() for c in chunks]
    for i in lost:
        if i < k_real:
            out[i][:] = 0xA5
    return out


@pytest.mark.parametrize("chunk_size", [1, 3, 17, 64, 1000, 4096])
@pytest.mark.parametrize(("k", "m"), [(1, 1), (4, 2), (32, 8), (10, 4)])
def test_pyeclib_fragment_payload_is_the_chunk(k: int, m: int, chunk_size: int) -> None:
    """The layout MDSCodec relies on: fragment i's payload is exactly chunk i."""
    data = random_chunks(k, chunk_size)
    frags = ECDriver(k=k, m=m, ec_type="isa_l_rs_vand_inv").encode(data.tobytes())
    assert len(frags) == k + m
    assert {len(f) for f in frags} == {HEADER_SIZE + chunk_size}
    for i in range(k):
        assert frags[i][HEADER_SIZE:] == data[i].tobytes()


def test_pyeclib_headers_do_not_depend_on_data() -> None:
    """What lets the receiver rebuild headers from an encode of zeros."""
    driver = ECDriver(k=6, m=3, ec_type="isa_l_rs_vand_inv")
    a = driver.encode(random_chunks(6, 128).tobytes())
    b = driver.encode(bytes(6 * 128))
    assert [f[:HEADER_SIZE] for f in a] == [f[:HEADER_SIZE] for f in b]
    assert len({f[:HEADER_SIZE] for f in a}) == 9  # but they differ per fragment index


@pytest.mark.parametrize("codec_cls", [MDSCodec, XORCodec])
def test_encode_is_deterministic_and_reads_in_place(codec_cls: type[Codec]) -> None:
    codec = codec_cls(8, 4, 256)
    buf = random_chunks(8, 256)
    contiguous = list(buf)  # views tiling one buffer
    scattered = [c.copy() for c in buf]
    p1 = codec.encode(contiguous)
    p2 = codec.encode(scattered)
    p3 = codec.encode([memoryview(c.tobytes()) for c in buf])
    p4 = codec.encode(buf)  # one (k, chunk_size) array: the zero-copy form
    for a, b, c, d in zip(p1, p2, p3, p4, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c) and np.array_equal(a, d)
    assert any(p.any() for p in p1)
    short = codec.encode(buf[:3])  # a 2-D array of fewer rows: the last submessage
    assert all(
        np.array_equal(a, b) for a, b in zip(short, codec.encode(list(buf[:3])), strict=True)
    )
    with pytest.raises(ConfigError, match="2-D"):
        codec.encode(buf.reshape(-1))


def test_xor_parity_definition() -> None:
    k, m = 12, 4
    data = random_chunks(k, 100)
    parity = XORCodec(k, m, 100).encode(list(data))
    for i in range(m):
        assert np.array_equal(parity[i], np.bitwise_xor.reduce(data[i::m], axis=0))


@pytest.mark.parametrize("codec_cls", [MDSCodec, XORCodec])
def test_parity_out_is_written_in_place(codec_cls: type[Codec]) -> None:
    codec = codec_cls(4, 2, 64)
    data = random_chunks(4, 64)
    out = np.zeros((2, 64), dtype=np.uint8)
    returned = codec.encode(list(data), parity_out=list(out))
    assert np.array_equal(out, np.stack(codec.encode(list(data))))
    assert all(np.shares_memory(r, o) for r, o in zip(returned, out, strict=True))


@pytest.mark.parametrize(("k", "m"), [(4, 2), (5, 3), (6, 2), (6, 4)])  # 4: the decode() path
def test_mds_every_pattern_of_up_to_m_losses(k: int, m: int) -> None:
    codec = MDSCodec(k, m, 33)
    data = random_chunks(k, 33)
    chunks = [*data, *codec.encode(list(data))]
    for n_lost in range(m + 1):
        for lost in itertools.combinations(range(k + m), n_lost):
            got = lose(chunks, set(lost), k)
            present = [i not in lost for i in range(k + m)]
            recovered = codec.decode(got, present)
            assert recovered == [i for i in lost if i < k]
            assert np.array_equal(np.stack(got[:k]), data), lost


@pytest.mark.parametrize("codec_cls", [MDSCodec, XORCodec])
def test_more_than_m_losses_raise_and_write_nothing(codec_cls: type[Codec]) -> None:
    k, m = 6, 3
    codec = codec_cls(k, m, 16)
    data = random_chunks(k, 16)
    chunks = lose([*data, *codec.encode(list(data))], {0, 1, 2, 3}, k)
    before = [c.copy() for c in chunks]
    present = [i not in {0, 1, 2, 3} for i in range(k + m)]
    assert not codec.can_recover(present)
    with pytest.raises(TooManyLosses) as err:
        codec.decode(chunks, present)
    assert isinstance(err.value, MessageFailed) and isinstance(err.value, SDRError)
    assert "[0, 1, 2, 3]" in str(err.value)
    assert all(np.array_equal(a, b) for a, b in zip(chunks, before, strict=True))


def test_xor_one_loss_per_group() -> None:
    k, m = 8, 4
    codec = XORCodec(k, m, 50)
    data = random_chunks(k, 50)
    chunks = [*data, *codec.encode(list(data))]
    lost = {0, 5, 2, 11}  # groups 0, 1, 2 lose data; group 3 loses its parity only
    got = lose(chunks, lost, k)
    assert codec.decode(got, [i not in lost for i in range(k + m)]) == [0, 2, 5]
    assert np.array_equal(np.stack(got[:k]), data)
    for bad in ({0, 4}, {1, 9}):  # two in one group; a data chunk and its group's parity
        assert not codec.can_recover([i not in bad for i in range(k + m)])
        with pytest.raises(TooManyLosses):
            codec.decode(lose(chunks, bad, k), [i not in bad for i in range(k + m)])


@pytest.mark.parametrize("codec_cls", [MDSCodec, XORCodec])
def test_decode_writes_into_views_of_a_receive_buffer(codec_cls: type[Codec]) -> None:
    k, m, cs = 4, 2, 32
    codec = codec_cls(k, m, cs)
    sent = random_chunks(k, cs)
    parity = codec.encode(list(sent))
    recv = bytearray(k * cs + 7)  # the user's buffer, with a guard tail
    recv[7:] = bytes(k * cs)
    view = memoryview(recv)
    for i in (0, 2, 3):  # chunk 1 lost
        view[i * cs : (i + 1) * cs] = sent[i].tobytes()
    slots = [view[i * cs : (i + 1) * cs] for i in range(k)]
    codec.decode([*slots, *parity], [True, False, True, True, True, True])
    assert bytes(recv[: k * cs]) == sent.tobytes()
    assert bytes(recv[k * cs :]) == bytes(7)


@pytest.mark.parametrize("codec_cls", [MDSCodec, XORCodec])
@pytest.mark.parametrize(("k_real", "last_len"), [(3, 10), (1, 1), (5, 64), (2, 0)])
def test_short_last_submessage(codec_cls: type[Codec], k_real: int, last_len: int) -> None:
    """Fewer than k data chunks and a short last chunk: zero padded, never over-written."""
    k, m, cs = 6, 2, 64
    codec = codec_cls(k, m, cs)
    full = random_chunks(k_real, cs)
    data = [*full[:-1], full[-1][:last_len].copy()]
    parity = codec.encode(data)
    padded = np.zeros((k, cs), dtype=np.uint8)
    for i, c in enumerate(data):
        padded[i, : c.size] = c
    reference = codec.encode(list(padded))
    assert all(np.array_equal(a, b) for a, b in zip(parity, reference, strict=True))
    last = k_real - 1
    for lost in ({last}, {0}, {last, k_real + 1}):
        present = [i not in lost for i in range(k_real + m)]
        if not codec.can_recover(present):  # XOR: two losses in one group
            continue
        recv = np.full(k_real * cs, 0xEE, dtype=np.uint8)  # room for a full chunk at the end
        slots = [recv[i * cs : i * cs + c.size] for i, c in enumerate(data)]
        for i, c in enumerate(data):
            if i not in lost:
                slots[i][:] = c
        chunks = [*slots, *parity]
        codec.decode(chunks, present)
        for s, c in zip(slots, data, strict=True):
            assert np.array_equal(s, c)
        assert (recv[last * cs + last_len :] == 0xEE).all()  # nothing past the last chunk


def test_missing_parity_may_be_none() -> None:
    codec = MDSCodec(4, 2, 8)
    data = random_chunks(4, 8)
    p = codec.encode(list(data))
    got = lose([*data, *p], {3}, 4)
    codec.decode([*got[:4], None, p[1]], [True, True, True, False, False, True])
    assert np.array_equal(np.stack(got[:4]), data)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"k": 0, "m": 1, "chunk_size": 8}, "k=0"), ({"k": 2, "m": 1, "chunk_size": 0}, "chunk_size")],
)
def test_bad_geometry(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        XORCodec(**kwargs)


def test_bad_arguments_name_the_value() -> None:
    codec = XORCodec(4, 2, 8)
    with pytest.raises(ConfigError, match="9 bytes"):
        codec.encode([np.zeros(9, np.uint8)])
    with pytest.raises(ConfigError, match="1..4 chunks, got 5"):
        codec.encode([np.zeros(8, np.uint8)] * 5)
    with pytest.raises(ConfigError, match="parity_out"):
        codec.encode([np.zeros(8, np.uint8)], parity_out=[np.zeros(8, np.uint8)])
    with pytest.raises(ConfigError, match="read-only"):
        codec.decode([bytes(8), *codec.encode([bytes(8)])], [False, True, True])
    with pytest.raises(ConfigError, match="3 flags"):
        codec.decode([np.zeros(8, np.uint8)] * 3, [True])
    with pytest.raises(ConfigError, match="C-contiguous"):
        codec.encode([np.zeros(16, np.uint8)[::2]])


def test_registry() -> None:
    assert {"mds", "xor"} <= set(available_codecs())
    assert isinstance(get_codec("MDS", 32, 8, 65536), MDSCodec)
    assert isinstance(get_codec("xor", 32, 8, 65536), XORCodec)
    with pytest.raises(ConfigError, match="'nope' is not registered"):
        get_codec("nope", 4, 2, 8)
    with pytest.raises(ConfigError, match="already registered"):
        register_codec("xor", XORCodec)

    class Repeat(XORCodec):
        name = "test-repeat"

    register_codec("test-repeat", Repeat, replace=True)
    assert type(get_codec("test-repeat", 4, 4, 8)) is Repeat


def test_bad_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no_such_backend"):
        MDSCodec(4, 2, 8, ec_type="no_such_backend")


def test_backend_that_pads_payloads_is_refused() -> None:
    try:
        ECDriver(k=4, m=2, ec_type="liberasurecode_rs_vand")
    except Exception:
        pytest.skip("liberasurecode_rs_vand is not in this pyeclib build")
    # This backend pads 17-byte fragments to 18: chunks would not be fragment payloads.
    with pytest.raises(ConfigError, match="expected exactly chunk_size=17"):
        MDSCodec(4, 2, 17, ec_type="liberasurecode_rs_vand")


def test_cauchy_backend_also_round_trips() -> None:
    codec = MDSCodec(8, 3, 40, ec_type="isa_l_rs_cauchy")
    data = random_chunks(8, 40)
    lost = {0, 5, 9}
    got = lose([*data, *codec.encode(data)], lost, 8)
    codec.decode(got, [i not in lost for i in range(11)])
    assert np.array_equal(np.stack(got[:8]), data)
