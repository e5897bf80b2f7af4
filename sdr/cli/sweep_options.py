"""The options of ``sdr sweep``, declared once.

:data:`SWEEP_OPTIONS` is the one table of them. Three readers, nothing else declares them:

* the command line: :func:`sweep_signature` makes ``sdr sweep``'s parameters from it
  (typer reads a function's signature);
* the grid file (``--grid``, :mod:`sdr.cli.sweep_file`): its keys are the options' long
  flags without the dashes, for every option with ``in_file``;
* the sweep runner (:mod:`sdr.cli.sim_sweep`): :func:`grid_arguments` turns the options'
  values into :func:`sdr.simulator.sweep.make_grid`'s arguments through each option's
  ``grid``; the options without one (where the rows go, how the points run) it reads
  by name.

The link's options keep the simulator's names on the way in: ``--rates`` becomes
``make_grid(rates=...)`` in bits/s, then each point's ``SweepPoint.rate`` and the rows'
``rate`` column (likewise ``--rtts`` -> ``rtts`` -> ``rtt``, ``--distances`` ->
``distances`` -> ``distance``; ``--speed`` is ``propagation_speed``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import typer
from typer.models import OptionInfo

from sdr.cli.defaults import DEFAULT_RATE
from sdr.cli.sim_options import (
    ALPHA,
    CHUNK,
    DROP_UNIT,
    FIG9_DROPS,
    FIG9_SIZES,
    MTU,
    SPEED,
    DropUnitName,
    ExecutorName,
    MethodName,
    split_list,
)
from sdr.units import parse_distance, parse_rate, parse_size, parse_time

__all__ = ["SWEEP_OPTIONS", "SweepOption", "grid_arguments", "sweep_signature"]

Grid = Callable[[Any], dict[str, Any]]
"""What an option's value gives :func:`make_grid`: its keyword arguments."""


@dataclass(frozen=True)
class SweepOption:
    """One option of ``sdr sweep``.

    Attributes:
        name: the parameter's name (the key of the options' values).
        annotation: its type, as typer reads it.
        option: its ``typer.Option`` (default, flags, help).
        grid: the :func:`make_grid` arguments its value gives (None: the runner reads it).
        in_file: whether a ``--grid`` file may set it.
    """

    name: str
    annotation: Any
    option: OptionInfo
    grid: Grid | None = None
    in_file: bool = True

    @property
    def key(self) -> str:
        """Its key in a grid file: the long flag without the dashes, ``_`` for ``-``."""
        longs = [d for d in self.option.param_decls or () if d.startswith("--")]
        return longs[0][2:].replace("-", "_")


def _list(name: str, parse: Callable[[str], Any]) -> Grid:
    """A comma list, each item parsed (an absent optional list stays None)."""
    return lambda text: {name: None if text is None else [parse(x) for x in split_list(text)]}


def _value(name: str, parse: Callable[[Any], Any] = lambda v: v) -> Grid:
    return lambda value: {name: parse(value)}


def _ec(text: str) -> dict[str, Any]:
    from sdr.simulator.schemes import parse_ec

    k, m = parse_ec(text)
    return {"k": k, "m": m}


def _enum_value(value: Any) -> Any:
    return value.value


