"""Deprecated: the GPU codecs moved to the GPU driver, :mod:`sdr.backends.gpu.codecs`.

Names looked up here are imported from there on first use, with a DeprecationWarning.
"""

from sdr.deprecation import moved_module

__getattr__ = moved_module("sdr.codecs.gpu", "sdr.backends.gpu.codecs")
