"""The ``sdr`` command. Each ``sdr_cli/cmd_*.py`` module adds its sub-commands through
``register(app)``, so capabilities stay in their own files."""

from __future__ import annotations

import importlib
import pkgutil

import typer

import sdr_cli

app = typer.Typer(
    name="sdr",
    help="SDR: software-defined reliability for RDMA-style transfers between datacenters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _main() -> None:
    """SDR: software-defined reliability for RDMA-style transfers between datacenters."""


for _module in sorted(m.name for m in pkgutil.iter_modules(sdr_cli.__path__)):
    if _module.startswith("cmd_"):
        importlib.import_module(f"sdr_cli.{_module}").register(app)


if __name__ == "__main__":  # pragma: no cover
    app()