SWEEP_OPTIONS: tuple[SweepOption, ...] = (
    SweepOption(
        "grid",
        str | None,
        typer.Option(
            None,
            "--grid",
            help='TOML (or YAML) file of these options, e.g. rtts = ["10ms", "100ms"]; '
            "a flag given overrides the file.",
        ),
        in_file=False,
    ),
    SweepOption(
        "sizes",
        str,
        typer.Option(FIG9_SIZES, "--sizes", help="Comma list of write sizes."),
        _list("sizes", parse_size),
    ),
    SweepOption(
        "drops",
        str,
        typer.Option(FIG9_DROPS, "--drops", help="Comma list of drop probabilities."),
        _list("drops", float),
    ),
    SweepOption(
        "schemes",
        str,
        typer.Option("sr-rto,sr-nack,ec-mds,ec-xor", "--schemes"),
        _list("schemes", str),
    ),
    SweepOption(
        "rates",
        str,
        typer.Option(
            DEFAULT_RATE,
            "--rates",
            help="Comma list of line rates (e.g. 10Gbit/s,100G; the paper's figures: 400Gbit/s).",
        ),
        _list("rates", parse_rate),
    ),
    SweepOption(
        "distances",
        str | None,
        typer.Option(None, "--distances", help="Comma list (default 3750km)."),
        _list("distances", parse_distance),
    ),
    SweepOption(
        "rtts",
        str | None,
        typer.Option(None, "--rtts", help="Comma list of RTTs (not with distances)."),
        _list("rtts", parse_time),
    ),
    SweepOption("speed", float, SPEED, _value("propagation_speed")),
    SweepOption("drop_unit", DropUnitName, DROP_UNIT, _value("drop_unit", _enum_value)),
    SweepOption("chunk", str, CHUNK, _value("chunk_size", parse_size)),
    SweepOption("mtu", str, MTU, _value("mtu", parse_size)),
    SweepOption("alpha", float, ALPHA, _value("alpha")),
    SweepOption(
        "ec",
        str,
        typer.Option("32,8", "--ec", help="EC data,parity chunks per submessage."),
        _ec,
    ),
    SweepOption(
        "method",
        MethodName,
        typer.Option(MethodName.montecarlo, "--method"),
        _value("method", _enum_value),
    ),
    SweepOption(
        "samples",
        int | None,
        typer.Option(
            None, "--samples", help="Samples per point (default 1000, 100 with --method des)."
        ),
        _value("samples"),
    ),
    SweepOption("seed", int, typer.Option(0, "--seed"), _value("seed")),
    SweepOption("executor", ExecutorName, typer.Option(ExecutorName.local, "--executor")),
    SweepOption(
        "scheduler", str | None, typer.Option(None, "--scheduler", help="Dask scheduler address.")
    ),
    SweepOption(
        "workers", int | None, typer.Option(None, "--workers", help="Local worker processes.")
    ),
    SweepOption(
        "out",
        str,
        typer.Option(
            "sweep.csv", "--out", help="File to write, rows as points finish ('-': stdout)."
        ),
    ),
    SweepOption(
        "fmt",
        str | None,
        typer.Option(
            None,
            "--format",
            metavar="csv|jsonl|parquet",
            help="Output format (default: by the --out suffix, else csv; parquet needs pyarrow).",
        ),
    ),
    SweepOption(
        "resume",
        bool,
        typer.Option(
            False, "--resume", help="Keep the rows already in --out; evaluate only the rest."
        ),
        in_file=False,
    ),
    SweepOption(
        "force",
        bool,
        typer.Option(False, "--force", help="Overwrite an existing --out."),
        in_file=False,
    ),
    SweepOption(
        "plot",
        str | None,
        typer.Option(
            None,
            "--plot",
            help="PNG of the answer: with more than one RTT or rate, the EC/SR crossover "
            "size against each swept one; with one path, the speedup heatmaps.",
        ),
    ),
    SweepOption(
        "panels",
        str | None,
        typer.Option(
            None,
            "--panels",
            help="PNG of Fig-9 style speedup heatmaps, a row of panels per path (slow to "
            "draw for many paths).",
        ),
    ),
)


def sweep_signature(options: Sequence[SweepOption] = SWEEP_OPTIONS) -> inspect.Signature:
    """``(ctx: typer.Context, <one parameter per option>) -> None``: what typer reads."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("ctx", kind, annotation=typer.Context)]
    params += [
        inspect.Parameter(o.name, kind, default=o.option, annotation=o.annotation) for o in options
    ]
    return inspect.Signature(params, return_annotation=None)


def grid_arguments(values: dict[str, Any]) -> dict[str, Any]:
    """:func:`make_grid`'s keyword arguments from the options' ``values`` (by name); the
    sample count, when not given, is the method's default (1000, 100 for ``des``)."""
    out: dict[str, Any] = {}
    for option in SWEEP_OPTIONS:
        if option.grid is not None:
            out.update(option.grid(values[option.name]))
    if out["samples"] is None:
        out["samples"] = 100 if out["method"] == MethodName.des.value else 1000
    return out
