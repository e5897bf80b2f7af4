"""Loading the package's optional C extensions.

Each native module has a pure-Python reference and is optional (setup.py builds it where
a C compiler exists). :func:`load_extension` imports one, or, when the environment
variable it is given names a file, that build instead (the sanitizer builds of
``make asan``); it returns ``(module, "")`` or ``(None, why it is missing)``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
from types import ModuleType

__all__ = ["load_extension"]


def load_extension(name: str, file_env: str) -> tuple[ModuleType | None, str]:
    """The extension module ``name`` (dotted), or the file ``$file_env`` names."""
    path = os.environ.get(file_env)
    try:
        if not path:
            return importlib.import_module(name), ""
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        if spec is None:
            raise ImportError(f"{file_env}={path!r} is not an extension module")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module, ""
    except ImportError as exc:
        return None, str(exc)
