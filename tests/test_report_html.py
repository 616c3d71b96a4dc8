"""``nbscope report``: one self-contained HTML file with inline SVG plots, checked as text and in headless
Chromium (renders without console errors, plots visible in a screenshot, notebook text shown as text)."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import signal
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from nbscope._errors import NbscopeError
from nbscope.analyse.diagnose import Finding, Findings
from nbscope.analyse.report import report_data
from nbscope.record.run import RunRecord
from nbscope.record.store import Store
from nbscope.render import html as html_report

FILES = Path(__file__).resolve().parent / "files"
NOTEBOOK = FILES / "gate_sleep.ipynb"
HOSTILE = 'print("$5 & $x^2$ <img src=x onerror=alert(2)>")'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install chromium; .ci/run does it)"
)


def fake_diagnose(record: RunRecord, other: RunRecord | None = None) -> Findings:
    return Findings(
        [
            Finding(
                rule="slow-cell",
                title="Slow cell <img src=x onerror=alert(3)>",
                cell_index=1,
                severity="high",
                confidence=0.9,
                evidence={"wall_s": 0.3, "source": "<script>alert(4)</script>"},
                summary="Cell 2 sleeps & waits.",
                fix="Sleep less <b>now</b>.",
            )
        ]
    )


def synthetic_pathways() -> RunRecord:
    cells = [
        {
            "source_hash": "p1",
            "index": 0,
            "line": 12,
            "first_line": "import jax",
            "by_pathway": {
                "kernel": {"wall_s": 0.8, "compile_s": 0.0, "status": "ok"},
                "script": {"wall_s": 0.7, "compile_s": 0.0, "status": "ok"},
            },
        },
        {
            "source_hash": "p2",
            "index": 1,
            "line": 20,
            "first_line": HOSTILE,
            "by_pathway": {
                "kernel": {"wall_s": 1.5, "compile_s": 0.4, "status": "ok"},
                "script": {"wall_s": 1.2, "compile_s": 0.4, "status": "ok"},
            },
        },
    ]
    return RunRecord(
        kind="pathways",
        target="lecture.md",
        fingerprint={"digest": "d9", "cpu": {"model": "CPU"}},
        measurements={
            "totals": {"wall_s": 2.3},
            "pathways": {
                "kernel": {"totals": {"wall_s": 2.3, "cells": 2}},
                "script": {"totals": {"wall_s": 1.9, "cells": 2}},
            },
            "cells": cells,
        },
        command=["test"],
    )


def synthetic_loops() -> RunRecord:
    counts = [10, 100, 1000, 10000, 100000]
    return RunRecord(
        kind="loops",
        target="loops-suite",
        fingerprint={"digest": "d9"},
        measurements={
            "totals": {"wall_s": 4.0},
            "sweeps": [
                {
                    "device": "cpu",
                    "loop": "fori_loop",
                    "trip_counts": counts,
                    "seconds": [1e-4 + 2e-8 * n for n in counts],
                    "fit": {"us_per_iter": 0.02, "a_s": 1e-4, "b_s": 2e-8, "r2": 0.999},
                },
                {
                    "device": "cpu",
                    "loop": "scan <b>",
                    "trip_counts": counts,
                    "seconds": [2e-4 + 1e-7 * n for n in counts],
                    "fit": {"us_per_iter": 0.1, "a_s": 2e-4, "b_s": 1e-7, "r2": 0.998},
                },
            ],
        },
        command=["test"],
    )


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two real profiles of gate_sleep.ipynb (cell 2 made 3× slower in the second), history in the store,
    a pathways and a loops record, and diagnosis cards with hostile text in place of the real findings."""
    from nbscope.api.profile import ProfileOptions, profile

    folder = tmp_path_factory.mktemp("report")
    store = Store(folder / "nbscope.db")
    runs = []
    for seconds in ("0.1", "0.3"):
        runs.append(
            profile(
                NOTEBOOK,
                ProfileOptions(env={"NBSCOPE_GATE_SLOW": seconds}),
                store=store,
                live_path=folder / f"{seconds}.jsonl",
            )
        )
    pathways, loops = synthetic_pathways(), synthetic_loops()
    pathways.fingerprint = loops.fingerprint = runs[0].fingerprint  # measured on the same machine
    data = report_data([*runs, pathways, loops], store=store)
    # Findings with hostile text, in place of the real ones (which find nothing to say about sleeps).
    data.diagnoses = [(i, fake_diagnose(r)) for i, r in enumerate(data.records) if r.kind == "profile"]
    path = html_report.write_report(data, folder / "report.html")
    return {"path": path, "text": path.read_text(encoding="utf-8"), "store": store, "runs": runs, "folder": folder}


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str, str | None]] = []
        self.svg_text: list[str] = []
        self._in_text = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.extend((tag, name, value) for name, value in attrs)
        self._in_text += tag == "text"

    def handle_endtag(self, tag: str) -> None:
        self._in_text -= tag == "text" and self._in_text > 0

    def handle_data(self, data: str) -> None:
        if self._in_text:
            self.svg_text.append(data)


