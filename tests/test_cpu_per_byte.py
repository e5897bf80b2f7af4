"""benchmarks/cpu_per_byte.py's arithmetic: differencing two sizes, and the wait before
each file run where the VM hands freed pages back to its host."""

from __future__ import annotations

import pytest

from benchmarks import cpu_per_byte

GIB = 1 << 30


def test_cpu_per_gib_differences_the_two_sizes_and_takes_the_median(monkeypatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(cpu_per_byte.time, "sleep", waits.append)
    costs = iter([(1.0, 2.0), (3.0, 6.0), (1.0, 2.0), (5.0, 10.0), (1.0, 2.0), (2.0, 4.0)])
    found = cpu_per_byte.per_gib(lambda size: next(costs), (GIB, 2 * GIB), 3, settle=30.0)
    assert found == {"send_s_per_gib": 2.0, "recv_s_per_gib": 4.0}  # medians of 2/1/4, 4/2/8
    assert waits == [30.0] * 6  # before every run


@pytest.mark.parametrize(("reporting", "wait"), [(True, cpu_per_byte.SETTLE_S), (False, 0.0)])
def test_file_runs_wait_only_where_the_host_takes_freed_pages_back(reporting, wait) -> None:
    assert cpu_per_byte.settle_time(reporting) == wait
