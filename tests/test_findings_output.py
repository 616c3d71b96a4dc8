"""Findings read as prose (issue 15): a title, one sentence with the numbers, the fix and a few labelled evidence
lines, in at most 8 lines at 100 columns (the whole evidence behind --verbose, --json and the report's fold); the
main jobs (profile, trace, audit) end with the top findings and the command that shows them in full."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from diag_support import FILES, RECORDS, assert_compact, load_record, sources_of
from nbscope.analyse.audit import diagnose_entries, entry_from_record
from nbscope.analyse.diagnose import Finding, diagnose
from nbscope.analyse.report import report_data
from nbscope.record.run import loads
from nbscope.render import findings as view
from nbscope.render import html as report_html
from nbscope.render.terminal import console

REPO = Path(__file__).resolve().parents[1]
# Stored runs (tests/files/records) and the notebooks they ran: their findings do not depend on this machine.
STORED = [
    ("cpu_unrolled_loop", "diag_unrolled_loop", None, {"unrolled-loop", "compile-bound", "cold-cache", "first-call"}),
    ("synthetic_cpu_slow_compile_alarm", "diag_unrolled_loop", None, {"slow-compile-alarm"}),
    ("synthetic_t4_gpu_memory", "diag_latency_loop", None, {"gpu-memory"}),
    ("synthetic_t4_latency_loop", "diag_latency_loop", "cpu_latency_loop", {"latency-bound-loop"}),
    ("synthetic_t4_x64", "diag_x64", "cpu_x64", {"weak-float64"}),
]


def _blocks(stdout: str) -> list[list[str]]:
    """The finding blocks of `nbscope diagnose` output: each from its "severity · title" line to a blank line."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in stdout.split("--verbose shows")[0].splitlines():
        if re.match(r"(high|medium|low) · ", line):
            current = [line]
            blocks.append(current)
        elif not line.strip():
            current = None
        elif current is not None:
            current.append(line)
    return blocks


@pytest.mark.parametrize(("record", "notebook", "other", "rules"), STORED, ids=[s[0] for s in STORED])
def test_diagnose_prints_each_finding_in_8_lines_at_100_columns(
    run_cli: Any, record: str, notebook: str, other: str | None, rules: set[str]
) -> None:
    args = ["diagnose", RECORDS / f"{record}.json", "--notebook", FILES / f"{notebook}.ipynb"]
    args += ["--other", RECORDS / f"{other}.json"] if other else []
    done = run_cli(*args, env={"COLUMNS": "100"})  # piped, as in CI logs
    assert done.returncode == 0, done.stderr
    blocks = _blocks(done.stdout)
    shown = {block[0].split()[-3] for block in blocks}  # "… rule · 90%" ends each header line
    assert rules <= shown
    for block in blocks:
        assert len(block) <= 8 and all(len(line) <= 100 for line in block), block
        assert block[1].startswith("  ") and any(line.startswith("  fix: ") for line in block)
    assert "shapes_reported" not in done.stdout and ": True" not in done.stdout  # no dump of raw keys
    verbose = run_cli(*args, "--verbose", env={"COLUMNS": "100"})
    assert verbose.returncode == 0 and verbose.stdout.count("  evidence:") == len(blocks)
    assert len(verbose.stdout.splitlines()) > len(done.stdout.splitlines())


def test_json_carries_the_lines_chosen_for_the_reader_and_the_whole_evidence(run_cli: Any) -> None:
    done = run_cli(
        "diagnose", RECORDS / "cpu_unrolled_loop.json", "--notebook", FILES / "diag_unrolled_loop.ipynb", "--json"
    )
    assert done.returncode == 0, done.stderr
    [loop] = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "unrolled-loop"]
    assert [label for label, _ in loop["highlights"]] == ["loop", "steps", "compile"]
    assert loop["action"].startswith("use `jax.lax.fori_loop(0, 200, body, init)`")
    assert loop["evidence"]["loop"]["trips"] == 200 and "all_loops" in loop["evidence"]


