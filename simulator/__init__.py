"""Models of long-haul links and reliability schemes: analytic, Monte Carlo, selection.

Imports the core :mod:`sdr` package only (never ``backends`` or the CLI). The main entry
points are :class:`~simulator.link.Link`, :func:`~simulator.evaluate.evaluate` and
:func:`~simulator.select.select_scheme`. They load on first use (PEP 562), so that code
needing only the link or loss models (the WAN emulator) does not pay for SciPy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Estimate": "simulator.evaluate",
    "evaluate": "simulator.evaluate",
    "FIBRE_PROPAGATION_SPEED": "simulator.link",
    "PAPER_PROPAGATION_SPEED": "simulator.link",
    "Link": "simulator.link",
    "SCHEMES": "simulator.schemes",
    "SchemeSpec": "simulator.schemes",
    "Selection": "simulator.select",
    "select_scheme": "simulator.select",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
