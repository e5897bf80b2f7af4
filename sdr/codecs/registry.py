"""Find a codec by name ("mds", "xor"); users register their own with :func:`register_codec`."""

from __future__ import annotations

from collections.abc import Callable

from sdr.codecs.base import Codec
from sdr.errors import ConfigError

#: A factory builds a codec from ``(k, m, chunk_size)``; a Codec subclass is one.
CodecFactory = Callable[[int, int, int], Codec]

_REGISTRY: dict[str, CodecFactory] = {}


def register_codec(name: str, factory: CodecFactory, *, replace: bool = False) -> None:
    """Make ``factory`` available as ``get_codec(name, ...)``.

    Raises :class:`ConfigError` if ``name`` is taken, unless ``replace`` is true.
    """
    key = name.lower()
    if key in _REGISTRY and not replace:
        raise ConfigError(f"codec {name!r} is already registered; pass replace=True to override")
    _REGISTRY[key] = factory


def get_codec(name: str, k: int, m: int, chunk_size: int) -> Codec:
    """Build the codec registered as ``name`` for ``k`` data and ``m`` parity chunks."""
    try:
        factory = _REGISTRY[name.lower()]
    except KeyError:
        raise ConfigError(
            f"codec {name!r} is not registered; expected one of {available_codecs()}"
        ) from None
    return factory(k, m, chunk_size)


def available_codecs() -> list[str]:
    """Names of the registered codecs, sorted."""
    return sorted(_REGISTRY)
