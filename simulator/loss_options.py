"""The one parser of loss options: command-line style values to a loss model.

``sdr sim`` and ``sdr emulate`` (and any script) describe a link's losses the same way: a
long-run rate, optionally bursty (``burst``: mean burst length in packets, Gilbert-Elliott),
optionally growing with the packet size, or a replayed trace; or a registered model by name
with its parameters (:func:`parse_loss_spec`). Models are built through the loss model
registry (:mod:`sdr.simulator.loss_registry`), so a plug-in is reachable the same way.
"""

from __future__ import annotations

from sdr.errors import ConfigError
from sdr.simulator.loss import LossModel
from sdr.simulator.loss_registry import LOSS_MODELS, make_loss_model

__all__ = ["loss_model", "parse_loss_spec"]


def loss_model(
    loss: float = 0.0,
    burst: float | None = None,
    per_size: bool = False,
    trace: str | None = None,
) -> LossModel:
    """The loss model of the common options.

    ``loss``: per-packet probability (the long-run rate with ``burst``); ``burst``: mean
    burst length in packets (>= 1) of Gilbert-Elliott losses at that rate (None or 0: i.i.d.
    losses); ``per_size``: the rate is that of a 4 KiB packet and grows with the size;
    ``trace``: replay this 0/1 file instead (the other options are then ignored).
    """
    if trace:
        return make_loss_model("trace", path=trace)
    if burst:
        return make_loss_model("gilbert-elliott", rate=loss, burst=burst)
    if per_size:
        return make_loss_model("size-dependent", rate=loss)
    return make_loss_model("bernoulli", rate=loss)


def _value(text: str) -> object:
    """A parameter value: an int, a float, true/false, or the text itself."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_loss_spec(text: str) -> LossModel:
    """A registered loss model from ``"NAME"`` or ``"NAME:key=value,key=value"``.

    E.g. ``"bernoulli:rate=1e-3"``, ``"gilbert-elliott:rate=0.01,burst=8"``,
    ``"trace:path=loss.txt"``. Values are numbers, ``true``/``false`` or text.
    """
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    if not name:
        raise ConfigError(f"loss model {text!r}: expected NAME or NAME:key=value,...")
    params: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not key.strip().isidentifier():
            raise ConfigError(
                f"loss model {text!r}: {item!r} is not key=value; known models: "
                f"{LOSS_MODELS.names()}"
            )
        params[key.strip()] = _value(value.strip())
    return make_loss_model(name, **params)
