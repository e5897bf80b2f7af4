"""The deadline of a deadline-bounded allreduce, from the model.

For a write of ``size_bytes`` over ``link`` with drop rate ``drop``, every candidate
scheme of the selector (:func:`~sdr.simulator.select.candidate_specs`) has an exact
completion-time distribution (the analytic product-formula CDF). The deadline for
probability ``q`` is the smallest q-quantile among them: the scheme that has the whole
write there by then with probability ``q``, sooner than any other. Past it, a deadline
allreduce takes what arrived; before it, the write is usually still coming.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdr.errors import ConfigError
from sdr.simulator import analytic
from sdr.simulator.link import DropUnit, Link
from sdr.simulator.schemes import SCHEMES, SchemeSpec
from sdr.simulator.select import candidate_specs

__all__ = ["Deadline", "deadline_for"]


@dataclass(frozen=True)
class Deadline:
    """The deadline ``seconds`` by which ``scheme`` completes with probability ``q``."""

    seconds: float
    q: float
    scheme: SchemeSpec
    link: Link
    size_bytes: int
    ideal_s: float
    """The write's lossless time: serialization plus one RTT."""


def deadline_for(
    link: Link,
    size_bytes: int,
    drop: float,
    *,
    q: float = 0.99,
    drop_unit: DropUnit = "chunk",
    schemes: tuple[str, ...] = SCHEMES,
) -> Deadline:
    """The smallest q-quantile of the completion time over the candidate schemes."""
    if not 0 < q < 1:
        raise ConfigError(f"q must be in (0, 1), got {q}")
    if size_bytes <= 0:
        raise ConfigError(f"size must be > 0 bytes, got {size_bytes}")
    best: tuple[float, Link, SchemeSpec] | None = None
    for variant, spec in candidate_specs(link, drop_unit=drop_unit, schemes=schemes):
        try:
            t = analytic.scheme_quantile(
                q, variant, size_bytes, variant.chunk_drop(drop, drop_unit), spec
            )
        except ConfigError:
            continue  # outside what the model evaluates (as the selector): not a candidate
        if best is None or t < best[0]:
            best = (t, variant, spec)
    if best is None:
        raise ConfigError(f"no scheme can be evaluated for {size_bytes} B at drop {drop:g}")
    t, variant, spec = best
    ideal = size_bytes * 8 / variant.rate + variant.rtt
    return Deadline(t, q, spec, variant, size_bytes, ideal)
