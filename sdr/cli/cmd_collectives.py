"""``sdr coll-plan``, ``sdr coll-select`` and ``sdr coll-run``: the collective layer.

- ``coll-plan NAME --world N``: print the JSON execution plan of a library algorithm.
- ``coll-select COLLECTIVE SIZE --world N``: which algorithm (or NCCL) a call would use.
- ``coll-run``: run a collective on CPU ranks (shared memory) and check it against NumPy.
"""

from __future__ import annotations

import time

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from sdr.backends.collectives.selection import select_algorithm
from sdr.collectives import ALGORITHMS, build_plan
from sdr.errors import ConfigError
from sdr.units import format_size, parse_size

console = Console()


def coll_plan(
    name: str = typer.Argument(..., help=f"one of {', '.join(sorted(ALGORITHMS))}"),
    world: int = typer.Option(2, help="number of ranks"),
    root: int = typer.Option(0, help="root rank (broadcast)"),
) -> None:
    """Print the JSON plan of a library algorithm."""
    typer.echo(build_plan(name, world, root).dumps(indent=1))


def coll_select(
    collective: str = typer.Argument(..., help="allreduce, allgather, reduce_scatter, broadcast"),
    size: str = typer.Argument(..., help="message size, e.g. 256KiB"),
    world: int = typer.Option(2, help="number of ranks"),
    nccl: bool = typer.Option(True, help="whether NCCL is available"),
) -> None:
    """Show the algorithm the selection function picks."""
    nbytes = parse_size(size)
    alg = select_algorithm(collective, nbytes, world, nccl_available=nccl)
    typer.echo(f"{collective} {format_size(nbytes)} on {world} ranks -> {alg}")


ALLREDUCE_ALGORITHMS = sorted(name for name in ALGORITHMS if name.startswith("allreduce"))


def _check_allreduce_algorithm(algorithm: str, world: int) -> None:
    """ConfigError (in this process, before any rank starts) unless ``algorithm`` is a
    library allreduce that runs on ``world`` ranks."""
    if world < 1:
        raise ConfigError(f"--world {world}: expected at least 1 rank")
    if algorithm not in ALLREDUCE_ALGORITHMS:
        raise ConfigError(
            f"--algorithm {algorithm!r}: expected one of {', '.join(ALLREDUCE_ALGORITHMS)}"
        )
    build_plan(algorithm, world)  # the plan's own checks (e.g. ranks it supports)


def _allreduce(comm, x, alg):  # noqa: ANN001, ANN202 - runs inside a worker process
    t0 = time.perf_counter()
    out = comm.allreduce(x, algorithm=alg)
    return out, time.perf_counter() - t0


def coll_run(
    world: int = typer.Option(4, help="number of CPU ranks (processes)"),
    size: str = typer.Option("1MiB", help="float32 message size per rank"),
    algorithm: str = typer.Option(
        "",
        help=f"force an algorithm, one of {', '.join(ALLREDUCE_ALGORITHMS)} (default: selection)",
    ),
) -> None:
    """Allreduce on CPU ranks through shared memory, checked against NumPy."""
    from sdr.backends.shm import LocalGroup  # noqa: PLC0415 - the face may import drivers

    count = max(1, parse_size(size) // 4)
    alg = algorithm or select_algorithm("allreduce", count * 4, world)
    _check_allreduce_algorithm(alg, world)
    rng = np.random.default_rng(0)
    xs = [rng.integers(-8, 9, count).astype(np.float32) for _ in range(world)]
    with LocalGroup(world) as group:
        results = group.run(world, _allreduce, [(x, alg) for x in xs])
    ref = np.sum(xs, axis=0)
    table = Table(title=f"allreduce {format_size(count * 4)} on {world} CPU ranks: {alg}")
    table.add_column("rank")
    table.add_column("correct")
    table.add_column("seconds")
    for r, (out, secs) in enumerate(results):
        table.add_row(str(r), str(bool(np.array_equal(out, ref))), f"{secs:.4f}")
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add the collective commands to the ``sdr`` app."""
    app.command("coll-plan")(coll_plan)
    app.command("coll-select")(coll_select)
    app.command("coll-run")(coll_run)
