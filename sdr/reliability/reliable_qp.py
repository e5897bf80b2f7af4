"""Deprecated: ReliableQP moved to :mod:`sdr.runtime.reliable_qp` (``sdr.ReliableQP``);
its sans-I/O protocol is :class:`sdr.reliability.ReliableConnection`."""

from sdr.deprecation import moved_module

__getattr__ = moved_module("sdr.reliability.reliable_qp", "sdr.runtime.reliable_qp")
