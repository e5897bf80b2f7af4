"""The collective algorithm conformance suite: every registered algorithm passes the same tests.

Algorithms come from the registry (``available_algorithms("memory")`` and
``available_algorithms("port")``: the library, the ones registered in code before
collection and every ``sdr.collective_algorithms`` entry point), so a new algorithm is
tested without touching this file. Each must build valid plans for several world sizes
(what it computes and over which channels is what it registered; the JSON form round
trips; every rank lowers), and compute the right numbers: memory plans on CPU ranks (the
shared-memory executor), port plans in the port-semantics interpreter of the
hierarchical plan tests.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_hier_plans import _run_all

from sdr.backends.collectives.layout import lower, make_layout
from sdr.collectives import Plan, available_algorithms, build_plan, get_algorithm
from sdr.collectives.port_plans import build_port_plan

MEMORY = available_algorithms("memory")
PORT = available_algorithms("port")
WORLDS = (1, 2, 3, 5, 8)
CPU_WORLDS = (2, 3)
COUNT = 301  # odd: ragged chunks


def _check_plan(plan: Plan, collective: str, world: int, channel: str) -> None:
    assert plan.collective == collective
    assert plan.world_size == world and len(plan.ranks) == world
    assert {c.kind for c in plan.channels} <= {channel}
    again = Plan.loads(plan.dumps())
    assert again.to_json() == plan.to_json()
    layout = make_layout(plan, 4 * COUNT * world, 4 * COUNT * world, 4)
    for rank in range(world):
        lower(plan, rank, layout)  # every op resolves to byte ranges


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", MEMORY)
def test_memory_plans_are_valid(name: str, world: int) -> None:
    algo = get_algorithm(name)
    root = world - 1 if algo.collective == "broadcast" else 0
    _check_plan(build_plan(name, world, root), algo.collective, world, "memory")


@pytest.mark.parametrize("slices", (1, 2))
@pytest.mark.parametrize("world", (1, 2, 3, 4))
@pytest.mark.parametrize("name", PORT)
def test_port_plans_are_valid(name: str, world: int, slices: int) -> None:
    algo = get_algorithm(name, "port")
    _check_plan(build_port_plan(name, world, slices), algo.collective, world, "port")


def _inputs(world: int, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)  # small integers: every summation order is exact
    return [rng.integers(-8, 9, n).astype(np.float32) for _ in range(world)]


def _expected(collective: str, xs: list[np.ndarray], root: int) -> list[np.ndarray]:
    world = len(xs)
    if collective == "allreduce":
        return [np.sum(xs, axis=0)] * world
    if collective == "allgather":
        return [np.concatenate(xs)] * world
    if collective == "reduce_scatter":
        k = xs[0].size // world
        total = np.sum(xs, axis=0)
        return [total[r * k : (r + 1) * k] for r in range(world)]
    return [xs[root]] * world  # broadcast


def _in_elems(collective: str, world: int, block: int) -> int:
    return block * world if collective == "reduce_scatter" else block


def _out_elems(collective: str, world: int, block: int) -> int:
    return block * world if collective == "allgather" else block


@pytest.fixture(scope="module")
def group():
    from sdr.backends.shm import LocalGroup

    with LocalGroup(max(CPU_WORLDS)) as g:
        yield g


def _run_on_rank(comm, name: str, collective: str, x: np.ndarray, root: int) -> np.ndarray:
    world = comm.world_size
    if collective == "allreduce":
        return comm.allreduce(x, np.full_like(x, 7), algorithm=name)
    if collective == "allgather":
        return comm.allgather(x, np.full(world * x.size, 7, x.dtype), algorithm=name)
    if collective == "reduce_scatter":
        out = np.full(x.size // world, 7, x.dtype)
        return comm.reduce_scatter(x, out, algorithm=name).copy()
    return comm.broadcast(x, root, algorithm=name)


@pytest.mark.parametrize("world", CPU_WORLDS)
@pytest.mark.parametrize("name", MEMORY)
def test_memory_plans_compute_the_collective_on_cpu_ranks(group, name: str, world: int) -> None:
    collective = get_algorithm(name).collective
    root = world - 1
    xs = _inputs(world, _in_elems(collective, world, COUNT), seed=world)
    outs = group.run(world, _run_on_rank, [(name, collective, x, root) for x in xs])
    for r, (out, want) in enumerate(zip(outs, _expected(collective, xs, root), strict=True)):
        np.testing.assert_array_equal(out, want, err_msg=f"{name} rank {r} of {world}")


@pytest.mark.parametrize("slices", (1, 3))
@pytest.mark.parametrize("world", (1, 2, 3))
@pytest.mark.parametrize("name", PORT)
def test_port_plans_compute_the_collective(name: str, world: int, slices: int) -> None:
    collective = get_algorithm(name, "port").collective
    block = 6 * slices  # blocks divisible by slices (the communicator pads to that)
    xs = _inputs(world, _in_elems(collective, world, block), seed=world * 10 + slices)
    outs = _run_all(build_port_plan(name, world, slices), xs, _out_elems(collective, world, block))
    for r, (out, want) in enumerate(zip(outs, _expected(collective, xs, 0), strict=True)):
        np.testing.assert_array_equal(out, want, err_msg=f"{name} rank {r} of {world}")
