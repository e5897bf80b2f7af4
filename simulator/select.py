"""Scheme selection: the best reliability scheme and parameters for a link and write size.

This is what the SDK's ``scheme = "auto"`` configuration calls. Candidates are every
scheme in ``schemes`` with, for EC, every ``(k, m)`` in ``ec_codes``, and, when the drop
rate is per packet, every chunk size in ``chunk_sizes`` (with a per-chunk drop rate the
chunk size would change the loss process itself, so it stays fixed). Each candidate is
scored with the exact analytic model: the mean, or the p99.9 from the product-formula CDF.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sdr.errors import ConfigError
from sdr.simulator import analytic
from sdr.simulator.link import DropUnit, Link
from sdr.simulator.schemes import SCHEMES, SchemeSpec
from sdr.units import format_rate, format_size, format_time

__all__ = ["DEFAULT_EC_CODES", "Selection", "candidate_specs", "select_scheme"]

log = logging.getLogger(__name__)

Objective = Literal["mean", "p999"]

#: (k, m) codes tried by default: 20% and 25% overhead at several submessage sizes.
DEFAULT_EC_CODES: tuple[tuple[int, int], ...] = (
    (8, 2),
    (16, 4),
    (32, 8),
    (64, 16),
    (16, 2),
    (32, 4),
    (64, 8),
)
#: Chunk sizes tried when the drop rate is per packet (filtered to multiples of the MTU).
DEFAULT_CHUNK_SIZES: tuple[int, ...] = (4096, 16384, 65536, 262144, 1048576)


@dataclass(frozen=True)
class Selection:
    """The chosen scheme: its name, parameters and predicted mean and p99.9 (seconds)."""

    scheme: str
    params: dict[str, Any]
    mean_s: float
    p999_s: float
    objective: str = "mean"
    ranking: list[dict[str, Any]] = field(default_factory=list, repr=False)
    link: Link | None = field(default=None, repr=False)
    refused: list[str] = field(default_factory=list, repr=False)  # left out, and why

    def to_dict(self) -> dict[str, Any]:
        """The CLI's JSON shape: ``{"scheme", "params", "mean_s", "p999_s"}``."""
        return {
            "scheme": self.scheme,
            "params": dict(self.params),
            "mean_s": self.mean_s,
            "p999_s": self.p999_s,
        }

    def to_toml(self) -> str:
        """A ``[reliability]`` config snippet selecting this scheme.

        Uses the keys of the SDK's reliability config (``sdr.reliability.config``): the RTO
        is expressed as ``alpha`` (RTO = RTT + alpha * RTT), and the link's RTT and rate are
        included so T_INJ and the EC fallback timer match the prediction.
        """
        lines = ["[reliability]", f'scheme = "{self.scheme}"']
        alpha = self.link.alpha if self.link is not None else 2.0
        if self.scheme == "sr-rto":
            alpha = float(self.params["rto_rtts"]) - 1.0
        if self.link is not None:
            lines.append(f'rtt = "{format_time(self.link.rtt)}"')
            lines.append(f'link_rate = "{format_rate(self.link.rate)}"')
        lines.append(f"alpha = {alpha:.6g}" if alpha != int(alpha) else f"alpha = {alpha:.1f}")
        if "k" in self.params:
            lines.append(f"k = {self.params['k']}")
            lines.append(f"m = {self.params['m']}")
        lines.append(f'chunk_size = "{format_size(self.params["chunk_size"], exact=True)}"')
        return "\n".join(lines) + "\n"


