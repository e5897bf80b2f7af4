"""Reliability schemes on the chunk bitmap: Selective Repeat and Erasure Coding.

Schemes are sans-I/O state machines (see :mod:`sdr.reliability.base`); the
:class:`ReliableQP` drives them over an SDR QP. See docs/reliability-schemes.md.
"""

from sdr.reliability.base import (
    Finished,
    Lane,
    ReopenChunks,
    Scheme,
    SchemeAction,
    SchemeReceiver,
    SchemeSender,
    SealChunks,
    SendChunks,
    SendControl,
    Status,
)
from sdr.reliability.config import ReliabilityConfig, load, load_config, loads
from sdr.reliability.erasure_coding import ErasureCoding, ErasureCodingMDS, ErasureCodingXOR
from sdr.reliability.handles import ReceiveHandle, WriteHandle, drive, wait_all
from sdr.reliability.registry import available_schemes, create_scheme, register_scheme
from sdr.reliability.reliable_qp import ReliableQP
from sdr.reliability.selective_repeat import SelectiveRepeat, SelectiveRepeatNack
from sdr.reliability.sr_receiver import SelectiveRepeatReceiver
from sdr.reliability.sr_sender import SelectiveRepeatSender

register_scheme("sr-rto", SelectiveRepeat)
register_scheme("sr-nack", SelectiveRepeatNack)
register_scheme("ec-mds", ErasureCodingMDS)
register_scheme("ec-xor", ErasureCodingXOR)

__all__ = [
    "ErasureCoding",
    "ErasureCodingMDS",
    "ErasureCodingXOR",
    "Finished",
    "Lane",
    "ReceiveHandle",
    "ReliabilityConfig",
    "ReliableQP",
    "Scheme",
    "SchemeAction",
    "SchemeReceiver",
    "SchemeSender",
    "SelectiveRepeat",
    "SelectiveRepeatNack",
    "SelectiveRepeatReceiver",
    "SelectiveRepeatSender",
    "SendChunks",
    "SealChunks",
    "ReopenChunks",
    "SendControl",
    "Status",
    "WriteHandle",
    "available_schemes",
    "create_scheme",
    "drive",
    "load",
    "load_config",
    "loads",
    "register_scheme",
    "wait_all",
]
