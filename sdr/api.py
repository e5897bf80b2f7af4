"""Deprecated: the public API moved to :mod:`sdr.runtime` (and stays importable from ``sdr``).

``sdr.api.Context`` and friends still resolve, with a DeprecationWarning, for one release.
"""

from sdr.deprecation import moved_module

__getattr__ = moved_module("sdr.api", "sdr.runtime")
