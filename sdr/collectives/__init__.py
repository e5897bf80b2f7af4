"""The collective layer's core: DSL, plan schema and algorithm library.

Pure Python: no I/O, no CUDA. The runtime (lowering a plan to bytes, element types, the
channel interfaces, per-call algorithm selection) lives in ``sdr.backends.collectives``;
executors in ``backends/shm`` (shared memory + NumPy) and ``backends/gpu`` (CuPy, CUDA
IPC); both run the same JSON plans. Algorithms of both channel kinds (memory, port)
register through :func:`register_algorithm` or the ``sdr.collective_algorithms``
entry-point group (:mod:`sdr.collectives.algorithm_registry`).
"""

from sdr.collectives.algorithm_registry import (
    CollectiveAlgorithm,
    available_algorithms,
    get_algorithm,
    register_algorithm,
)
from sdr.collectives.algorithms import ALGORITHMS, algorithms_for, build_plan
from sdr.collectives.dsl import Program, RankProgram
from sdr.collectives.plan import PLAN_SCHEMA, PLAN_VERSION, ChunkRef, Op, Plan
from sdr.collectives.port_plans import PORT_ALGORITHMS, build_port_plan

__all__ = [
    "ALGORITHMS",
    "PLAN_SCHEMA",
    "PLAN_VERSION",
    "PORT_ALGORITHMS",
    "ChunkRef",
    "CollectiveAlgorithm",
    "Op",
    "Plan",
    "Program",
    "RankProgram",
    "algorithms_for",
    "available_algorithms",
    "build_plan",
    "build_port_plan",
    "get_algorithm",
    "register_algorithm",
]
