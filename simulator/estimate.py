"""What every evaluation method returns: :class:`Estimate`, one write's predicted time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Estimate"]


@dataclass(frozen=True)
class Estimate:
    """Predicted completion time of one write (all times in seconds).

    ``quantile_method`` says where p50/p99/p99.9 come from: ``"analytic-cdf"`` (exact
    quantiles of the product-formula CDF), ``"montecarlo"`` (sampled, with ``*_ci_s``) or
    ``"des"`` (simulated writes of the real protocol, with ``*_ci_s``).
    ``fallback_probability`` is P(EC needs its SR fallback), ``None`` for SR schemes.
    """

    scheme: str
    params: dict[str, Any]
    method: str
    size_bytes: int
    chunk_drop_probability: float
    mean_s: float
    p50_s: float | None
    p99_s: float | None
    p999_s: float | None
    ideal_s: float
    fallback_probability: float | None
    quantile_method: str
    samples: int | None = None
    seed: int | None = None
    mean_ci_s: tuple[float, float] | None = None
    p50_ci_s: tuple[float, float] | None = None
    p99_ci_s: tuple[float, float] | None = None
    p999_ci_s: tuple[float, float] | None = None
    analytic_mean_s: float | None = None
    analytic_p999_s: float | None = None
    mean_bound_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def slowdown_mean(self) -> float:
        """Mean completion time over the ideal (lossless) time."""
        return self.mean_s / self.ideal_s

    @property
    def slowdown_p999(self) -> float | None:
        """p99.9 completion time over the ideal time."""
        return None if self.p999_s is None else self.p999_s / self.ideal_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the CLI's keys (``mean_s``, ``p999_s``, ``slowdown_*`` ...)."""
        out = asdict(self)
        out.pop("extra")
        out.update(self.extra)
        out["slowdown_mean"] = self.slowdown_mean
        out["slowdown_p999"] = self.slowdown_p999
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out
