"""The fuzz campaign's bookkeeping (tools/fuzz/campaign.py), without atheris: libFuzzer
sessions are replaced by a stand-in that reports how many inputs it ran."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


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
