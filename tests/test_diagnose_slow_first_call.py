"""Rule slow-first-call: a first call much slower than its repeat beyond compile, with the evidence for its
cause (here the kernel's memory growth: first-touch allocation of 1.5 GB of work arrays on a CPU); silent when
the first call is as fast as its repeat; and, with --repeat, a cell only the first run was slow in."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag_support import assert_compact, edited, fired, profile_notebook, sources_of, with_code
from nbscope.analyse.diagnose import diagnose, rule_thresholds

# The first call zeroes 1.5 GB (0.4-1 s here, more than 60 ms on any machine) where the repeat makes scattered
# writes to mapped pages (~40 ms here); the clean notebook's calls each take over 0.5 s. These thresholds sit far
# from both: tens of times below the first call's gap, and a ratio noise cannot reach on half-second calls.
LOW = {"slow-first-call": {"min_ratio": 2.0, "min_gap_s": 0.03, "min_growth_bytes": 500e6}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("first-touch")
    return {name: profile_notebook(name, folder) for name in ("diag_slow_first_call", "diag_slow_first_call_clean")}


@pytest.mark.slow
def test_fires_with_the_memory_growth_of_the_first_call(runs: dict) -> None:
    record = runs["diag_slow_first_call"]
    cells = record.measurements["cells"]
    assert all(c["status"] == "ok" for c in cells)
    [finding] = fired(diagnose(record, thresholds=LOW), "slow-first-call")
    assert_compact([finding], record)
    assert finding.cell_index == 2 and finding.evidence["repeat_cell"] == 3
    first, repeat = cells[2], cells[3]
    evidence = finding.evidence
    # Every number comes from the record.
    assert evidence["first_s"] == pytest.approx(first["wall_s"], abs=1e-3)
    assert evidence["repeat_s"] == pytest.approx(repeat["wall_s"] - repeat["compile_s"], abs=1e-3)
    assert evidence["gap_s"] == pytest.approx(first["wall_s"] - first["compile_s"] - evidence["repeat_s"], abs=1e-3)
    [cause] = evidence["causes"]
    grew = first["rss"]["after_bytes"] - first["rss"]["before_bytes"]
    assert cause["cause"] == "first-touch allocation" and cause["memory_growth_bytes"] == grew
    assert grew > 1.2e9  # three 500 MB work arrays, kept by the notebook
    assert "`np.empty((n_paths, n_steps))` in `record_paths`" in cause["allocations"]
    assert f"memory grew {grew / 1e9:.1f} GB here" in finding.summary and "no compile" in finding.summary
    assert "cell 4" in finding.summary and "warm up" in finding.fix


@pytest.mark.slow
def test_silent_when_the_first_call_is_as_fast_as_its_repeat(runs: dict) -> None:
    record = runs["diag_slow_first_call_clean"]
    assert all(c["status"] == "ok" for c in record.measurements["cells"])
    assert not fired(diagnose(record, thresholds=LOW), "slow-first-call")


@pytest.mark.slow
def test_no_growth_no_memory_cause(runs: dict) -> None:
    """The same gap without the memory growth: the rule still names the gap, but not a cause it has no evidence for."""
    record = edited(runs["diag_slow_first_call"])
    rss = record.measurements["cells"][2]["rss"]
    rss["after_bytes"] = rss["before_bytes"]
    [finding] = fired(diagnose(record, thresholds=LOW), "slow-first-call")
    assert finding.evidence["causes"] == [] and "--timeline" in finding.fix and finding.confidence < 0.8


def test_default_thresholds_are_listed() -> None:
    assert rule_thresholds()["slow-first-call"] == {"min_ratio": 1.5, "min_gap_s": 1.0, "min_growth_bytes": 256 * 2**20}


@pytest.mark.slow
def test_a_rebound_argument_is_not_a_repeat(runs: dict) -> None:
    """The same statement on a name rebound in between runs on other data: not a repeat of the first call."""
    record = edited(runs["diag_slow_first_call"])
    sources = sources_of("diag_slow_first_call")
    hashes = [c["source_hash"] for c in record.measurements["cells"]]
    sources[hashes[3]] = "record_paths = lambda n, m: 0.0  # rebound\ntotal = record_paths(500, 125_000)"
    assert not fired(diagnose(with_code(record, sources), thresholds=LOW), "slow-first-call")


@pytest.mark.slow
def test_repeat_samples_show_a_cell_only_the_first_run_was_slow(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    record = profile_notebook("diag_first_run_data", tmp_path, repeat=3, env={"DIAG_DATA_DIR": str(data)})
    samples = record.measurements["cells"][1]["samples"]["wall_s"]
    assert len(samples) == 3 and samples[0] > 1.0  # the first run slept 1 s building the table
    thresholds = {"slow-first-call": {"min_ratio": 2.0, "min_gap_s": 0.5}}
    [finding] = fired(diagnose(record, thresholds=thresholds), "slow-first-call")
    assert_compact([finding], record)
    assert finding.cell_index == 1 and finding.evidence["samples_wall_s"] == samples
    assert finding.summary.startswith("first run ") and "median of 2 later runs" in finding.summary
    assert [c["cause"] for c in finding.evidence["causes"]] == ["state outside the kernel"]
