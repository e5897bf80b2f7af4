"""Selective Repeat schemes: ``sr-rto`` (timeouts only) and ``sr-nack`` (NACK holes at once).

The paper's SR RTO uses RTO = 3 RTT (alpha = 2); its SR NACK approximates negative ACKs
with RTO = 1 RTT. Here ``sr-nack`` sends real NACKs: the receiver reports a hole as soon
as a later chunk shows it and the sender retransmits at once; the RTO stays as the
backstop for lost tails and lost NACKs.
"""

from __future__ import annotations

from typing import ClassVar

from sdr.reliability.base import Scheme
from sdr.reliability.sr_receiver import SelectiveRepeatReceiver
from sdr.reliability.sr_sender import SelectiveRepeatSender

__all__ = ["SelectiveRepeat", "SelectiveRepeatNack"]


class SelectiveRepeat(Scheme):
    """``sr-rto``: stream every chunk; retransmit after RTO = rtt * (1 + alpha)."""

    sender_class = SelectiveRepeatSender
    receiver_class = SelectiveRepeatReceiver


class SelectiveRepeatNack(SelectiveRepeat):
    """``sr-nack``: like ``sr-rto``, plus NACKs of holes for immediate retransmission."""

    nack_holes: ClassVar[bool] = True  # declared by sdr.reliability.base.Scheme
