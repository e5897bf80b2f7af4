"""The one extension idiom: a Registry of named factories, in code or by entry point."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

import sdr.registry as registry_module
from sdr.errors import BackendNotFound, ConfigError
from sdr.registry import Registry


def test_register_get_and_names_are_case_insensitive() -> None:
    reg: Registry[object] = Registry("widget", "sdr.test-widgets")
    reg.register("Round", dict)
    assert reg.get("ROUND") is dict
    assert reg.names() == ["round"]
    assert "round" in reg and "square" not in reg


def test_taken_name_needs_replace() -> None:
    reg: Registry[object] = Registry("widget", "sdr.test-widgets")
    reg.register("a", dict)
    with pytest.raises(ConfigError, match="already registered"):
        reg.register("A", list)
    reg.register("a", list, replace=True)
    assert reg.get("a") is list


def test_unknown_name_lists_known_ones() -> None:
    reg: Registry[object] = Registry("widget", "sdr.test-widgets", error=BackendNotFound)
    reg.register("a", dict)
    with pytest.raises(BackendNotFound, match=r"unknown widget 'b'; expected one of \['a'\]"):
        reg.get("b")


@pytest.mark.parametrize("name", ["", "  ", None, 3])
def test_bad_names_are_refused(name: object) -> None:
    reg: Registry[object] = Registry("widget", "sdr.test-widgets")
    with pytest.raises(ConfigError, match="non-empty string"):
        reg.register(name, dict)  # type: ignore[arg-type]


def test_reserved_names_and_checks() -> None:
    def only_types(key: str, factory: object) -> type:
        if not isinstance(factory, type):
            raise ConfigError(f"widget {key!r} must be a class")
        return factory

    reg: Registry[type] = Registry(
        "widget", "sdr.test-widgets", reserved=("auto",), check=only_types
    )
    with pytest.raises(ConfigError, match="reserved"):
        reg.register("auto", dict)
    with pytest.raises(ConfigError, match="must be a class"):
        reg.register("x", len)  # type: ignore[arg-type]


def test_entry_points_load_lazily_and_broken_ones_are_named(monkeypatch) -> None:
    group = "sdr.test-widgets"
    eps = [
        EntryPoint("good", "collections:OrderedDict", group),
        EntryPoint("broken", "sdr_no_such_module:thing", group),
    ]
    monkeypatch.setattr(
        registry_module, "entry_points", lambda group: [e for e in eps if e.group == group]
    )
    reg: Registry[object] = Registry("widget", group)
    assert reg.names() == ["broken", "good"]
    from collections import OrderedDict

    assert reg.get("Good") is OrderedDict
    with pytest.raises(ConfigError, match=r"widget 'broken' \(sdr_no_such_module:thing\) failed"):
        reg.get("broken")


def test_one_name_from_two_distributions_is_a_clear_error(monkeypatch) -> None:
    group = "sdr.test-widgets"
    eps = [EntryPoint("twin", "pkg_a:W", group), EntryPoint("twin", "pkg_b:W", group)]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: eps)
    reg: Registry[object] = Registry("widget", group)
    with pytest.raises(ConfigError, match=r"several installed distributions \(pkg_a:W, pkg_b:W\)"):
        reg.get("twin")
