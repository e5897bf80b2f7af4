"""The codec conformance suite: every registered erasure codec passes the same tests.

Codecs come from the registry (``sdr.codecs.available_codecs()``: the built-ins, the ones
registered in code before collection and every ``sdr.codecs`` entry point), so a new codec
is tested without touching this file. For several (k, m) shapes, full and short (the last
submessage of a message, a short last chunk), every erasure pattern the codec says it can
recover (``can_recover``) must give back the exact data, and every other pattern must
raise TooManyLosses without writing a buffer. Bad k and m are ConfigErrors; a codec may
also refuse, with a ConfigError, a shape it cannot code (it must accept one of SHAPES). GPU codecs
(names ending in ``-gpu``) are skipped where no GPU is.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sdr.codecs import Codec, TooManyLosses, available_codecs, get_codec
from sdr.errors import ConfigError

CODECS = available_codecs()
CHUNK = 64  # a multiple of 16, as the GPU codecs need
SHAPES = [(1, 1), (3, 2), (4, 4), (5, 3)]


def _gpu_available() -> bool:
    try:
        from sdr.backends.gpu.codecs import gpu_available
    except ImportError:
        return False
    return gpu_available()


@pytest.fixture(params=CODECS)
def name(request: pytest.FixtureRequest) -> str:
    if request.param.endswith("-gpu") and not _gpu_available():
        pytest.skip(f"codec {request.param!r} needs CuPy and a CUDA device")
    return request.param


def _round_trips(codec: Codec, k_real: int, last: int, seed: int) -> tuple[int, int]:
    """Every erasure pattern of one submessage; returns (recovered, refused) counts."""
    rng = np.random.default_rng(seed)
    sizes = [CHUNK] * (k_real - 1) + [last]
    data = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    parity = codec.encode(data)
    assert len(parity) == codec.m and all(p.size == CHUNK for p in parity)
    assert codec.can_recover([True] * (k_real + codec.m)), "nothing lost is recoverable"
    recovered = refused = 0  # patterns with a lost data chunk
    for present in itertools.product((True, False), repeat=k_real + codec.m):
        chunks = [d.copy() for d in data] + [p.copy() for p in parity]
        for i, here in enumerate(present):
            if not here:
                chunks[i][:] = 0xA5  # garbage where the chunk did not land
        lost = [i for i in range(k_real) if not present[i]]
        if codec.can_recover(list(present)):
            assert sorted(codec.decode(chunks, list(present))) == lost
            for i in range(k_real):
                assert np.array_equal(chunks[i], data[i]), f"pattern {present}: chunk {i}"
            recovered += bool(lost)
        elif lost:
            before = [c.copy() for c in chunks]
            with pytest.raises(TooManyLosses):
                codec.decode(chunks, list(present))
            assert all(np.array_equal(a, b) for a, b in zip(chunks, before, strict=True))
            refused += 1
    return recovered, refused


def _codec_or_skip(name: str, k: int, m: int) -> Codec:
    try:
        return get_codec(name, k, m, CHUNK)
    except ConfigError as exc:  # a codec may refuse shapes it cannot code, clearly
        pytest.skip(f"{name} refuses (k={k}, m={m}): {exc}")


def test_the_codec_supports_some_shape(name: str) -> None:
    supported = []
    for k, m in SHAPES:
        try:
            supported.append(get_codec(name, k, m, CHUNK))
        except ConfigError:
            continue
    assert supported, f"{name} refuses every (k, m) of {SHAPES}"


@pytest.mark.parametrize(("k", "m"), SHAPES)
def test_every_recoverable_erasure_pattern_round_trips(name: str, k: int, m: int) -> None:
    codec = _codec_or_skip(name, k, m)
    assert isinstance(codec, Codec) and (codec.k, codec.m) == (k, m)
    recovered, _ = _round_trips(codec, k, CHUNK, seed=k * 10 + m)
    assert recovered, f"({k}, {m}): no lost data chunk is ever recovered"
    if k > 1:  # the last submessage of a message: fewer data chunks, a short last one
        _round_trips(codec, k - 1, CHUNK // 2 - 3, seed=k * 10 + m + 1)


@pytest.mark.parametrize(
    ("k", "m"), [(0, 2), (4, 0), (-1, 2), (4, -3), (2.0, 2), (2, "2"), (True, 2), (None, 1)]
)
def test_bad_k_and_m_are_config_errors(name: str, k: object, m: object) -> None:
    with pytest.raises(ConfigError):
        get_codec(name, k, m, CHUNK)  # type: ignore[arg-type]
