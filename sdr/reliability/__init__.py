"""Reliability schemes on the chunk bitmap: Selective Repeat and Erasure Coding.

Schemes are sans-I/O state machines (see :mod:`sdr.reliability.base`); a
:class:`ReliableConnection` runs them over an SDR QP core, sans-I/O too, and the blocking
shell :class:`sdr.ReliableQP` (:mod:`sdr.runtime`) drives that. See
docs/reliability-schemes.md.
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
    SendMessage,
    Status,
)
from sdr.reliability.config import ReliabilityConfig, load, loads
from sdr.reliability.connection import ReliableConnection
from sdr.reliability.erasure_coding import ErasureCoding, ErasureCodingMDS, ErasureCodingXOR
from sdr.reliability.events import (
    Event,
    MessageFailedEvent,
    ReceiveCompleted,
    WriteCompleted,
)
from sdr.reliability.registry import (
    available_schemes,
    check_scheme_name,
    create_scheme,
    register_scheme,
)
from sdr.reliability.rto_check import RtoWarning
from sdr.reliability.selective_repeat import SelectiveRepeat, SelectiveRepeatNack
from sdr.reliability.sr_receiver import SelectiveRepeatReceiver
from sdr.reliability.sr_sender import SelectiveRepeatSender

# the built-ins register in code; third parties may also use the "sdr.schemes" entry points
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
    "Event",
    "MessageFailedEvent",
    "ReceiveCompleted",
    "WriteCompleted",
    "ReliableConnection",
    "ReliabilityConfig",
    "RtoWarning",
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
    "SendMessage",
    "Status",
    "available_schemes",
    "check_scheme_name",
    "create_scheme",
    "load",
    "loads",
    "register_scheme",
]
