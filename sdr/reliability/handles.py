"""Deprecated: the reliable handles and waits moved to :mod:`sdr.runtime.handles`."""

from sdr.deprecation import moved_module

__getattr__ = moved_module("sdr.reliability.handles", "sdr.runtime.handles")
