"""benchmarks/file_pages.py: both ways of filling a file write every byte and leave
nothing behind, and each step is accounted for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import file_pages


@pytest.mark.parametrize(("way", "steps"), [
    ("mapping", ["fallocate", "populate", "copy", "munmap", "total"]),
    ("pwrite", ["pwrite", "total"]),
])  # fmt: skip
def test_each_way_fills_the_file_and_removes_it(tmp_path: Path, monkeypatch, way, steps) -> None:
    written: list[bytes] = []
    real_unlink = Path.unlink

    def keep_then_unlink(self: Path, *a, **k) -> None:
        written.append(self.read_bytes())
        real_unlink(self, *a, **k)

    monkeypatch.setattr(Path, "unlink", keep_then_unlink)
    block = os.urandom(file_pages.BLOCK)
    size = file_pages.BLOCK + 12345  # a partial last block
    found = file_pages.fill(tmp_path / "f.bin", size, way, block)
    assert list(found) == steps
    assert all(value >= 0 for value in found.values())
    assert written == [block + block[:12345]]
    assert not list(tmp_path.iterdir())
