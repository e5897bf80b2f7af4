"""The runnable examples in the docs run, so the docs stay true."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ["docs/api.md", "README.md", "docs/simulator.md", "docs/quickstart.md"]


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


def run_torch_script(tmp_path, needle: str, name: str) -> subprocess.CompletedProcess:
    """docs/training.md's python block containing ``needle``, saved as ``name`` and started
    by the doc's own ``torchrun ... name`` line (``torchrun`` of this interpreter)."""
    pytest.importorskip("torch")
    from sdr.backends.shm import free_port

    (script,) = [b for b in python_blocks(ROOT / "docs/training.md") if needle in b]
    (tmp_path / name).write_text(script)
    command = shell_block("docs/training.md", f"torchrun --nproc-per-node 2 {name}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m torch.distributed.run "$@"\n'
    )
    (bin_dir / "torchrun").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PET_MASTER_PORT=str(free_port()))
    proc = subprocess.run(
        ["bash", "-euc", command], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_torch_backend_script_runs_as_printed(tmp_path):
    """docs/training.md's DDP script on the ``sdr`` backend, started by its torchrun line."""
    proc = run_torch_script(tmp_path, 'init_process_group("sdr")\nrank, world', "train_ddp.py")
    assert "step 30: loss" in proc.stdout and "replicas identical: True" in proc.stdout, proc.stdout


def test_deadline_script_runs_as_printed(tmp_path):
    """docs/training.md's deadline-bounded outer step, started by its torchrun line."""
    proc = run_torch_script(tmp_path, "params -= 0.5 * delta", "outer_step.py")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("outer ")]
    assert len(lines) == 3 and all(line.endswith("replicas identical: True") for line in lines)
