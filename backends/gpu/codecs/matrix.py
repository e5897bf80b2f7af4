"""GF(2^8) arithmetic and the coding matrices the GPU codec runs (host side, NumPy).

The GPU Reed-Solomon codec must produce parity bit-identical to the CPU ``mds`` codec
(ISA-L's ``isa_l_rs_vand_inv`` through pyeclib). Rather than re-deriving ISA-L's matrix
construction, :func:`generator_matrix` *measures* it: Reed-Solomon encoding is linear over
GF(2^8), so encoding a submessage whose chunk ``i`` holds the byte 1 at position ``i`` and
zeros elsewhere yields, at byte ``i`` of parity ``j``, the coefficient ``G[j, i]``. One
encode of a ``k``-byte-chunk submessage reads off the whole ``m x k`` matrix. The field is
GF(2^8) with polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), ISA-L's; the tests check the
measured matrix reproduces ISA-L's parity for random data.

Decoding any ``k`` surviving chunks is a matrix product too: stack the rows of the full
systematic matrix ``[I; G]`` for the survivors, invert (Gauss-Jordan over GF(2^8), a
``k x k`` matrix, microseconds), and the rows of the inverse for the missing data chunks
give each lost chunk as a combination of survivors. :func:`gf_matmul` is the reference
implementation of the product the GPU kernel computes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from sdr.errors import ConfigError

__all__ = [
    "POLY",
    "gf_mul",
    "gf_inv",
    "gf_matmul",
    "gf_invert_matrix",
    "generator_matrix",
    "decode_plan",
]

POLY = 0x11D
"""The reducing polynomial of ISA-L's GF(2^8)."""


@functools.cache
def _tables() -> tuple[np.ndarray, np.ndarray]:
    exp = np.zeros(512, dtype=np.int64)
    log = np.zeros(256, dtype=np.int64)
    x = 1
    for i in range(255):
        exp[i] = x
        log[x] = i
        x <<= 1
        if x & 0x100:
            x ^= POLY
    exp[255:510] = exp[:255]
    return exp, log


def gf_mul(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """Element-wise product in GF(2^8) (arrays broadcast)."""
    exp, log = _tables()
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    out = exp[log[a] + log[b]]
    return np.where((a == 0) | (b == 0), 0, out).astype(np.uint8)


def gf_inv(a: int) -> int:
    """Multiplicative inverse of a non-zero field element."""
    if not 0 < a < 256:
        raise ConfigError(f"GF(2^8) inverse of {a!r}: expected an element in 1..255")
    exp, log = _tables()
    return int(exp[(255 - log[a]) % 255])


def gf_matmul(coeffs: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``out[j] = XOR_i coeffs[j, i] * rows[i]`` over GF(2^8): the product the GPU computes.

    ``coeffs``: (r, n) uint8; ``rows``: (n, L) uint8. Returns (r, L) uint8.
    """
    coeffs = np.asarray(coeffs, dtype=np.uint8)
    rows = np.asarray(rows, dtype=np.uint8)
    out = np.zeros((coeffs.shape[0], rows.shape[1]), dtype=np.uint8)
    for j in range(coeffs.shape[0]):
        for i in range(coeffs.shape[1]):
            c = int(coeffs[j, i])
            if c:
                out[j] ^= gf_mul(c, rows[i])
    return out


def gf_invert_matrix(a: np.ndarray) -> np.ndarray:
    """Inverse of a square matrix over GF(2^8); ConfigError if it is singular."""
    n = a.shape[0]
    work = np.concatenate([np.asarray(a, dtype=np.uint8), np.eye(n, dtype=np.uint8)], axis=1)
    for col in range(n):
        pivots = np.flatnonzero(work[col:, col]) + col
        if not len(pivots):
            raise ConfigError(f"matrix is singular over GF(2^8) (column {col})")
        p = int(pivots[0])
        if p != col:
            work[[col, p]] = work[[p, col]]
        work[col] = gf_mul(gf_inv(int(work[col, col])), work[col])
        for r in range(n):
            if r != col and work[r, col]:
                work[r] ^= gf_mul(int(work[r, col]), work[col])
    return work[:, n:].copy()


@functools.cache
def _generator(k: int, m: int, ec_type: str) -> bytes:
    from sdr.codecs.mds import MDSCodec  # pyeclib: only when a matrix is first needed

    codec = MDSCodec(k, m, k, ec_type=ec_type)
    probe = np.eye(k, dtype=np.uint8)  # chunk i: byte i = 1
    parity = codec.encode(probe)
    return np.stack(parity).tobytes()


def generator_matrix(k: int, m: int, ec_type: str = "isa_l_rs_vand_inv") -> np.ndarray:
    """The ``m x k`` parity coefficients of the CPU ``mds`` codec, measured through pyeclib.

    Parity chunk ``j`` = XOR over ``i`` of ``G[j, i] * data_i`` in GF(2^8).
    """
    return np.frombuffer(_generator(k, m, ec_type), dtype=np.uint8).reshape(m, k).copy()


def decode_plan(
    generator: np.ndarray, present: Sequence[bool]
) -> tuple[list[int], list[int], np.ndarray]:
    """How to rebuild the lost data chunks of one submessage from ``k`` survivors.

    ``present``: ``k + m`` flags (data then parity). Returns ``(missing, survivors,
    coeffs)``: the lost data indices, the ``k`` chunk indices read (present data first,
    then parity), and the ``len(missing) x k`` matrix with ``lost[r] = XOR_s coeffs[r, s]
    * chunk[survivors[s]]``. ConfigError when fewer than ``k`` chunks survive.
    """
    m, k = generator.shape
    flags = [bool(p) for p in present]
    if len(flags) != k + m:
        raise ConfigError(f"present: expected {k + m} flags, got {len(flags)}")
    missing = [i for i in range(k) if not flags[i]]
    survivors = [i for i in range(k + m) if flags[i]][:k]
    if len(survivors) < k:
        raise ConfigError(f"only {len(survivors)} of {k + m} chunks present, need {k}")
    full = np.concatenate([np.eye(k, dtype=np.uint8), generator], axis=0)
    inverse = gf_invert_matrix(full[survivors])
    return missing, survivors, inverse[missing]
