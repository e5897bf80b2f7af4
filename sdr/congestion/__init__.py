"""Congestion control and multipath, sans-I/O (docs/congestion.md).

>>> from sdr.congestion import controller_for
>>> cc = controller_for("delay", "1Gbit/s")
>>> cc.on_sent(0.0, 4096); cc.on_ack(0.025, 4096, rtt_s=0.025)
>>> cc.pacing_rate
1000000000.0
>>> controller_for("vegas", 1e9)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
sdr.errors.ConfigError: congestion 'vegas' is not a known congestion controller; expected ...

Controllers: ``fixed`` (:class:`FixedRate`), ``delay`` (:class:`DelayBased`), ``bbr``
(:class:`BbrLike`), ``auto`` (:func:`resolve_auto`). The path selector for multipath is
:class:`PathSelector` (:mod:`sdr.congestion.paths`).
"""

from sdr.congestion.base import CongestionController
from sdr.congestion.bbr import BbrLike
from sdr.congestion.delay import DelayBased
from sdr.congestion.fixed import FixedRate
from sdr.congestion.paths import PathSelector
from sdr.congestion.registry import (
    AUTO,
    CONTROLLERS,
    available_controllers,
    check_congestion_name,
    controller_for,
    register_controller,
    resolve_auto,
)

register_controller("fixed", FixedRate)
register_controller("delay", DelayBased)
register_controller("bbr", BbrLike)

__all__ = [
    "AUTO",
    "CONTROLLERS",
    "BbrLike",
    "CongestionController",
    "DelayBased",
    "FixedRate",
    "PathSelector",
    "available_controllers",
    "check_congestion_name",
    "controller_for",
    "register_controller",
    "resolve_auto",
]
