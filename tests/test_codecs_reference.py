"""Cross-check the MDS codec against an independent Reed-Solomon written here in plain Python.

The reference builds the systematic generator ``E = V * inv(V[:k])`` from the Vandermonde
matrix ``V[i][j] = a_i ** j`` with points ``a_i = 2 ** i`` over GF(2^8) (polynomial 0x11d),
the construction whose any ``k`` rows are invertible, so the code is MDS. It then encodes
and decodes with its own field arithmetic and must agree byte for byte with pyeclib/ISA-L.
"""

from __future__ import annotations

from functools import reduce

import numpy as np
import pytest

from sdr.codecs import MDSCodec

# ---------------------------------------------------------------- GF(2^8), poly 0x11d
EXP = [0] * 510
LOG = [0] * 256
_x = 1
for _i in range(255):
    EXP[_i] = EXP[_i + 255] = _x
    LOG[_x] = _i
    _x <<= 1
    if _x & 0x100:
        _x ^= 0x11D

MUL = np.zeros((256, 256), dtype=np.uint8)  # MUL[a, b] = a * b
for _a in range(1, 256):
    MUL[_a, 1:] = [EXP[LOG[_a] + LOG[_b]] for _b in range(1, 256)]


def gf_inv(a: int) -> int:
    return EXP[255 - LOG[a]]


def mat_mul(a: list[list[int]], b: list[list[int]]) -> list[list[int]]:
    def dot(row: list[int], col: tuple[int, ...]) -> int:
        return reduce(lambda acc, pair: acc ^ int(MUL[pair]), zip(row, col, strict=True), 0)

    cols = list(zip(*b, strict=True))
    return [[dot(row, col) for col in cols] for row in a]


def mat_inv(a: list[list[int]]) -> list[list[int]]:
    """Gauss-Jordan inverse over GF(2^8); raises if singular."""
    n = len(a)
    aug = [list(row) + [int(i == j) for j in range(n)] for i, row in enumerate(a)]
    for c in range(n):
        pivot = next(r for r in range(c, n) if aug[r][c])
        aug[c], aug[pivot] = aug[pivot], aug[c]
        scale = gf_inv(aug[c][c])
        aug[c] = [int(MUL[scale, v]) for v in aug[c]]
        for r in range(n):
            if r != c and aug[r][c]:
                f = aug[r][c]
                aug[r] = [v ^ int(MUL[f, w]) for v, w in zip(aug[r], aug[c], strict=True)]
    return [row[n:] for row in aug]


def generator(k: int, m: int) -> list[list[int]]:
    """The (k+m) x k systematic generator matrix of the reference code."""
    points = [EXP[i] for i in range(k + m)]
    vand = [[EXP[(LOG[p] * j) % 255] for j in range(k)] for p in points]
    return mat_mul(vand, mat_inv(vand[:k]))


def apply(rows: list[list[int]], chunks: np.ndarray) -> np.ndarray:
    """Each output chunk r = sum_j rows[r][j] * chunks[j] (bytewise, in GF(2^8))."""
    out = np.zeros((len(rows), chunks.shape[1]), dtype=np.uint8)
    for r, row in enumerate(rows):
        for j, coef in enumerate(row):
            out[r] ^= MUL[coef][chunks[j]]
    return out


# ---------------------------------------------------------------- tests
def test_reference_generator_is_systematic() -> None:
    g = generator(5, 3)
    assert g[:5] == [[int(i == j) for j in range(5)] for i in range(5)]


@pytest.mark.parametrize(("k", "m"), [(2, 1), (4, 2), (6, 3), (10, 4), (32, 8)])
def test_mds_parity_matches_reference(k: int, m: int) -> None:
    rng = np.random.default_rng(k * 100 + m)
    data = rng.integers(0, 256, size=(k, 24), dtype=np.uint8)
    parity = MDSCodec(k, m, 24).encode(list(data))
    expected = apply(generator(k, m)[k:], data)
    assert np.array_equal(np.stack(parity), expected)


@pytest.mark.parametrize("seed", range(3))
def test_mds_decode_matches_reference_decode(seed: int) -> None:
    """Lose m random chunks of a (32, 8) submessage; both decoders rebuild the same data."""
    k, m, cs = 32, 8, 16
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(k, cs), dtype=np.uint8)
    codec = MDSCodec(k, m, cs)
    chunks = np.concatenate([data, np.stack(codec.encode(list(data)))])
    lost = set(rng.choice(k + m, size=m, replace=False).tolist())
    kept = [i for i in range(k + m) if i not in lost][:k]
    g = generator(k, m)
    ours = apply(mat_inv([g[i] for i in kept]), chunks[kept])
    assert np.array_equal(ours, data)

    received = chunks.copy()
    received[sorted(lost)] = 0
    views = list(received)
    codec.decode(views, [i not in lost for i in range(k + m)])
    assert np.array_equal(received[:k], ours)
