"""One extension idiom: every kind of plug-in is a :class:`Registry` of named factories.

Schemes, congestion controllers, codecs, collective algorithms, loss models and backends
each have one registry. A name gets there in one of two ways, both equal:

- in code, ``register_<kind>(name, factory)`` (the registry's :meth:`Registry.register`);
- from an installed distribution, an entry point in the registry's group, e.g. in the
  third party's pyproject.toml::

      [project.entry-points."sdr.schemes"]
      my-scheme = "my_package.scheme:MyScheme"

Entry points are read on first lookup, so importing the SDK costs nothing. Names are
case-insensitive. An unknown name is a one-line :class:`~sdr.errors.ConfigError` (or the
registry's own error class) that lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from sdr.errors import ConfigError, SDRError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named factories of one kind (``kind`` names it in errors: "scheme", "codec")."""

    def __init__(
        self,
        kind: str,
        group: str,
        *,
        reserved: tuple[str, ...] = (),
        check: Callable[[str, object], T] | None = None,
        error: type[SDRError] = ConfigError,
    ) -> None:
        self.kind = kind
        self.group = group
        """The entry-point group third parties declare (``sdr.schemes`` ...)."""
        self._reserved = {name.lower() for name in reserved}
        self._check = check
        self._error = error
        self._items: dict[str, T] = {}
        self._entry_points: dict[str, str] | None = None  # name -> "module:attr", lazily

    def register(self, name: str, factory: T, *, replace: bool = False) -> None:
        """Make ``factory`` known as ``name``; a ConfigError if taken, unless ``replace``."""
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{self.kind} name must be a non-empty string, got {name!r}")
        key = name.lower()
        if key in self._reserved:
            raise ConfigError(f"{self.kind} name {name!r} is reserved")
        if key in self._items and not replace:
            raise ConfigError(
                f"{self.kind} {name!r} is already registered; pass replace=True to override"
            )
        self._items[key] = self._checked(key, factory)

    def unregister(self, name: str) -> None:
        """Forget ``name`` (tests and plug-ins that replace a built-in)."""
        self._items.pop(name.lower(), None)

    def get(self, name: str) -> T:
        """The factory registered as ``name`` (loading its entry point on first use)."""
        key = name.lower() if isinstance(name, str) else name
        if key in self._items:
            return self._items[key]
        target = self._discovered().get(key)
        if target is None:
            raise self._error(f"unknown {self.kind} {name!r}; expected one of {self.names()}")
        found = [e for e in entry_points(group=self.group) if e.name.lower() == key]
        if len({e.value for e in found}) > 1:
            where = ", ".join(sorted({e.value for e in found}))
            raise self._error(
                f"{self.kind} {name!r} is declared by several installed distributions "
                f"({where}); uninstall one"
            )
        ep = found[0]
        try:
            factory = ep.load()
        except Exception as exc:  # a broken plug-in: name it, do not crash the caller
            raise self._error(f"{self.kind} {name!r} ({target}) failed to load: {exc}") from exc
        self._items[key] = self._checked(key, factory)
        return self._items[key]

    def names(self) -> list[str]:
        """Every known name, registered in code or declared as an entry point, sorted."""
        return sorted({*self._items, *self._discovered()})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in {*self._items, *self._discovered()}

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _discovered(self) -> dict[str, str]:
        if self._entry_points is None:
            found = {ep.name.lower(): ep.value for ep in entry_points(group=self.group)}
            self._entry_points = {k: v for k, v in found.items() if k not in self._reserved}
        return self._entry_points

    def _checked(self, key: str, factory: object) -> T:
        if self._check is not None:
            return self._check(key, factory)
        if not callable(factory):
            raise ConfigError(f"{self.kind} {key!r}: {factory!r} is not callable")
        return factory  # type: ignore[return-value]
