"""Models of long-haul links and reliability schemes: analytic, Monte Carlo, selection.

Imports the core :mod:`sdr` package only (never ``backends`` or the CLI). The main entry
points are :class:`~simulator.link.Link`, :func:`~simulator.evaluate.evaluate` and
:func:`~simulator.select.select_scheme`.
"""

from simulator.evaluate import Estimate, evaluate
from simulator.link import FIBRE_PROPAGATION_SPEED, PAPER_PROPAGATION_SPEED, Link
from simulator.schemes import SCHEMES, SchemeSpec
from simulator.select import Selection, select_scheme

__all__ = [
    "FIBRE_PROPAGATION_SPEED",
    "PAPER_PROPAGATION_SPEED",
    "SCHEMES",
    "Estimate",
    "Link",
    "SchemeSpec",
    "Selection",
    "evaluate",
    "select_scheme",
]
