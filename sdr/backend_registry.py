"""Backends are found by name through the ``sdr.backends`` entry-point group.

A third party ships a backend (a real DPA one, say) by declaring in its pyproject.toml::

    [project.entry-points."sdr.backends"]
    mybackend = "my_package.transport:MyTransport"

where ``MyTransport`` implements :class:`sdr.transport.Transport`.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from sdr.errors import BackendNotFound
from sdr.transport import Transport

__all__ = ["available_backends", "load_backend"]

GROUP = "sdr.backends"


def available_backends() -> list[str]:
    """Names of the registered backends."""
    return sorted(ep.name for ep in entry_points(group=GROUP))


def load_backend(name: str) -> type[Transport]:
    """The Transport class registered under ``name``."""
    for ep in entry_points(group=GROUP):
        if ep.name == name:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Transport)):
                raise BackendNotFound(f"entry point {name!r} ({ep.value}) is not a Transport")
            return cls
    known = ", ".join(available_backends()) or "none (is the package installed? pip install -e .)"
    raise BackendNotFound(f"no backend named {name!r}; registered backends: {known}")
