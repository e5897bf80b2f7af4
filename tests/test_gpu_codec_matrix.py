"""The GPU codec's coding matrices, checked on the CPU against pyeclib/ISA-L.

The GPU kernel computes exactly :func:`gf_matmul`; if the measured generator matrix
reproduces ISA-L's parity here, the GPU parity is bit-identical when the kernel is right
(tests/test_gpu_codec.py checks that part on a GPU).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdr.backends.gpu.codecs.matrix import (
    decode_plan,
    generator_matrix,
    gf_inv,
    gf_invert_matrix,
    gf_matmul,
    gf_mul,
)
from sdr.codecs import get_codec
from sdr.errors import ConfigError


@pytest.mark.parametrize(("k", "m"), [(4, 2), (8, 2), (32, 8), (10, 4)])
def test_measured_generator_reproduces_isal_parity(k, m):
    rng = np.random.default_rng(k * 100 + m)
    data = rng.integers(0, 256, (k, 512), dtype=np.uint8)
    parity = np.stack(get_codec("mds", k, m, 512).encode(data))
    assert np.array_equal(gf_matmul(generator_matrix(k, m), data), parity)


def test_generator_is_systematic_vandermonde_inverse_shape():
    g = generator_matrix(32, 8)
    assert g.shape == (8, 32) and g.dtype == np.uint8
    assert (g != 0).all()  # every parity chunk depends on every data chunk


@pytest.mark.parametrize("seed", range(6))
def test_decode_plan_rebuilds_up_to_m_lost_chunks(seed):
    k, m = 16, 4
    rng = np.random.default_rng(seed)
    g = generator_matrix(k, m)
    data = rng.integers(0, 256, (k, 64), dtype=np.uint8)
    chunks = np.concatenate([data, gf_matmul(g, data)])
    present = np.ones(k + m, dtype=bool)
    present[rng.choice(k + m, size=int(rng.integers(1, m + 1)), replace=False)] = False
    missing, survivors, coeffs = decode_plan(g, present.tolist())
    assert missing == [i for i in range(k) if not present[i]]
    assert len(survivors) == k and all(present[s] for s in survivors)
    assert np.array_equal(gf_matmul(coeffs, chunks[survivors]), data[missing])


def test_decode_plan_refuses_more_than_m_losses():
    with pytest.raises(ConfigError, match="need 8"):
        decode_plan(generator_matrix(8, 2), [False] * 3 + [True] * 7)


def test_singular_matrix_is_refused():
    with pytest.raises(ConfigError, match="singular"):
        gf_invert_matrix(np.array([[1, 2], [2, 4]], dtype=np.uint8))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 255), st.integers(0, 255), st.integers(0, 255))
def test_field_axioms(a, b, c):
    assert int(gf_mul(a, gf_inv(a))) == 1
    assert int(gf_mul(a, b)) == int(gf_mul(b, a))
    assert int(gf_mul(a, b ^ c)) == int(gf_mul(a, b)) ^ int(gf_mul(a, c))


def test_matrix_inverse_round_trip():
    rng = np.random.default_rng(3)
    g = generator_matrix(6, 3)
    full = np.concatenate([np.eye(6, dtype=np.uint8), g])
    a = full[[0, 2, 4, 6, 7, 8]]
    inv = gf_invert_matrix(a)
    x = rng.integers(0, 256, (6, 16), dtype=np.uint8)
    assert np.array_equal(gf_matmul(inv, gf_matmul(a, x)), x)


def test_gpu_codec_defaults_to_the_cpu_codecs_backend():
    from sdr.backends.gpu.codecs.device import _EC_TYPE
    from sdr.codecs.mds import DEFAULT_EC_TYPE

    assert _EC_TYPE == DEFAULT_EC_TYPE
