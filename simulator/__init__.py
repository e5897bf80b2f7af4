"""Models of long-haul links and reliability schemes: analytic, Monte Carlo, selection.

Imports the core :mod:`sdr` package only (never ``backends`` or the CLI). The main entry
points are :class:`~sdr.simulator.link.Link`, :func:`~sdr.simulator.evaluate.evaluate` and
:func:`~sdr.simulator.select.select_scheme`; the packet-level link that the simulator and
the WAN emulator share is :class:`~sdr.simulator.link_model.LinkSpec`. They load on first
use (PEP 562), so that code needing only the link or loss models (the WAN emulator) does
not pay for SciPy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Estimate": "sdr.simulator.evaluate",
    "evaluate": "sdr.simulator.evaluate",
    "FIBRE_PROPAGATION_SPEED": "sdr.simulator.link",
    "PAPER_PROPAGATION_SPEED": "sdr.simulator.link",
    "Link": "sdr.simulator.link",
    "LinkDirection": "sdr.simulator.link_model",
    "LinkSpec": "sdr.simulator.link_model",
    "register_loss_model": "sdr.simulator.loss_registry",
    "SCHEMES": "sdr.simulator.schemes",
    "SchemeSpec": "sdr.simulator.schemes",
    "Selection": "sdr.simulator.select",
    "select_scheme": "sdr.simulator.select",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