@pytest.mark.slow
def test_report_is_self_contained_and_escaped(report_file: dict[str, Any]) -> None:
    text = report_file["text"]
    parser = Tags()
    parser.feed(text)
    assert "script" not in parser.tags and "img" not in parser.tags and "iframe" not in parser.tags
    assert "<script" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=alert(2)&gt;" in text and "&lt;img src=x onerror=alert(3)&gt;" in text
    # No resource is fetched: no src attributes, links only to fragments inside the page.
    for tag, name, value in parser.attributes:
        assert name != "src", (tag, name, value)
        if name.endswith("href"):
            assert (value or "").startswith("#"), (tag, name, value)
    assert "default-src 'none'" in text
    # Plots are inline SVG with text kept as text: the notebook's text reaches it escaped, $…$ not as math.
    assert text.count("<svg") >= 6  # 2 waterfalls, side-by-side bars, pathways, loops, history
    joined = " ".join(parser.svg_text)
    assert "<script>alert(1)</script>" in joined  # the parser unescaped it: it was escaped in the file
    assert re.search(r"<text[^>]*>[^<]*&lt;script&gt;alert\(1\)", text)
    assert "$5 &amp; $x^2$" in text
    for heading in (
        "Runs",
        "Gate:",
        "Fingerprint",
        "Cells: waterfall",
        "Compared runs",
        "Pathways",
        "Loop sweeps",
        "Diagnosis",
        "History",
    ):
        assert f"<h2>{heading}" in text, heading


def test_svg_keeps_hostile_text_as_escaped_text() -> None:
    from nbscope.render.html._svg import BarChart, PointChart

    hostile = "x --> <script>alert(5)</script> <!-- ]]> & $5 $y$\x07"
    bars = BarChart([hostile], hostile, hostile)
    bars.bar(0, 0.0, 1.0, "#4c72b0")
    points = PointChart(hostile, "n", "s", xscale="log", yscale="log")
    points.series([(1, 1), (10, 10), (100, 100)], "#4c72b0", line=True)
    for text in (bars.svg([(hostile, "#4c72b0")]), points.svg([(hostile, "#4c72b0")])):
        assert text.startswith('<svg class="plot"') and "<?xml" not in text
        assert "<script" not in text and "]]>" not in text and "\x07" not in text
        assert "x --&gt; &lt;script&gt;alert(5)&lt;/script&gt; &lt;!-- ]]&gt; &amp; $5 $y$" in text
        ElementTree.fromstring(text)  # well-formed XML


def test_bar_chart_places_bars_on_its_axis() -> None:
    from nbscope.render.html._svg import Axis, BarChart

    chart = BarChart(["a", "b"], "t", "s")
    chart.bar(0, 0.0, 2.0, "#111111")
    chart.bar(1, 2.0, 6.0, "#222222", outline=True)
    root = ElementTree.fromstring(chart.svg())
    ns = "{http://www.w3.org/2000/svg}"
    bars = {r.get("fill"): r for r in root.iter(f"{ns}rect") if r.get("fill") in ("#111111", "#222222")}
    first, second = (float(bars[c].get("width")) for c in ("#111111", "#222222"))
    assert second == pytest.approx(3 * first, rel=0.02)  # 6 s against 2 s on one linear axis
    assert float(bars["#222222"].get("x")) == pytest.approx(float(bars["#111111"].get("x")) + first, abs=0.2)
    assert bars["#222222"].get("stroke") == "#c00000" and bars["#111111"].get("stroke") is None
    ticks = [float(t.text) for t in root.iter(f"{ns}text") if (t.text or "").replace(".", "").isdigit()]
    assert 0 in ticks and max(ticks) >= 8  # the axis covers the longest bar
    log = Axis(0.003, 40, "log")
    assert (log.low, log.high) == (0.001, 100) and [label for _, label in log.ticks()][:2] == ["0.001", "0.01"]
    assert log.fraction(1) == pytest.approx(0.6) and log.fraction(1e-9) == 0.0


def test_time_axis_ticks_are_dates_for_a_year_and_clock_times_for_an_hour() -> None:
    from nbscope.render.html._svg import Axis

    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
    year = Axis(start, start + 365 * 86400, "time").ticks()
    assert 2 <= len(year) <= 8 and all(re.fullmatch(r"\d{4}-\d\d-\d\d", label) for _, label in year)
    hour = Axis(start, start + 3600, "time").ticks()
    assert 2 <= len(hour) <= 8 and hour[0][1] == "01-01 00:00"


