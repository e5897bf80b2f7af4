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

__all__ = ["crc32", "CRC32_IMPLEMENTATION"]