def test_thresholds_from_the_command_line(run_cli: Any) -> None:
    args = ["diagnose", RECORDS / "cpu_unrolled_loop.json", "--notebook", FILES / "diag_unrolled_loop.ipynb", "--json"]
    compile_s = load_record("cpu_unrolled_loop").measurements["cells"][1]["compile_s"]
    above = run_cli(*args, "--threshold", f"compile-bound.min_compile_s={2 * compile_s}")
    assert above.returncode == 0, above.stderr
    assert "compile-bound" not in {f["rule"] for f in json.loads(above.stdout)["findings"]}
    for bad, message in (
        ("compile-bound=1", "--threshold expects RULE.NAME=NUMBER"),
        ("compile-bound.min_compile_s=fast", "--threshold expects RULE.NAME=NUMBER"),
        ("compile-bound.nope=1", "rule compile-bound has no threshold nope"),
    ):
        refused = run_cli(*args, "--threshold", bad)
        assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr


# ---- the Finding interface ------------------------------------------------------------------------------


def _bare(**fields: Any) -> Finding:
    values: dict[str, Any] = dict(
        rule="some-rule",
        title="A title",
        cell_index=2,
        severity="medium",
        confidence=0.8,
        evidence={
            "wall_s": 1.5,
            "static_args": False,
            "table": {"a": 1},
            "seconds_at_stake": 1.0,
            "peak_bytes": 3 * 2**30,
            "cause": "new argument shapes",
            "extra": 7,
        },
        summary="Something took 1.50 s.",
        fix="Do this: then that; and more.",
    )
    values.update(fields)
    return Finding(**values)


def test_a_rule_without_highlights_gets_readable_ones_from_its_evidence() -> None:
    finding = _bare()  # as a rule written before issue 15 builds it
    assert finding.evidence_highlights() == [("wall", "1.50 s"), ("peak", "3.0 GiB"), ("cause", "new argument shapes")]
    assert finding.short_fix() == "Do this"
    document = finding.to_dict()
    assert document["highlights"] == [["wall", "1.50 s"], ["peak", "3.0 GiB"], ["cause", "new argument shapes"]]
    assert document["action"] == "Do this"
    again = Finding.from_dict(json.loads(json.dumps(document)))
    assert again.to_dict() == document


def test_even_the_longest_finding_fits_its_lines() -> None:
    words = " ".join(f"word{i}" for i in range(300))
    finding = _bare(summary=words, fix=words, highlights=[(f"label{i}", words) for i in range(6)])
    for width in (100, 60):
        lines = [text for _, text in view.finding_text(finding, {}, width)]
        assert len(lines) <= 8 and all(len(line) <= width for line in lines)
        assert any(line.endswith("… (--verbose)") for line in lines)  # the fix was cut: --verbose has it whole
    verbose = [text for _, text in view.finding_text(finding, {}, 100, verbose=True)]
    assert sum(line.count("word299") for line in verbose) >= 2  # the whole sentence and fix


def test_stored_findings_fit() -> None:
    for record, notebook, other, _ in STORED:
        run = load_record(record)
        findings = diagnose(run, other=load_record(other) if other else None, sources=sources_of(notebook))
        assert findings
        assert_compact(findings, run)


# ---- the report ---------------------------------------------------------------------------------------


def test_report_card_shows_the_labelled_lines_and_folds_the_evidence() -> None:
    record = load_record("cpu_unrolled_loop")
    data = report_data([record])
    data.diagnoses = [(0, diagnose(record, sources=sources_of("diag_unrolled_loop")))]
    text = report_html.report(data)
    card = text[text.index("Python loop unrolled inside jit") :]
    card = card[: card.index("</div>")]
    highlights = card[card.index('<ul class="highlights">') : card.index("</ul>")]
    assert "<b>steps</b>: 200 steps (literal)" in highlights and "<b>loop</b>" in highlights
    fold = card[card.index("<details>") :]
    assert "all_loops" in fold and "trace_s" in fold  # the whole evidence, folded


# ---- the main jobs end with the findings -----------------------------------------------------------------


