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
from sdr.codecs.gpu import GpuMDSHostCodec, GpuXORHostCodec
from sdr.codecs.mds import MDSCodec
from sdr.codecs.registry import available_codecs, get_codec, register_codec
from sdr.codecs.xor import XORCodec

register_codec("mds", MDSCodec)
register_codec("xor", XORCodec)
register_codec("mds-gpu", GpuMDSHostCodec)  # needs CuPy and a GPU when built
register_codec("xor-gpu", GpuXORHostCodec)

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
