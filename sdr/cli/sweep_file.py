"""``sdr sweep --grid FILE``: the sweep's options from a TOML (or YAML) file.

The file's keys are the long flags of ``sdr sweep`` without the dashes (``sizes``,
``drops``, ``rtts``, ``drop_unit`` or ``drop-unit`` ...), for every option of the one
table (:data:`sdr.cli.sweep_options.SWEEP_OPTIONS`) that a file may set. A list is a comma list
(``rtts = ["10ms", "100ms"]`` is ``--rtts 10ms,100ms``); a flag given on the command line
overrides the file's value, a flag not given takes it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import typer

from sdr.cli.sweep_options import SWEEP_OPTIONS
from sdr.errors import ConfigError

__all__ = ["apply_grid_file", "load_grid_file"]


def load_grid_file(path: str | Path) -> dict[str, Any]:
    """The top-level table of a TOML (``.toml``) or YAML (``.yaml``/``.yml``) file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"--grid {path}: cannot read it ({exc.strerror})") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(
                f"--grid {path}: YAML needs PyYAML (pip install pyyaml); or write it as TOML"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--grid {path}: not valid YAML ({exc})") from None
        data = {} if data is None else data
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"--grid {path}: not valid TOML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--grid {path}: expected a table of options, got {type(data).__name__}")
    return data


def _as_flag_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _file_keys(ctx: typer.Context) -> dict[str, Any]:
    """Key in a grid file (the long flag without its dashes, ``_`` for ``-``) -> the
    command's parameter of that option (it converts and checks the file's value as it
    does the flag's)."""
    params = {param.name: param for param in ctx.command.params}
    return {o.key: params[o.name] for o in SWEEP_OPTIONS if o.in_file}


def apply_grid_file(ctx: typer.Context, path: str | Path) -> dict[str, Any]:
    """``ctx.params`` with the file's values for every option not given on the command line.

    ConfigError names an unknown key (and the known ones) or a value the option rejects.
    """
    params = _file_keys(ctx)
    merged = dict(ctx.params)
    for raw_key, value in load_grid_file(path).items():
        param = params.get(str(raw_key).replace("-", "_"))
        if param is None:
            known = ", ".join(sorted(params))
            raise ConfigError(f"--grid {path}: unknown key {raw_key!r}; known keys: {known}")
        source = ctx.get_parameter_source(param.name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            continue  # the flag given wins over the file
        if isinstance(value, dict) or value is None:
            raise ConfigError(f"--grid {path}: {raw_key} must be a value or a list, got {value!r}")
        try:
            merged[param.name] = param.process_value(ctx, _as_flag_text(value))
        except typer.BadParameter as exc:
            raise ConfigError(
                f"--grid {path}: {raw_key} = {value!r}: {exc.message.removeprefix('Value error, ')}"
            ) from None
    return merged