@pytest.mark.slow
def test_readme_main_job_shows_the_ledger_then_the_findings(run_cli: Any, tmp_path: Path) -> None:
    """`nbscope profile examples/ledger_tour.md`, as the README says, from a checkout (default store)."""
    readme = (REPO / "README.md").read_text()
    assert "nbscope profile examples/ledger_tour.md" in readme
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    done = run_cli("profile", "examples/ledger_tour.md", env={"COLUMNS": "100"}, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    ledger = next(i for i, line in enumerate(lines) if "slowest" in line)
    heading = next(
        i for i, line in enumerate(lines) if re.search(r"`nbscope diagnose 1` shows (it|them) in full", line)
    )
    assert ledger < heading and "--db" not in lines[heading]  # the default store needs no --db
    shown = [line for line in lines[heading + 1 :] if line.strip()]
    assert shown and len(shown) % 2 == 0 and len(shown) <= 6  # two lines per finding, at most three findings
    assert all(line.startswith("    fix: ") for line in shown[1::2])
    # `energy` is called with four shapes: retrace churn fires on any machine (it has no time threshold).
    assert any("`energy` compiled 4 times" in line for line in shown[0::2])
    assert all(len(line) <= 100 for line in shown)
    full = run_cli("diagnose", "1", env={"COLUMNS": "100"})
    assert full.returncode == 0 and "`energy` compiled 4 times" in full.stdout


@pytest.mark.slow
def test_profile_json_markdown_and_no_diagnose(run_cli: Any, tmp_path: Path) -> None:
    db = tmp_path / "db" / "n.db"
    notebook = FILES / "recompile_shapes.ipynb"  # one function compiled for three shapes: retrace churn
    as_json = run_cli("profile", notebook, "--db", db, "--json", timeout=300)
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert loads(as_json.stdout).kind == "profile"  # still a run record
    rules = [f["rule"] for f in document["diagnosis"]["findings"]]
    assert "retrace-churn" in rules and all("highlights" in f for f in document["diagnosis"]["findings"])
    markdown = run_cli("profile", notebook, "--db", db, "--markdown", timeout=300)
    assert markdown.returncode == 0 and "### nbscope diagnose" in markdown.stdout
    assert f"nbscope diagnose 2 --db {db}" in markdown.stdout
    quiet = run_cli("profile", notebook, "--db", db, "--no-diagnose", env={"COLUMNS": "100"}, timeout=300)
    assert quiet.returncode == 0 and "slowest" in quiet.stdout
    assert "shows them in full" not in quiet.stdout and "nbscope diagnose" not in quiet.stdout
    quiet_json = run_cli("profile", notebook, "--db", db, "--no-diagnose", "--json", timeout=300)
    assert "diagnosis" not in json.loads(quiet_json.stdout)


@pytest.mark.slow
def test_trace_ends_each_notebook_with_its_findings(run_cli: Any, tmp_path: Path) -> None:
    shutil.copy(FILES / "recompile_shapes.ipynb", tmp_path / "shapes.ipynb")
    db = tmp_path / "db" / "nbscope.db"
    done = run_cli("trace", "--db", db, "--", "jupyter", "execute", "shapes.ipynb", env={"COLUMNS": "100"}, timeout=180)
    assert done.returncode == 0, done.stderr
    assert f"`nbscope diagnose 1 --db {db}` shows them in full" in " ".join(done.stdout.split())  # wrapped, not cut
    assert "Retrace churn" in done.stdout or "compiled 3 times" in done.stdout
    as_json = run_cli("trace", "--db", db, "--json", "--", "jupyter", "execute", "shapes.ipynb", timeout=180)
    [printed] = json.loads(as_json.stdout)
    assert "retrace-churn" in [f["rule"] for f in printed["diagnosis"]["findings"]]


def test_audit_lists_each_notebooks_top_findings() -> None:
    runs = {name: load_record(name) for name in ("cpu_unrolled_loop", "cpu_x64")}
    for number, record in enumerate(runs.values(), start=1):
        record.run_id = number
    entries = [
        entry_from_record(r, key=f"{name}.ipynb", backend="cpu", source_hash="x", reused=False)
        for name, r in runs.items()
    ]
    entries = diagnose_entries(entries, lambda entry: runs[entry.path[: -len(".ipynb")]])
    loop = entries[0]
    assert loop.findings is not None and loop.findings >= 3
    assert loop.top_findings is not None and len(loop.top_findings) == 3
    assert loop.top_findings[0] == loop.top_finding
    from nbscope.record.run import RunRecord
    from nbscope.render.audit import print_audit_findings
    from nbscope.schema.codec import encode

    audit = RunRecord(kind="audit", target="book", fingerprint={}, measurements={"notebooks": encode(entries)})
    width = console.width
    console.width = 100
    try:
        with console.capture() as captured:
            print_audit_findings(audit, lambda run_id: f"nbscope diagnose {run_id}")
    finally:
        console.width = width
    text = captured.get()
    assert "cpu_unrolled_loop.ipynb (cpu, run 1)" in text and "`nbscope diagnose 1` shows them in full" in text
    assert text.count("    fix: ") >= 3 and all(len(line) <= 100 for line in text.splitlines())
