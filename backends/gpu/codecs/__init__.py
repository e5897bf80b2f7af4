"""Erasure codecs on the GPU: Reed-Solomon (bit-identical to the CPU ``mds``) and XOR.

- :mod:`~sdr.backends.gpu.codecs.device`: :class:`GpuRSCodec` and :class:`GpuXORCodec` on
  buffers already on the GPU (CuPy, torch CUDA, DLPack), read in place;
- :mod:`~sdr.backends.gpu.codecs.host_adapters`: the registered codecs ``mds-gpu`` and
  ``xor-gpu`` (:class:`sdr.codecs.Codec` on host buffers, copied through the GPU);
- :mod:`~sdr.backends.gpu.codecs.kernels`: the CUDA C source, compiled at run time;
- :mod:`~sdr.backends.gpu.codecs.matrix`: GF(2^8) coding matrices (host side, NumPy).

Importing this package registers ``mds-gpu`` and ``xor-gpu`` with :mod:`sdr.codecs`
(they are declared as ``sdr.codecs`` entry points too, so ``get_codec("mds-gpu", ...)``
finds them without this import in an installed SDK). Importing needs neither CuPy nor a
GPU; constructing a codec does. See docs/gpu-codec.md.
"""

from sdr.backends.gpu.codecs.device import GpuRSCodec, GpuXORCodec, as_device_bytes, gpu_available
from sdr.backends.gpu.codecs.host_adapters import GpuMDSHostCodec, GpuXORHostCodec
from sdr.codecs import available_codecs, register_codec

for _name, _factory in (("mds-gpu", GpuMDSHostCodec), ("xor-gpu", GpuXORHostCodec)):
    if _name not in available_codecs():  # known already when declared as an entry point
        register_codec(_name, _factory)

__all__ = [
    "GpuMDSHostCodec",
    "GpuRSCodec",
    "GpuXORCodec",
    "GpuXORHostCodec",
    "as_device_bytes",
    "gpu_available",
]
