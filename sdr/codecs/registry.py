"""Find a codec by name ("mds", "xor"); users add their own in one of two ways.

In code, with :func:`register_codec`; from an installed distribution, with an entry point
of the ``sdr.codecs`` group (loaded on first use)::

    [project.entry-points."sdr.codecs"]
    mirror = "my_package.codecs:Mirror"

Either way the name maps to a factory ``(k, m, chunk_size) -> Codec``; a Codec subclass
is one. Names are case-insensitive.
"""

from __future__ import annotations

from collections.abc import Callable

from sdr.codecs.base import Codec
from sdr.errors import ConfigError
from sdr.registry import Registry

__all__ = ["CODECS", "GROUP", "CodecFactory", "available_codecs", "get_codec", "register_codec"]

#: A factory builds a codec from ``(k, m, chunk_size)``; a Codec subclass is one.
CodecFactory = Callable[[int, int, int], Codec]

GROUP = "sdr.codecs"
"""The entry-point group third-party codecs are declared in."""

CODECS: Registry[CodecFactory] = Registry("codec", GROUP)
"""Every known codec: the built-ins (registered by :mod:`sdr.codecs`), the ones registered
in code and the ``sdr.codecs`` entry points."""


def register_codec(name: str, factory: CodecFactory, *, replace: bool = False) -> None:
    """Make ``factory`` available as ``get_codec(name, ...)``.

    Raises :class:`ConfigError` if ``name`` is taken, unless ``replace`` is true.
    """
    CODECS.register(name, factory, replace=replace)


def get_codec(name: str, k: int, m: int, chunk_size: int) -> Codec:
    """Build the codec registered as ``name`` for ``k`` data and ``m`` parity chunks."""
    if name not in CODECS:
        raise ConfigError(f"codec {name!r} is not registered; expected one of {available_codecs()}")
    return CODECS.get(name)(k, m, chunk_size)


def available_codecs() -> list[str]:
    """Names of the known codecs (registered in code or as entry points), sorted."""
    return CODECS.names()