def candidate_specs(
    link: Link,
    *,
    drop_unit: DropUnit,
    schemes: Iterable[str] = SCHEMES,
    ec_codes: Sequence[tuple[int, int]] = DEFAULT_EC_CODES,
    chunk_sizes: Sequence[int] | None = None,
    sr_rto_rtts: Sequence[float] | None = None,
) -> list[tuple[Link, SchemeSpec]]:
    """Every (link variant, scheme) pair the selector scores."""
    if chunk_sizes is None:
        chunk_sizes = DEFAULT_CHUNK_SIZES if drop_unit == "packet" else (link.chunk_size,)
    links = [link.with_chunk(c) for c in sorted(set(chunk_sizes)) if c % link.mtu == 0 and c > 0]
    if not links:
        raise ConfigError(f"no candidate chunk size is a multiple of the MTU ({link.mtu})")
    out: list[tuple[Link, SchemeSpec]] = []
    for variant in links:
        for name in schemes:
            if name == "sr-rto":
                for rto in sr_rto_rtts or (variant.default_rto_rtts,):
                    out.append((variant, SchemeSpec(name, rto_rtts=rto)))
            elif name == "sr-nack":
                out.append((variant, SchemeSpec(name)))
            elif name in ("ec-mds", "ec-xor"):
                out.extend((variant, SchemeSpec(name, k=k, m=m)) for k, m in ec_codes)
            else:
                raise ConfigError(f"unknown scheme {name!r}: expected one of {', '.join(SCHEMES)}")
    return out


def select_scheme(
    link: Link,
    size_bytes: int,
    drop: float,
    *,
    drop_unit: DropUnit = "chunk",
    objective: Objective = "mean",
    schemes: Iterable[str] = SCHEMES,
    ec_codes: Sequence[tuple[int, int]] = DEFAULT_EC_CODES,
    chunk_sizes: Sequence[int] | None = None,
    sr_rto_rtts: Sequence[float] | None = None,
) -> Selection:
    """Pick the scheme and parameters that minimize ``objective`` for this write.

    Args:
        link: the path (rate, RTT, MTU, chunk size, alpha).
        size_bytes: the write size.
        drop: loss probability per ``drop_unit``.
        objective: ``"mean"`` or ``"p999"`` (ties broken by the other one).

    Returns:
        A :class:`Selection` whose ``ranking`` lists every candidate, best first.
    """
    if objective not in ("mean", "p999"):
        raise ConfigError(f"objective must be 'mean' or 'p999', got {objective!r}")
    scored: list[dict[str, Any]] = []
    refused: list[str] = []  # candidates the model cannot evaluate, and why
    for variant, spec in candidate_specs(
        link,
        drop_unit=drop_unit,
        schemes=schemes,
        ec_codes=ec_codes,
        chunk_sizes=chunk_sizes,
        sr_rto_rtts=sr_rto_rtts,
    ):
        p = variant.chunk_drop(drop, drop_unit)
        try:
            mean = analytic.scheme_mean(variant, size_bytes, p, spec)
            p999 = (
                analytic.scheme_quantile(0.999, variant, size_bytes, p, spec)
                if objective == "p999"
                else None
            )
        except ConfigError as exc:  # e.g. a chunk so large that nearly every copy is lost
            refused.append(f"{spec.name} with {variant.chunk_size} B chunks: {exc}")
            continue
        scored.append(
            {
                "scheme": spec.name,
                "params": spec.params(variant),
                "mean_s": mean,
                "p999_s": p999,
                "_v": (variant, spec, p),
            }
        )
    if not scored:
        why = f" (the model refused every one; first: {refused[0]})" if refused else ""
        raise ConfigError(f"no candidate schemes to choose from{why}")
    if refused:
        log.info("%d candidates left out: %s", len(refused), "; ".join(refused))
    key = "p999_s" if objective == "p999" else "mean_s"
    scored.sort(key=lambda row: (row[key], row["mean_s"]))
    best = scored[0]
    if best["p999_s"] is None:
        variant, spec, p = best["_v"]
        best["p999_s"] = analytic.scheme_quantile(0.999, variant, size_bytes, p, spec)
    for row in scored:
        row.pop("_v")
    log.debug("selected %s %s out of %d candidates", best["scheme"], best["params"], len(scored))
    return Selection(
        scheme=best["scheme"],
        params=best["params"],
        mean_s=best["mean_s"],
        p999_s=best["p999_s"],
        objective=objective,
        ranking=scored,
        link=link.with_chunk(int(best["params"]["chunk_size"])),
        refused=refused,
    )
