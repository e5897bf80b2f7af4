"""Port plans between datacenters: shape, JSON, and their numbers under port semantics.

The interpreter below runs every rank of a port plan in one process with the semantics
the SDR port channel implements (a put lands in the peer's scratch of this call; a wait
returns once the puts that preceded the peer's matching signal have landed), scheduling
ranks round-robin until all finish. It checks the plans' arithmetic without sockets.
"""

from __future__ import annotations

import numpy as np
import pytest

from sdr.backends.collectives.layout import lower, make_layout
from sdr.collectives.plan import Plan
from sdr.collectives.port_plans import PORT_ALGORITHMS, build_port_plan
from sdr.errors import ConfigError


def _run_all(plan: Plan, inputs: list[np.ndarray], out_elems: int) -> list[np.ndarray]:
    n = plan.world_size
    layout = make_layout(plan, inputs[0].nbytes, out_elems * 4, 4)
    ops = [lower(plan, r, layout) for r in range(n)]
    bufs = [
        {
            "input": inputs[r].view(np.uint8),
            "output": np.zeros(out_elems, np.float32).view(np.uint8),
            "scratch": np.full(layout.scratch, 0xFF, np.uint8),
        }
        for r in range(n)
    ]
    pc = [0] * n
    signals = np.zeros((n, n), int)  # signals[a, b]: a signalled b so many times
    waits = np.zeros((n, n), int)
    while any(pc[r] < len(ops[r]) for r in range(n)):
        moved = False
        for r in range(n):
            while pc[r] < len(ops[r]):
                op = ops[r][pc[r]]
                b = bufs[r]
                if op.kind == "wait":
                    if signals[op.peer, r] <= waits[r, op.peer]:
                        break  # blocked: try the next rank
                    waits[r, op.peer] += 1
                elif op.kind == "signal":
                    signals[r, op.peer] += 1
                elif op.kind == "put":
                    src = b[op.srcs[0].buffer][op.srcs[0].offset :][: op.nbytes]
                    bufs[op.peer]["scratch"][op.dst.offset : op.dst.offset + op.nbytes] = src
                elif op.kind == "copy":
                    src = b[op.srcs[0].buffer][op.srcs[0].offset :][: op.nbytes].copy()
                    b[op.dst.buffer][op.dst.offset : op.dst.offset + op.nbytes] = src
                elif op.kind == "reduce":
                    acc = np.zeros(op.nbytes // 4, np.float32)
                    for s in op.srcs:
                        acc += b[s.buffer][s.offset :][: op.nbytes].view(np.float32)
                    b[op.dst.buffer][op.dst.offset : op.dst.offset + op.nbytes] = acc.view(np.uint8)
                pc[r] += 1
                moved = True
        assert moved, f"{plan.name}: deadlock at {pc}"
    assert (signals == waits.T).all(), "every signal is waited for"
    return [b["output"].view(np.float32) for b in bufs]


def _inputs(n: int, elems: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n * 1000 + elems)
    return [rng.integers(-50, 50, elems).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("slices", [1, 3])
@pytest.mark.parametrize("name", ["allreduce_ring", "allreduce_mesh"])
def test_allreduce_plans_sum(name: str, n: int, slices: int) -> None:
    for elems in (1, 7, 1000):
        xs = _inputs(n, elems)
        outs = _run_all(build_port_plan(name, n, slices), xs, elems)
        for out in outs:
            np.testing.assert_array_equal(out, np.sum(xs, axis=0))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("slices", [1, 2])
def test_allgather_and_reduce_scatter_plans(n: int, slices: int) -> None:
    elems = 6 * slices  # blocks divisible by slices (the communicator pads to that)
    xs = _inputs(n, elems)
    outs = _run_all(build_port_plan("allgather_ring", n, slices), xs, elems * n)
    for out in outs:
        np.testing.assert_array_equal(out, np.concatenate(xs))
    big = _inputs(n, elems * n)
    outs = _run_all(build_port_plan("reduce_scatter_ring", n, slices), big, elems)
    total = np.sum(big, axis=0)
    for r, out in enumerate(outs):
        np.testing.assert_array_equal(out, total[r * elems : (r + 1) * elems])


@pytest.mark.parametrize("name", sorted(PORT_ALGORITHMS))
def test_port_plans_use_port_channels_and_round_trip(name: str) -> None:
    plan = build_port_plan(name, 3, 2)
    assert plan.channels and {c.kind for c in plan.channels} == {"port"}
    again = Plan.loads(plan.dumps())
    assert again.to_json() == plan.to_json()
    ring = name != "allreduce_mesh"
    if ring:  # a ring writes only to its right neighbour (and waits on its left)
        puts = {(r, op.peer) for r, ops in enumerate(plan.ranks) for op in ops if op.kind == "put"}
        assert puts == {(0, 1), (1, 2), (2, 0)}


def test_ring_is_pipelined_per_slice() -> None:
    """Rank 0 forwards slice 0 of stage 1 before it waits for slice 1 of stage 1."""
    ops = build_port_plan("allreduce_ring", 3, 2).ranks[0]
    kinds = [op.kind for op in ops]
    first_wait = kinds.index("wait")
    assert kinds[first_wait : first_wait + 4] == ["wait", "reduce", "put", "signal"]
    assert kinds[first_wait + 4] == "wait"


def test_bad_port_plan_requests() -> None:
    with pytest.raises(ConfigError, match="port algorithm"):
        build_port_plan("allreduce_tree9", 2)
    with pytest.raises(ConfigError, match="slices"):
        build_port_plan("allreduce_ring", 2, 0)
