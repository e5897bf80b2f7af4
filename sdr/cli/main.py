"""The ``sdr`` command. Each ``sdr/cli/cmd_*.py`` module adds its sub-commands through
``register(app)``, so capabilities stay in their own files.

Errors are handled here, once, for every command: an :class:`~sdr.errors.SDRError`, an
``OSError`` (address in use, connection refused, permission denied, missing file) or a
``ValueError`` (a value that does not parse) becomes one line ``error: <message>`` on
stderr and exit status 2. Anything else is a bug and keeps its traceback; so does every
error when ``SDR_TRACEBACK=1`` is set.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import platform
import re
import warnings
from typing import TYPE_CHECKING, Any

import click
import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

import sdr
import sdr.cli
from sdr.crc import CRC32_IMPLEMENTATION
from sdr.errors import SDRError

if TYPE_CHECKING:  # Typer 0.29 builds its commands from its own copy of click's classes
    from typer._click import Command, Context, Parameter

#: exit status of a user error (bad value, busy port, missing permission), as click's usage errors
USER_ERROR_EXIT = 2
#: the errors that are the user's or the environment's, not the program's
USER_ERRORS: tuple[type[BaseException], ...] = (SDRError, OSError, ValueError)
TRACEBACK_ENV = "SDR_TRACEBACK"

_RST_LITERAL = re.compile(r"``([^`]+)``")
_PYTHON_SHOWWARNING = warnings.showwarning


def error_line(exc: BaseException) -> str:
    """``exc`` as one line: its message with whitespace runs (newlines too) collapsed."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` for the CLI: SDR's warnings (StragglerWarning, RtoWarning)
    as ``warning: <one line>`` on stderr, without the source line; others as Python does."""
    if category.__module__.split(".")[0] == "sdr":
        click.secho(f"warning: {error_line(message)}", err=True, fg="yellow")  # type: ignore[arg-type]
    else:
        _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


def _tidy_help(command: Command) -> None:
    """Plain-text help for ``command`` and everything under it: RST ``literals`` become
    'literals' (help is not rendered as reStructuredText)."""
    for attr in ("help", "short_help"):
        text = getattr(command, attr, None)
        if text:
            setattr(command, attr, _RST_LITERAL.sub(r"'\1'", text))
    for param in command.params:
        if isinstance(param, TyperArgument | TyperOption) and param.help:  # typer's have help
            param.help = _RST_LITERAL.sub(r"'\1'", param.help)
        if param.metavar is None and not getattr(param, "is_flag", False):
            param.metavar = _metavar(param)
            if isinstance(param, TyperArgument):  # typer would add "<str>" after the name
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)


_METAVARS = (  # (words in the parameter's name, what its value is), first match wins
    (("rate", "bandwidth"), "RATE"),
    (("rtt", "timeout", "delay", "duration", "interval", "jitter", "time"), "TIME"),
    (("size", "mtu", "chunk", "bytes"), "SIZE"),
    (("distance",), "DISTANCE"),
    (("loss", "drop"), "PROB"),
    (("to", "host", "bind", "connect", "listen"), "HOST[:PORT]"),
    (("port",), "PORT"),
    (("out", "config", "file", "path", "plot", "json", "csv", "figure", "trace"), "PATH"),
)


def _metavar(param: Parameter) -> str:
    """A metavar that says what the value is (RATE, TIME, SIZE ...), not its Python type."""
    if param.param_type_name == "argument":
        return (param.name or "value").upper()
    kind = getattr(param, "type", None) or getattr(param, "type_descriptor", None)
    choices = getattr(kind, "choices", None)
    if choices:  # the choices themselves, as click writes them: {a|b|c}
        return "{" + "|".join(str(getattr(c, "value", c)) for c in choices) + "}"
    words = set((param.name or "").lower().split("_"))
    for keys, metavar in _METAVARS:
        if words & set(keys):
            return metavar
    type_name = getattr(getattr(param, "type", None), "name", "")
    return {"integer": "N", "float": "NUMBER", "choice": "CHOICE"}.get(type_name, "VALUE")


try:  # Typer 0.29 parses with its own copy of click: its UsageError is another class
    from typer._click.exceptions import UsageError as _VendoredUsageError
except ImportError:  # pragma: no cover - a Typer on the real click
    _VendoredUsageError = click.UsageError  # type: ignore[misc,assignment]
_USAGE_ERRORS = (click.UsageError, _VendoredUsageError)


class SDRGroup(TyperGroup):
    """The root command group: tidies every command's help and turns user errors into
    ``error: <one line>`` on stderr with exit status 2 (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _tidy_help(self)

    def invoke(self, ctx: Context) -> Any:
        """Run the sub-command; a user error ends it with one line instead of a traceback,
        and SDR's own warnings print as one line each (``warning: <message>``)."""
        try:
            with warnings.catch_warnings():
                warnings.showwarning = show_warning
                return super().invoke(ctx)
        except USER_ERRORS as exc:
            if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
                raise
            click.secho(f"error: {error_line(exc)}", err=True, fg="red")
            raise typer.Exit(USER_ERROR_EXIT) from None
        except _USAGE_ERRORS as exc:  # the option parser's: one line too, not a block
            if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
                raise
            click.secho(f"error: {usage_line(exc)}", err=True, fg="red")
            raise typer.Exit(USER_ERROR_EXIT) from None


def usage_line(exc: Any) -> str:
    """The option parser's error as one line, with where to look: ``--loss: not a number
    ('abc'); see 'sdr select -h'``."""
    text = " ".join(exc.format_message().split())
    text = text.replace("Value error, ", "")
    command = exc.ctx.command_path if exc.ctx is not None else "sdr"
    return f"{text} (see '{command} -h')"


def version_text() -> str:
    """What ``sdr --version`` prints: SDR's version, Python's, the CRC-32 in use, the
    datapath (native or the Python reference), the UDP loops' ICRC implementation and
    the WAN emulator's default forwarder."""
    from sdr import placement  # noqa: PLC0415 - only for this line
    from sdr.backends.udp import native  # noqa: PLC0415
    from sdr.backends.wan import native_forwarder  # noqa: PLC0415

    udp = "native" if native.active() else "python"
    if native.active():
        udp += f", ICRC {native.crc_implementation()}"
    return (
        f"sdr {sdr.__version__} (Python {platform.python_version()}, "
        f"CRC-32: {CRC32_IMPLEMENTATION}, placement: {placement.DATAPATH}, udp: {udp}, "
        f"emulator: {'python' if native_forwarder.NATIVE_ERROR else 'native'} forwarder)"
    )


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


app = typer.Typer(
    name="sdr",
    cls=SDRGroup,
    help="SDR: software-defined reliability for RDMA-style transfers between datacenters.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # help is plain text: "[reliability]" stays, flags show no <bool>
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the versions of sdr and Python, the CRC-32 and placement datapaths in use, "
        "and exit.",
    ),
) -> None:
    """SDR: software-defined reliability for RDMA-style transfers between datacenters.

    A user error (bad value, port in use, missing permission) prints 'error: <message>'
    and exits with status 2; set SDR_TRACEBACK=1 to see its traceback.
    """


for _module in sorted(m.name for m in pkgutil.iter_modules(sdr.cli.__path__)):
    if _module.startswith("cmd_"):
        importlib.import_module(f"sdr.cli.{_module}").register(app)


if __name__ == "__main__":  # pragma: no cover
    app()
