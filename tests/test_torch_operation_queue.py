"""The sdr process group's operation queue: only the worker settles what it runs.

A failure found by another thread (the liveness thread: a peer gone) used to fail the
running work at once, while the worker still wrote its tensor; DDP's reducer then went on
with a bucket under write and the survivor crashed in backward now and then. Now the
running work fails only once its operation stopped, and one that never stops is failed
after a grace period all the same.
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("torch")

from sdr.errors import SDRError  # noqa: E402
from sdr.torch.operation_queue import OperationQueue  # noqa: E402


def test_a_failure_from_another_thread_waits_for_the_running_operation_to_stop() -> None:
    ops = OperationQueue(grace=60.0)
    entered, release = threading.Event(), threading.Event()
    writes: list[str] = []

    def running() -> list[int]:
        entered.set()
        release.wait(10)
        ops.check()  # the operation's wait notices the failure at its next poll
        writes.append("after the check")  # never reached
        return [1]

    first = ops.submit("first", running)
    queued = ops.submit("queued", lambda: writes.append("queued ran"))
    assert entered.wait(10)
    ops.fail(SDRError("sdr process group: peer rank 1 is gone"))
    # the operation is still running: its work (and the one behind it) stay open
    assert not first.is_completed() and not queued.is_completed()
    release.set()
    with pytest.raises(SDRError, match="peer rank 1 is gone"):
        first.wait()
    with pytest.raises(SDRError, match="peer rank 1 is gone"):
        queued.wait()
    assert writes == []  # neither wrote anything after the failure
    ops.stop(5)


def test_works_settle_in_submission_order() -> None:
    ops = OperationQueue(grace=60.0)
    order: list[str] = []
    gate = threading.Event()
    works = [ops.submit("gate", lambda: gate.wait(10))]
    works += [ops.submit(f"op{i}", lambda: None) for i in range(5)]
    for i, w in enumerate(works):
        w.get_future().add_done_callback(lambda _f, i=i: order.append(str(i)))
    ops.fail(SDRError("sdr process group: aborted"))
    gate.set()
    for w in works[1:]:
        with pytest.raises(SDRError):
            w.wait()
    assert order == [str(i) for i in range(6)]
    ops.stop(5)


def test_an_operation_that_never_stops_is_failed_after_the_grace() -> None:
    ops = OperationQueue(grace=0.2)
    stuck = threading.Event()
    work = ops.submit("stuck", lambda: stuck.wait(30))
    ops.fail(SDRError("sdr process group: peer rank 1 is gone"))
    with pytest.raises(SDRError, match="is gone"):
        work.wait()  # within the grace, not the operation's 30 s
    assert ops.running
    stuck.set()
    ops.stop(5)


def test_an_operation_that_raises_fails_the_ones_behind_it() -> None:
    ops = OperationQueue()
    bad = ops.submit("bad", lambda: 1 / 0)
    later = ops.submit("later", lambda: [2])
    with pytest.raises(SDRError, match="bad failed: ZeroDivisionError"):
        bad.wait()
    with pytest.raises(SDRError, match="bad failed"):
        later.wait()
    after = ops.submit("after", lambda: [3])  # after the failure: failed at once
    assert after.is_completed() and after.exception() is ops.failure
    ops.stop(5)


def test_a_failure_with_nothing_pending_is_not_logged_as_an_error(caplog) -> None:
    """A peer that leaves at the end (its goodbye) fails an idle group: before, every clean
    shutdown printed 'sdr process group: peer rank 1 ... is gone: it left the process
    group' as an error."""
    ops = OperationQueue()
    with caplog.at_level("ERROR", logger="sdr.torch.process_group"):
        ops.fail(SDRError("sdr process group: peer rank 1 is gone: it left the process group"))
    assert caplog.records == []
    assert ops.failure is not None  # still recorded: later operations fail with it
    ops.stop(5)


def test_run_here_runs_on_the_callers_thread_when_nothing_is_queued() -> None:
    ops = OperationQueue(grace=60.0)
    work = ops.run_here("here", lambda: threading.current_thread())
    assert work.is_completed()  # settled on return
    assert work.get_future().value() is threading.current_thread()
    ops.stop(5)


def test_run_here_keeps_the_call_order() -> None:
    ops = OperationQueue(grace=60.0)
    order: list[str] = []
    gate = threading.Event()
    first = ops.submit("gate", lambda: (gate.wait(10), order.append("gate")))
    # something is queued: run_here queues it behind, on the worker
    later = ops.run_here("later", lambda: (order.append("later"), threading.current_thread()))
    assert not later.is_completed()
    gate.set()
    later.wait()
    assert first.is_completed() and order == ["gate", "later"]
    assert later.get_future().value()[1] is not threading.current_thread()

    # and one submitted from another thread while run_here runs waits for it
    inside, release = threading.Event(), threading.Event()

    def long() -> None:
        inside.set()
        release.wait(10)
        order.append("here")

    behind: list = []
    caller = threading.Thread(target=lambda: behind.append(ops.run_here("here", long)))
    caller.start()
    assert inside.wait(10)
    queued = ops.submit("queued", lambda: order.append("queued"))
    assert not queued.is_completed()
    release.set()
    caller.join(10)
    queued.wait()
    assert order[2:] == ["here", "queued"] and behind[0].is_completed()
    ops.stop(5)


def test_run_here_that_raises_fails_it_and_the_ones_behind_it() -> None:
    ops = OperationQueue(grace=60.0)

    def boom() -> None:
        raise ValueError("bad tensor\nsecond line")

    work = ops.run_here("allreduce_by of 4 floats", boom)
    with pytest.raises(SDRError, match="allreduce_by of 4 floats failed: ValueError: bad tensor$"):
        work.wait()
    with pytest.raises(SDRError, match="bad tensor"):
        ops.submit("next", lambda: None).wait()
    ops.stop(5)