@pytest.mark.slow
def test_report_content(report_file: dict[str, Any]) -> None:
    text = report_file["text"]
    # Cell 2 made 3× slower; single samples on a shared machine can hide it, so only the section is checked.
    assert '<span class="fail">FAIL</span>' in text or '<span class="pass">PASS</span>' in text
    assert "time.sleep(float(os.environ.get(&quot;NBSCOPE_GATE_SLOW&quot;" in text
    assert "Slow cell &lt;img" in text and "Sleep less &lt;b&gt;now&lt;/b&gt;." in text
    assert "fori_loop" in text and "scan &lt;b&gt;" in text
    assert "compile (JAX + Numba)" in text


def test_report_without_optional_parts(tmp_path: Path) -> None:
    record = synthetic_loops()
    text = html_report.report(report_data([record]))
    assert "<h2>Loop sweeps</h2>" in text and "<h2>History</h2>" not in text and "<h2>Gate" not in text
    bench = RunRecord(
        kind="bench",
        target="suite",
        fingerprint={"digest": "x"},
        measurements={"totals": {"wall_s": 3.0, "groups": 2}},
        command=[],
    )
    assert "bench totals" in html_report.report(report_data([bench]))
    with pytest.raises(NbscopeError, match="at least one"):
        html_report.report(report_data([]))


def test_report_with_the_real_diagnosis() -> None:
    pytest.importorskip("nbscope.analyse.diagnose")
    stored = FILES / "records" / "cpu_unrolled_loop.json"
    if not stored.is_file():
        pytest.skip(f"{stored} is not there")
    from nbscope.record import run as record_module

    text = html_report.report(report_data([record_module.load(stored)]))
    assert "<h2>Diagnosis</h2>" in text
    assert text.count('<div class="card') >= 1 or "No findings." in text


@pytest.mark.slow
def test_report_cli(report_file: dict[str, Any], run_cli: Any, tmp_path: Path) -> None:
    ids = [str(r.run_id) for r in report_file["runs"]]
    output = tmp_path / "out" / "r.html"
    output.parent.mkdir()  # -o writes in an existing folder only
    done = run_cli("report", *ids, "--db", report_file["store"].path, "-o", output)
    assert done.returncode == 0, done.stderr
    assert output.is_file() and "<h2>History</h2>" in output.read_text()
    done = run_cli("report", "999", "--db", report_file["store"].path, "-o", output)
    assert done.returncode == 2 and "no run with id 999" in done.stderr
    with pytest.raises(NbscopeError, match="directory"):
        html_report.write_report(report_data(report_file["runs"][:1]), tmp_path)


def chromium(*args: str, profile: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with no network side traffic; killed with its children on timeout."""
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.slow
@needs_chromium
def test_chromium_renders_plots_without_console_errors(report_file: dict[str, Any], tmp_path: Path) -> None:
    from matplotlib import image

    screenshot = tmp_path / "report.png"
    done = chromium(
        "--enable-logging=stderr",
        "--v=0",
        f"--screenshot={screenshot}",
        "--window-size=1280,2400",
        report_file["path"].resolve().as_uri(),
        profile=tmp_path / "profile",
    )
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    assert "Content Security Policy" not in done.stderr
    assert screenshot.is_file() and screenshot.stat().st_size > 20_000
    shutil.copy(screenshot, report_file["folder"] / "report.png")  # kept beside the report for a look
    pixels = image.imread(screenshot)[..., :3]
    assert pixels.shape[:2] == (2400, 1280)
    not_white = (pixels < 0.95).any(axis=-1).mean()
    assert not_white > 0.02, f"screenshot nearly blank ({not_white:.1%} non-white)"
    # Bars in the plots' colours are on screen: the waterfall's run (blue) and compile/legend (orange).
    for colour in ((0x4C, 0x72, 0xB0), (0xDD, 0x84, 0x52)):
        target = [c / 255 for c in colour]
        close = (abs(pixels - target) < 0.03).all(axis=-1).sum()
        assert close > 500, f"too few pixels of plot colour {colour}: {close}"


@pytest.mark.slow
@needs_chromium
def test_chromium_shows_script_as_text(report_file: dict[str, Any], tmp_path: Path) -> None:
    done = chromium("--dump-dom", report_file["path"].resolve().as_uri(), profile=tmp_path / "profile")
    dom = done.stdout
    assert "</html>" in dom, done.stderr[-2000:]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "<script" not in dom.lower()
    assert "<img" not in dom.lower()
    assert dom.count("<svg") >= 6


@pytest.mark.slow
@needs_chromium
def test_chromium_console_check_catches_errors(tmp_path: Path) -> None:
    """The console check above would see an error: a page that throws shows up in the log."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><script>throw new Error("boom-uncaught")</script></body></html>')
    done = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri(), profile=tmp_path / "profile")
    assert "Uncaught Error: boom-uncaught" in done.stderr
