"""The collective layer's core: DSL, plan schema, algorithm library and selection.

Pure Python: no I/O, no CUDA. Executors live in ``backends/shm`` (shared memory + NumPy)
and ``backends/gpu`` (CuPy, CUDA IPC); both run the same JSON plans.
"""

from sdr.collectives.algorithms import ALGORITHMS, algorithms_for, build_plan
from sdr.collectives.dsl import Program, RankProgram
from sdr.collectives.layout import Layout, LoweredOp, lower, make_layout, packet_bytes
from sdr.collectives.plan import PLAN_SCHEMA, PLAN_VERSION, ChunkRef, Op, Plan
from sdr.collectives.selection import NCCL, select_algorithm

__all__ = [
    "ALGORITHMS",
    "NCCL",
    "PLAN_SCHEMA",
    "PLAN_VERSION",
    "ChunkRef",
    "Layout",
    "LoweredOp",
    "Op",
    "Plan",
    "Program",
    "RankProgram",
    "algorithms_for",
    "build_plan",
    "lower",
    "make_layout",
    "packet_bytes",
    "select_algorithm",
]
