"""Deprecated import paths: names that moved elsewhere, imported from there on first use.

A module that moved leaves a stub behind whose ``__getattr__`` comes from
:func:`moved_module` (every public name) or :func:`moved_names` (some names of a module
that stays). Importing the stub costs nothing: the new home, often a driver, is not
imported until a moved name is looked up; each lookup warns with
:class:`DeprecationWarning` and returns the object from the new home.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["moved_module", "moved_names"]


def _forward(old: str, name: str, new: str) -> Any:
    try:
        value = getattr(importlib.import_module(new), name)
    except AttributeError:
        raise AttributeError(f"module {old!r} has no attribute {name!r}") from None
    warnings.warn(
        f"{old}.{name} is deprecated: import {name} from {new} (the old path will be removed)",
        DeprecationWarning,
        stacklevel=3,
    )
    return value


def moved_module(old: str, new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old``, whose public names now live in ``new``."""

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        return _forward(old, name, new)

    return __getattr__


def moved_names(old: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old``; ``homes`` maps each moved name to its module."""
    table = dict(homes)

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        return _forward(old, name, table[name])

    return __getattr__
