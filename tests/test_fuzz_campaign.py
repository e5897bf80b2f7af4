"""The fuzz campaign's bookkeeping (tools/fuzz/campaign.py), without atheris: libFuzzer
sessions are replaced by a stand-in that reports how many inputs it ran. The slow-input
rule (tools/fuzz/registry.py) runs on fake clocks, plus one end-to-end run under atheris
(skipped without it)."""

import importlib.util
import pathlib
import sys

import pytest

import sdr

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "fuzz"))
import registry  # noqa: E402


@pytest.fixture
def campaign():
    spec = importlib.util.spec_from_file_location("campaign", ROOT / "tools/fuzz/campaign.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_sessions(campaign, monkeypatch, results):
    """Each session returns the next (status, inputs) of ``results``; returns the asks."""
    asked = []

    def session(name, runs, corpus, artifacts, log_path, *rest):
        asked.append(runs)
        log_path.write_text("")
        status, done = results[len(asked) - 1]
        if status:  # 71: libFuzzer's out-of-memory stop
            (artifacts / ("oom-1" if status == 71 else "crash-1")).write_bytes(b"x")
        return status, min(done, runs), (10 * len(asked), 20 * len(asked))

    monkeypatch.setattr(campaign, "_session", session)
    return asked


def test_inputs_are_split_into_sessions_that_add_up(campaign, monkeypatch, tmp_path):
    asked = _fake_sessions(campaign, monkeypatch, [(0, 10**9)] * 5)
    row = campaign.run_target("cts", 250, tmp_path, 64, 60.0, 0, session_inputs=100)
    assert asked == [100, 100, 50]
    assert row["inputs"] == 250 and row["sessions"] == 3 and row["complete"]
    assert row["logs"] == ["cts.log", "cts.2.log", "cts.3.log"]
    assert row["crashes"] == 0
    assert (row["edges"], row["features"]) == (30, 60)  # the widest session's coverage


def test_libfuzzer_logs_are_read_for_inputs_and_coverage(campaign):
    log = (
        "#2\tINITED cov: 12 ft: 14 corp: 1/1b exec/s: 0 rss: 50Mb\n"
        "#65536\tpulse  cov: 92 ft: 273 corp: 84/23Kb lim: 4096 exec/s: 4104 rss: 17Mb\n"
        "Done 70000 runs in 17 second(s)\n"
        "stat::number_of_executed_units: 70001\n"
    )
    assert campaign._executed(log) == 70001
    assert campaign._executed(log.split("Done")[0]) == 65536  # stopped before the stats
    assert campaign._coverage(log) == (92, 273)
    assert campaign._coverage("") == (0, 0)


def test_a_crash_ends_the_target(campaign, monkeypatch, tmp_path):
    asked = _fake_sessions(campaign, monkeypatch, [(0, 100), (77, 30), (0, 100)])
    row = campaign.run_target("cts", 1000, tmp_path, 64, 60.0, 0, session_inputs=100)
    assert asked == [100, 100]
    assert row["inputs"] == 130 and not row["complete"]
    assert row["crashes"] == 1 and row["exit_status"] == 77


def test_an_out_of_memory_stop_goes_on_with_the_next_session(campaign, monkeypatch, tmp_path):
    asked = _fake_sessions(campaign, monkeypatch, [(0, 100), (71, 60), (0, 100), (0, 100)])
    row = campaign.run_target("cts", 300, tmp_path, 64, 60.0, 0, session_inputs=100)
    assert asked == [100, 100, 100, 40]
    assert row["inputs"] == 300 and row["complete"]
    assert row["crashes"] == 0 and row["out_of_memory"] == ["oom-1"]


def test_one_session_without_splitting(campaign, monkeypatch, tmp_path):
    asked = _fake_sessions(campaign, monkeypatch, [(0, 400)])
    row = campaign.run_target("cts", 1000, tmp_path, 64, 60.0, 0)
    assert asked == [1000]
    assert row["inputs"] == 400 and not row["complete"] and row["sessions"] == 1


def _row(inputs, crash_files=(), seconds=1.0, edges=0):
    return {"inputs": inputs, "crash_files": list(crash_files), "seconds": seconds, "edges": edges}


def test_the_report_counts_inputs_since_each_targets_last_fix():
    spec = importlib.util.spec_from_file_location("report", ROOT / "tools/fuzz/report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    sessions = [
        {"targets": {"a": _row(500), "b": _row(80, ["crash-1"]), "c": _row(7, ["oom-1"])}},
        {"targets": {"a": _row(600, edges=9), "b": _row(1000, edges=4), "c": _row(5)}},
    ]
    merged = report.merge(sessions)
    assert merged["a"]["inputs"] == 1100 and merged["a"]["crashes"] == 0
    assert merged["b"]["inputs"] == 1000 and merged["b"]["fixed_after"] == [80]
    assert merged["c"]["inputs"] == 12 and merged["c"]["crashes"] == 0  # OOM: no verdict
    sessions.append({"code_changed": ["a"], "targets": {"a": _row(300)}})
    assert report.merge(sessions)["a"]["inputs"] == 300  # earlier inputs ran older code
    text = report.table(merged, goal=1000)
    assert "| `b` | 1,000 |" in text and "1 (after 80 inputs)" in text
    assert text.count("| yes |") == 2 and "| `c` | 12 |" in text


# --- the slow-input rule: an input over the limit (100 ms) is a finding, like a crash ---------


class FakeClock:
    """A clock that only the fake targets advance: the rule is tested without timing."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _taking(clock, costs):
    """A target whose n-th run takes ``costs[n]`` seconds of ``clock`` (the last repeats)."""
    calls = []

    def fake_target(data):
        clock.t += costs[min(len(calls), len(costs) - 1)]
        calls.append(data)

    return fake_target, calls


def test_an_input_slower_than_the_limit_on_two_runs_is_a_finding():
    clock = FakeClock()
    fn, calls = _taking(clock, [0.01, 0.01, 0.25])
    guarded = registry.slow_guard(fn, 0.1, grace=1, clock=clock)
    guarded(b"a")
    guarded(b"b")
    with pytest.raises(registry.SlowInput, match=r"3 bytes took 250 ms, then 250 ms.*<= 100 ms"):
        guarded(b"ccc")
    assert calls == [b"a", b"b", b"ccc", b"ccc"]  # the slow input ran a second time


def test_a_slow_first_run_that_is_fast_again_and_the_grace_calls_do_not_count():
    clock = FakeClock()
    fn, calls = _taking(clock, [0.5, 0.5, 0.5, 0.01])  # two grace calls, then a hiccup
    guarded = registry.slow_guard(fn, 0.1, grace=2, clock=clock)
    for data in (b"warm-up", b"imports", b"hiccup", b"fast"):
        guarded(data)
    assert calls == [b"warm-up", b"imports", b"hiccup", b"hiccup", b"fast"]


def test_errors_of_the_target_pass_through_and_no_limit_means_no_wrapper():
    def broken(data):
        raise KeyError(data)

    with pytest.raises(KeyError):
        registry.slow_guard(broken, 0.1, grace=0)(b"x")
    assert registry.slow_guard(broken, 0.0) is broken


def test_a_deliberately_slow_target_is_reported_in_cpu_time():
    import time

    def burn(data: bytes) -> None:  # works until it has used 0.12 s of CPU: cannot flake
        start = time.process_time()
        while time.process_time() - start < 0.12:
            pass

    guarded = registry.slow_guard(burn, 0.1, grace=0)
    with pytest.raises(registry.SlowInput, match="expected <= 100 ms"):
        guarded(b"slow")
    idle = registry.slow_guard(lambda data: time.sleep(0.12), 0.1, grace=0)
    idle(b"waits")  # waiting costs no CPU: a loaded machine is not the input's fault


def test_the_limit_comes_from_the_environment(monkeypatch):
    assert registry.slow_limit({registry.SLOW_ENV: "100"}) == pytest.approx(0.1)
    assert registry.slow_limit({}) == 0.0
    for bad in ("fast", "-5", "inf"):
        with pytest.raises(sdr.ConfigError, match=registry.SLOW_ENV):
            registry.slow_limit({registry.SLOW_ENV: bad})
    monkeypatch.setattr(registry, "TARGETS", {})

    def fn(data):
        pass

    monkeypatch.delenv(registry.SLOW_ENV, raising=False)
    assert registry.target("plain")(fn) is fn and registry.TARGETS["plain"] is fn
    monkeypatch.setenv(registry.SLOW_ENV, "100")
    assert registry.target("guarded")(fn) is fn
    assert registry.TARGETS["guarded"] is not fn and registry.TARGETS["guarded"].__wrapped__ is fn


def test_sessions_get_the_limit_and_a_hang_backstop(campaign, monkeypatch, tmp_path):
    seen = {}

    class Done:
        returncode = 0

    def run(cmd, env, **kw):
        seen["cmd"], seen["env"] = cmd, env
        return Done()

    monkeypatch.setattr(campaign.subprocess, "run", run)
    campaign._session("cts", 5, tmp_path, tmp_path, tmp_path / "log", 64, 60.0, 0, 512, 100.0, 7)
    assert seen["env"]["SDR_FUZZ_SLOW_MS"] == "100"
    assert "-timeout=7" in seen["cmd"]


def test_slow_inputs_and_hangs_count_as_crashes(campaign, monkeypatch, tmp_path):
    def session(name, runs, corpus, artifacts, log_path, *rest):
        log_path.write_text("Traceback ...\nregistry.SlowInput: cts: an input of 9 bytes took\n")
        (artifacts / "crash-1").write_bytes(b"x")
        (artifacts / "timeout-2").write_bytes(b"y")
        return 1, 40, (1, 1)

    monkeypatch.setattr(campaign, "_session", session)
    row = campaign.run_target("cts", 100, tmp_path, 64, 60.0, 0, session_inputs=50)
    assert row["crashes"] == 2 and row["crash_files"] == ["crash-1", "timeout-2"]
    assert row["slow_inputs"] == 1 and row["timeouts"] == 1 and not row["complete"]
    assert row["sessions"] == 1  # a finding ends the target


def test_atheris_saves_a_slow_input_like_a_crash(campaign, tmp_path):
    """End to end: run.py under atheris, a limit every input exceeds, a crash file."""
    pytest.importorskip("atheris")
    row = campaign.run_target("cts", 2000, tmp_path, 64, 120.0, 0, slow_ms=1e-6)
    assert row["crashes"] == 1 and row["slow_inputs"] == 1, row
    assert row["inputs"] <= registry.GRACE_CALLS + 1 + 5  # found at once, after the grace calls
