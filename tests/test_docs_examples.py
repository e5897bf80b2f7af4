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


def shell_block(doc: str, needle: str) -> str:
    """The fenced block of ``doc`` that contains ``needle`` (a shell recipe)."""
    fences = re.findall(r"^```(\w*)\n(.*?)^```", (ROOT / doc).read_text(), flags=re.S | re.M)
    found = [body for lang, body in fences if not lang and needle in body]
    assert found, f"{doc} has no block with {needle!r}"
    return found[0]


def test_sweep_grid_recipe_runs_as_printed(tmp_path):
    """docs/simulator.md's grid-file recipe: the file, the sweep, its JSONL and its plot."""
    import json
    import os
    import subprocess
    import sys

    script = shell_block("docs/simulator.md", "sdr sweep --grid grid.toml")
    env = dict(os.environ, PATH=f"{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.run(
        ["bash", "-euc", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "sweep.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 1 * 4 * 2  # sizes x the flag's drop x schemes x RTTs
    assert {r["drop"] for r in rows} == {1e-3} and {r["samples"] for r in rows} == {200}
    assert (tmp_path / "fig9.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
