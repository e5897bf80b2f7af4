"""Deprecated: resolving ``scheme = "auto"`` moved to :mod:`sdr.runtime.auto_scheme` (it runs
the simulator's selector, a layer above the core)."""

from sdr.deprecation import moved_module

__getattr__ = moved_module("sdr.reliability.auto", "sdr.runtime.auto_scheme")
