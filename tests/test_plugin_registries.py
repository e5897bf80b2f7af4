"""Every plug-in kind registers the same way: ``register_<kind>`` or an entry-point group.

Checks the four registries built on :class:`sdr.registry.Registry` (schemes, codecs,
collective algorithms, backends), the read-only views kept for old readers, the scheme
interface's declared ``nack_holes``, that the scheme registry imports without the config
circle, and that each kind's "Registering your own" doc example runs as printed.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import types
from importlib.metadata import EntryPoint

import pytest

import sdr
import sdr.registry as registry_module
from sdr.backend_registry import BACKENDS, load_backend, register_backend
from sdr.backends.inproc import InprocTransport
from sdr.codecs import XORCodec, available_codecs, get_codec, register_codec
from sdr.codecs.registry import CODECS
from sdr.collectives import (
    ALGORITHMS,
    CollectiveAlgorithm,
    algorithms_for,
    build_plan,
    get_algorithm,
    register_algorithm,
)
from sdr.collectives.algorithm_registry import ALGORITHM_REGISTRY
from sdr.collectives.algorithms.gather import allgather_mesh
from sdr.collectives.port_plans import PORT_ALGORITHMS, allgather_ring, build_port_plan
from sdr.reliability import Scheme, SelectiveRepeat, SelectiveRepeatNack, register_scheme
from sdr.reliability.registry import SCHEMES, check_scheme_name

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("registry", "group"),
    [
        (SCHEMES, "sdr.schemes"),
        (CODECS, "sdr.codecs"),
        (ALGORITHM_REGISTRY, "sdr.collective_algorithms"),
        (BACKENDS, "sdr.backends"),
    ],
)
def test_each_kind_has_a_registry_and_an_entry_point_group(registry, group) -> None:
    assert isinstance(registry, registry_module.Registry)
    assert registry.group == group


def test_nack_holes_is_declared_by_the_scheme_interface() -> None:
    assert Scheme.nack_holes is False
    assert SelectiveRepeat.nack_holes is False and SelectiveRepeatNack.nack_holes is True


def test_the_scheme_registry_imports_without_the_config_circle() -> None:
    code = (  # the config first, as the circle used to start there
        "from sdr.reliability.config import ReliabilityConfig\n"
        "ReliabilityConfig.from_mapping({'scheme': 'sr-rto'})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    source = (ROOT / "sdr/reliability/registry.py").read_text()
    runtime = source.split("if TYPE_CHECKING:")[0]
    assert "sdr.reliability.base" not in runtime and "sdr.reliability.config" not in runtime


def test_scheme_entry_points_are_known_to_the_config_check(monkeypatch) -> None:
    eps = [EntryPoint("sr-plugin", "sdr.reliability:SelectiveRepeat", "sdr.schemes")]
    monkeypatch.setattr(
        registry_module, "entry_points", lambda group: [e for e in eps if e.group == group]
    )
    monkeypatch.setattr(SCHEMES, "_entry_points", None)
    assert check_scheme_name("SR-Plugin") == "SR-Plugin"
    assert SCHEMES.get("sr-plugin") is SelectiveRepeat
    SCHEMES.unregister("sr-plugin")
    monkeypatch.setattr(SCHEMES, "_entry_points", None)  # forget the fake discovery


def test_auto_is_reserved() -> None:
    with pytest.raises(sdr.ConfigError, match="reserved"):
        register_scheme("AUTO", SelectiveRepeat)


def test_codecs_register_through_the_registry() -> None:
    register_codec("test-xor-again", XORCodec, replace=True)
    try:
        assert "test-xor-again" in available_codecs()
        assert isinstance(get_codec("TEST-XOR-AGAIN", 4, 2, 16), XORCodec)
    finally:
        CODECS.unregister("test-xor-again")
    assert "test-xor-again" not in available_codecs()


def test_backends_register_in_code_beside_the_entry_points() -> None:
    assert {"inproc", "udp", "offload", "verbs"} <= set(sdr.available_backends())
    assert load_backend("INPROC") is InprocTransport
    register_backend("test-inproc", InprocTransport, replace=True)
    try:
        assert load_backend("test-inproc") is InprocTransport
        assert "test-inproc" in sdr.available_backends()
    finally:
        BACKENDS.unregister("test-inproc")
    with pytest.raises(sdr.BackendNotFound, match="not a Transport"):
        register_backend("test-dict", dict)  # type: ignore[arg-type]
    with pytest.raises(sdr.BackendNotFound, match=r"no backend named 'nope'; registered"):
        load_backend("nope")


def test_memory_and_port_algorithms_share_a_registry_not_their_names() -> None:
    memory, port = get_algorithm("allreduce_ring"), get_algorithm("allreduce_ring", "port")
    assert memory.channel == "memory" and port.channel == "port" and memory != port
    assert "port:allreduce_ring" in ALGORITHM_REGISTRY.names()
    assert "allreduce_ring" in ALGORITHMS and "allreduce_ring" in PORT_ALGORITHMS
    assert "allreduce_mesh" in PORT_ALGORITHMS and "allreduce_mesh" not in ALGORITHMS
    assert ALGORITHMS["allgather_mesh"] == ("allgather", allgather_mesh)
    assert PORT_ALGORITHMS["allgather_ring"] is allgather_ring
    with pytest.raises(TypeError):
        ALGORITHMS["x"] = ("allreduce", allgather_mesh)  # type: ignore[index]


def test_registered_algorithms_reach_every_helper_and_replace_refreshes_the_cache() -> None:
    register_algorithm("test_gather", allgather_mesh, collective="allgather", replace=True)
    register_algorithm(
        "test_gather", allgather_ring, collective="allgather", channel="port", replace=True
    )
    try:
        assert "test_gather" in algorithms_for("allgather")
        first = build_plan("test_gather", 3)
        assert first.name == "allgather_mesh"
        assert build_port_plan("test_gather", 3, 2).channels[0].kind == "port"
        register_algorithm(
            "test_gather",
            lambda n: build_plan("allgather_ll", n),
            collective="allgather",
            replace=True,
        )
        assert build_plan("test_gather", 3).name == "allgather_ll"  # not the cached plan
    finally:
        ALGORITHM_REGISTRY.unregister("test_gather")
        ALGORITHM_REGISTRY.unregister("port:test_gather")
    with pytest.raises(sdr.ConfigError, match="unknown algorithm 'test_gather'"):
        build_plan("test_gather", 3)


def test_bad_algorithm_registrations_are_config_errors(monkeypatch) -> None:
    with pytest.raises(sdr.ConfigError, match="collective 'allsum'"):
        register_algorithm("x", allgather_mesh, collective="allsum")
    with pytest.raises(sdr.ConfigError, match="channel kind 'nvls'"):
        register_algorithm("x", allgather_mesh, collective="allgather", channel="nvls")
    with pytest.raises(sdr.ConfigError, match="without ':'"):
        register_algorithm("port:x", allgather_mesh, collective="allgather")
    with pytest.raises(sdr.ConfigError, match="already registered"):
        register_algorithm("allgather_mesh", allgather_mesh, collective="allgather")
    eps = [
        EntryPoint("port:test-ep", "sdr.collectives.port_plans:allgather_ring", "x"),
    ]
    monkeypatch.setattr(
        registry_module,
        "entry_points",
        lambda group: [EntryPoint(e.name, e.value, group) for e in eps],
    )
    monkeypatch.setattr(ALGORITHM_REGISTRY, "_entry_points", None)
    with pytest.raises(sdr.ConfigError, match="expected a CollectiveAlgorithm"):
        get_algorithm("test-ep", "port")  # a bare function: what does it compute?
    monkeypatch.setattr(ALGORITHM_REGISTRY, "_entry_points", None)


def test_a_collective_algorithm_entry_point_is_found(monkeypatch) -> None:
    module = types.ModuleType("sdr_test_plans")
    module.RING = CollectiveAlgorithm("allgather", allgather_ring, "port")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sdr_test_plans", module)
    monkeypatch.setattr(
        registry_module,
        "entry_points",
        lambda group: [EntryPoint("port:ep_ring", "sdr_test_plans:RING", group)],
    )
    monkeypatch.setattr(ALGORITHM_REGISTRY, "_entry_points", None)
    try:
        assert "ep_ring" in PORT_ALGORITHMS
        outs = build_port_plan("ep_ring", 2, 1)
        assert outs.collective == "allgather"
    finally:
        ALGORITHM_REGISTRY.unregister("port:ep_ring")
        monkeypatch.setattr(ALGORITHM_REGISTRY, "_entry_points", None)


def _section_blocks(doc: str, heading: str) -> list[str]:
    text = (ROOT / doc).read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    section = text[start : end if end != -1 else None]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.parametrize(
    ("doc", "heading"),
    [
        ("docs/backends.md", "## Registering your own"),
        ("docs/codecs.md", "## Adding a codec"),
        ("docs/collectives.md", "### Registering your own"),
        ("docs/reliability-schemes.md", "### Registering your own"),
    ],
)
def test_registering_your_own_examples_run(doc: str, heading: str) -> None:
    blocks = _section_blocks(doc, heading)
    assert blocks, f"{doc}: no python example under {heading!r}"
    module = types.ModuleType("sdr_doc_example")  # a real module: workers unpickle from it
    sys.modules[module.__name__] = module
    try:
        for block in blocks:
            exec(compile(block, doc, "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    CODECS.unregister("mirror")
    ALGORITHM_REGISTRY.unregister("allgather_ring")
    SCHEMES.unregister("sr-eager")
    BACKENDS.unregister("traced")
