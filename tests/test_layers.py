"""The layer rules of docs/architecture.md hold in the code (tools/check_layers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import check_layers  # noqa: E402


def test_the_tree_has_no_upward_import_and_no_circle() -> None:
    assert check_layers.check() == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in ("sdr", "backends", "simulator"):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "__init__.py").touch()
    return tmp_path


def test_an_upward_import_is_found_even_inside_a_function(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "sdr/core_mod.py": "def f():\n    from sdr.backends.udp import X\n",
            "backends/udp.py": "X = 1\n",
        },
    )
    (problem,) = check_layers.check(root)
    assert problem == "sdr.core_mod (core) imports sdr.backends.udp (drivers): upward"


def test_type_checking_imports_do_not_count_but_circles_do(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "sdr/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from sdr.runtime.r import R\nfrom sdr.b import B\n",
            "sdr/b.py": "def g():\n    from sdr.a import A\nB = 1\n",
            "sdr/runtime/__init__.py": "",
            "sdr/runtime/r.py": "R = 1\n",
        },
    )
    assert check_layers.check(root) == ["import circle: sdr.a -> sdr.b"]
