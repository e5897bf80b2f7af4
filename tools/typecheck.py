"""Type-check the ``sdr`` package with mypy, as it is installed: one import name.

The three source folders install as one package (``backends/`` as ``sdr.backends``,
``simulator/`` as ``sdr.simulator``: see setup.py), and mypy cannot follow an editable
install's import hook. So this builds that package as a tree of links in
``build/typecheck/sdr`` and checks it with ``mypy -p sdr`` (settings: ``[tool.mypy]`` in
pyproject.toml), printing each error at its real path (``backends/udp/qp.py:12``, not
``sdr/backends/udp/qp.py:12``). ``make lint`` and ``make test`` run it.

    python tools/typecheck.py            # exit status: mypy's
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"
FOLDERS = {"backends": "backends", "simulator": "simulator"}  # sdr.<name> -> folder


def build_tree() -> Path:
    """``build/typecheck/sdr``: links to every entry of sdr/, plus the two folders."""
    package = TREE / "sdr"
    if TREE.exists():
        shutil.rmtree(TREE)
    package.mkdir(parents=True)
    for entry in sorted((ROOT / "sdr").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in FOLDERS.items():
        (package / name).symlink_to(ROOT / folder, target_is_directory=True)
    return TREE


def real_path(line: str) -> str:
    """``sdr/backends/x.py:3: ...`` -> ``backends/x.py:3: ...``."""
    for name, folder in FOLDERS.items():
        line = re.sub(rf"^sdr/{name}/", f"{folder}/", line)
    return line


def main() -> int:
    tree = build_tree()
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    command += ["--cache-dir", str(ROOT / "build" / "mypy_cache"), "-p", "sdr", *sys.argv[1:]]
    env = {**os.environ, "MYPYPATH": str(tree)}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        print(real_path(line))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
