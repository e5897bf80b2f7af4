"""The runnable examples in the docs run, so the docs stay true."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ["docs/api.md", "README.md", "docs/simulator.md"]


def python_blocks(path: pathlib.Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("doc", DOCS)
def test_python_examples_run(doc, capsys):
    path = ROOT / doc
    if not path.exists():
        pytest.skip(f"{doc} not written")
    blocks = python_blocks(path)
    assert blocks, f"{doc} has no python example"
    for block in blocks:
        exec(compile(block, str(path), "exec"), {"__name__": "__docs__"})
