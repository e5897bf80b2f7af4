"""Turn command-line style loss options into a simulator loss model."""

from __future__ import annotations

from sdr.simulator.loss import Bernoulli, GilbertElliott, LossModel, SizeDependent, TraceReplay

__all__ = ["loss_model"]


def loss_model(
    loss: float = 0.0, burst: float | None = None, per_size: bool = False, trace: str | None = None
) -> LossModel:
    """Bernoulli ``loss`` per packet by default; bursts of mean ``burst`` packets
    (Gilbert-Elliott) at the same long-run rate; ``per_size`` scales the rate with the
    packet size (reference 4 KiB); ``trace`` replays a 0/1 file."""
    if trace:
        return TraceReplay.from_file(trace)
    if burst and burst > 1 and loss > 0:
        return GilbertElliott.from_rate(loss, mean_burst=burst)
    if per_size:
        return SizeDependent(loss)
    return Bernoulli(loss)
