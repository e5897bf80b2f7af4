"""Backends by name: the ``sdr.backends`` entry points and the ones registered in code.

A third party ships a backend (a real DPA one, say) by declaring in its pyproject.toml::

    [project.entry-points."sdr.backends"]
    mybackend = "my_package.transport:MyTransport"

or registers it from code with :func:`register_backend` (tests, notebooks, a backend
that is not a distribution of its own). Either way ``MyTransport`` implements
:class:`sdr.transport.Transport`, and ``sdr.Context(backend="mybackend", **attrs)`` calls
``MyTransport(**attrs)``. Names are case-insensitive.
"""

from __future__ import annotations

from sdr.errors import BackendNotFound
from sdr.registry import Registry
from sdr.transport import Transport

__all__ = ["BACKENDS", "GROUP", "available_backends", "load_backend", "register_backend"]

GROUP = "sdr.backends"
"""The entry-point group backends are declared in (the built-ins too, in pyproject.toml)."""


def _transport_class(name: str, factory: object) -> type[Transport]:
    if not (isinstance(factory, type) and issubclass(factory, Transport)):
        raise BackendNotFound(
            f"backend {name!r}: {factory!r} is not a Transport subclass "
            "(see sdr.transport.Transport)"
        )
    return factory


BACKENDS: Registry[type[Transport]] = Registry(
    "backend", GROUP, check=_transport_class, error=BackendNotFound
)
"""Every known backend: the ``sdr.backends`` entry points and the ones registered in code."""


def register_backend(name: str, transport: type[Transport], *, replace: bool = False) -> None:
    """Make the Transport subclass ``transport`` loadable as ``name`` (``Context(backend=name)``).

    Raises :class:`~sdr.errors.ConfigError` if ``name`` is taken (unless ``replace``) and
    :class:`~sdr.errors.BackendNotFound` if ``transport`` is not a Transport subclass.
    """
    BACKENDS.register(name, transport, replace=replace)


def available_backends() -> list[str]:
    """Names of the known backends (entry points and registered in code), sorted."""
    return BACKENDS.names()


def load_backend(name: str) -> type[Transport]:
    """The Transport class registered under ``name``."""
    if not isinstance(name, str) or name not in BACKENDS:
        known = (
            ", ".join(available_backends()) or "none (is the package installed? pip install -e .)"
        )
        raise BackendNotFound(f"no backend named {name!r}; registered backends: {known}")
    return BACKENDS.get(name)
