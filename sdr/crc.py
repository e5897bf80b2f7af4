"""CRC-32 (the zlib/IEEE polynomial): ISA-L's where the ``isal`` package is installed
(~23 GB/s per core with PCLMUL folding on x86-64, measured by benchmarks/final_check.py),
else zlib's (~4 GB/s). Both give the same value; ``CRC32_IMPLEMENTATION`` says which one
this process uses. The RoCEv2 ICRC and the per-chunk digests both use it."""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32

    CRC32_IMPLEMENTATION = "isal"
except ImportError:  # pragma: no cover - depends on the environment
    from zlib import crc32

    CRC32_IMPLEMENTATION = "zlib"

__all__ = ["crc32", "crc32_combine", "crc32_shift", "CRC32_IMPLEMENTATION"]

_POLY = 0xEDB88320  # reflected: bit 31 is x^0


def _mul(a: int, b: int) -> int:
    """a * b modulo the polynomial, both reflected."""
    product, bit = 0, 1 << 31
    while bit:
        if a & bit:
            product ^= b
        b = (b >> 1) ^ (_POLY if b & 1 else 0)
        bit >>= 1
    return product


def crc32_shift(n: int) -> int:
    """x^(8n) modulo the polynomial: what moves a CRC register across ``n`` zero bytes."""
    result, power = 1 << 31, 1 << 23  # x^0, x^8
    while n:
        if n & 1:
            result = _mul(result, power)
        power = _mul(power, power)
        n >>= 1
    return result


def crc32_combine(crc_a: int, crc_b: int, length_b: int) -> int:
    """The CRC-32 of A followed by B from crc32(A), crc32(B) and B's length (the
    register is linear: crc(A|B) = crc(A) x^(8|B|) + crc(B)). The Python reference of
    the native combination (``sdr._placement.chunk_sums``)."""
    return _mul(crc_a, crc32_shift(length_b)) ^ crc_b
