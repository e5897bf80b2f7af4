"""Deprecated: moved to :mod:`sdr.backends.collectives.dtypes` (the collectives' runtime).

Names looked up here are imported from there on first use, with a DeprecationWarning.
"""

from sdr.deprecation import moved_module

__getattr__ = moved_module("sdr.collectives.dtypes", "sdr.backends.collectives.dtypes")
