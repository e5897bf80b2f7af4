"""Erasure codecs for the Erasure Coding reliability scheme (see ``docs/codecs.md``).

>>> codec = get_codec("mds", k=4, m=2, chunk_size=8)
>>> import numpy as np
>>> data = np.arange(32, dtype=np.uint8).reshape(4, 8)
>>> parity = codec.encode(list(data))
>>> chunks = [*data.copy(), *parity]
>>> chunks[1][:] = 0
>>> codec.decode(chunks, [True, False, True, True, True, True])
[1]
>>> bool((chunks[1] == data[1]).all())
True
"""

from sdr.codecs.base import Buffer, Codec, TooManyLosses
from sdr.codecs.registry import available_codecs, get_codec, register_codec
from sdr.codecs.xor import XORCodec


def _mds(k: int, m: int, chunk_size: int) -> Codec:
    """MDS through pyeclib, imported on first use (SR and XOR users need no pyeclib)."""
    from sdr.codecs.mds import MDSCodec

    return MDSCodec(k, m, chunk_size)


def __getattr__(name: str) -> object:
    if name == "MDSCodec":
        from sdr.codecs.mds import MDSCodec

        return MDSCodec
    raise AttributeError(f"module 'sdr.codecs' has no attribute {name!r}")


# the built-ins register in code; third parties may also use the "sdr.codecs" entry points
register_codec("mds", _mds)
register_codec("xor", XORCodec)
# mds-gpu and xor-gpu: the GPU driver's (sdr.backends.gpu.codecs, an entry point)

__all__ = [
    "Buffer",
    "Codec",
    "MDSCodec",
    "TooManyLosses",
    "XORCodec",
    "available_codecs",
    "get_codec",
    "register_codec",
]
