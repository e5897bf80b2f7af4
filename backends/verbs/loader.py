"""Finding pyverbs and RDMA devices, with errors that say what to do.

pyverbs comes from rdma-core and is not on PyPI as a wheel. Two install paths work
(docs/backends.md): Debian's ``python3-pyverbs`` (system python; this module then adds
the Debian dist-packages folder to ``sys.path`` as a last resort, only when the plain
import fails and the interpreter's version matches the system one), or rdma-core's PyPI
source package built into the virtual environment.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from sdr.errors import TransportError

__all__ = ["DEBIAN_DIST_PACKAGES", "Pyverbs", "device_names", "load_pyverbs"]

DEBIAN_DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
_MODULES = ("addr", "cq", "device", "enums", "mr", "pd", "qp", "wr", "pyverbs_error")


class Pyverbs:
    """The pyverbs modules this backend uses, as attributes (``pv.qp.QPAttr`` ...)."""

    def __init__(self, modules: dict[str, ModuleType]) -> None:
        self.__dict__.update(modules)
        self.e: Any = modules["enums"]
        self.path = str(Path(modules["device"].__file__ or "?").parent)

    def __getattr__(self, name: str) -> Any:  # for type checkers: modules are attributes
        raise AttributeError(name)


def _import_all() -> dict[str, ModuleType]:
    return {name: importlib.import_module(f"pyverbs.{name}") for name in _MODULES}


def _debian_path_fits() -> bool:
    tag = f"cpython-{sys.version_info.major}{sys.version_info.minor}"
    folder = DEBIAN_DIST_PACKAGES / "pyverbs"
    return folder.is_dir() and any(tag in p.name for p in folder.glob("*.so"))


_CACHE: list[Pyverbs] = []


def load_pyverbs() -> Pyverbs:
    """Import pyverbs (TransportError with both install paths when it is missing)."""
    if _CACHE:
        return _CACHE[0]
    try:
        modules = _import_all()
    except ImportError as first:
        if not _debian_path_fits():
            raise TransportError(
                f"pyverbs is not importable ({first}); install Debian's python3-pyverbs "
                "(apt-get install python3-pyverbs) or build rdma-core's pyverbs into this "
                "environment (see docs/backends.md)"
            ) from first
        if str(DEBIAN_DIST_PACKAGES) not in sys.path:
            sys.path.append(str(DEBIAN_DIST_PACKAGES))
        try:
            modules = _import_all()
        except ImportError as second:
            raise TransportError(
                f"pyverbs from {DEBIAN_DIST_PACKAGES} does not import here: {second}"
            ) from second
    _CACHE.append(Pyverbs(modules))
    return _CACHE[0]


def device_names(pv: Pyverbs | None = None) -> list[str]:
    """Names of the RDMA devices; TransportError("no RDMA device: ...") when there are none.

    ``get_device_list`` raises (ENOSYS) on a kernel without RDMA support rather than
    returning an empty list; both cases become the same error.
    """
    pv = pv or load_pyverbs()
    try:
        devices = pv.device.get_device_list()
    except pv.pyverbs_error.PyverbsError as exc:
        raise TransportError(f"no RDMA device: {exc}") from exc
    if not devices:
        raise TransportError("no RDMA device: the device list is empty")
    return [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in devices]
