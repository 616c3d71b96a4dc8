"""Every view of a stored run renders as it did when the captures were taken: the outputs (``--json``, markdown,
terminal, HTML) of show, report, compare, diagnose, forecast, cells, gate, history and runs over real recorded
runs (``tests/files/records/``, and one ``profile --forecast t4 --repeat 2`` of ``forecast_scan.md`` exported
into ``tests/files/captures/``) are compared byte for byte with ``tests/files/captures/*.out``.

The record model and its encoder and decoder change under these views: a field read differently, a key written
in another order or a float formatted otherwise shows here. Where an output holds something that is not the
run's (the repository's folder, the store's path, the time now), both sides are normalised the same way.

``NBSCOPE_WRITE_CAPTURES=1`` writes the captures anew (only when a view is meant to change).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FILES = REPO / "tests" / "files"
CAPTURES = FILES / "captures"
RECORDS = sorted((FILES / "records").glob("*.json")) + [CAPTURES / "profiled_forecast_scan.json"]
RUN = {path.stem: str(number) for number, path in enumerate(RECORDS, start=1)}  # run ids as imported, in order

LATENCY_CPU, LATENCY_T4 = RUN["cpu_latency_loop"], RUN["synthetic_t4_latency_loop"]
X64_CPU, X64_T4 = RUN["cpu_x64"], RUN["synthetic_t4_x64"]
SCAN = RUN["profiled_forecast_scan"]
FORMATS = ((), ("--json",), ("--markdown",))
COMMANDS: dict[str, tuple[str, ...]] = {
    **{
        f"show-{name}{'-json' * bool(form)}": ("show", run, *form)
        for name, run in RUN.items()
        for form in ((), ("--json",))
    },
    **{
        f"diagnose-{name}{fmt[0][1:] if fmt else ''}": ("diagnose", RUN[name], *fmt)
        for name in (
            "cpu_latency_loop",
            "synthetic_t4_gpu_memory",
            "cpu_x64",
            "synthetic_cpu_slow_compile_alarm",
            "cpu_forecast_cut",
            "profiled_forecast_scan",
        )
        for fmt in FORMATS
    },
    "diagnose-latency-other-json": ("diagnose", LATENCY_T4, "--other", LATENCY_CPU, "--json"),
    **{
        f"forecast-{name}{fmt[0][1:] if fmt else ''}": ("forecast", RUN[name], "--gpu", "t4,a100", *fmt)
        for name in ("cpu_forecast_cut", "cpu_forecast_f64_loop", "profiled_forecast_scan")
        for fmt in FORMATS
    },
    "forecast-scan-all": ("forecast", SCAN, "--gpu", "t4", "--all"),
    **{f"compare-latency{fmt[0][1:] if fmt else ''}": ("compare", LATENCY_CPU, LATENCY_T4, *fmt) for fmt in FORMATS},
    **{f"compare-x64{fmt[0][1:] if fmt else ''}": ("compare", X64_CPU, X64_T4, *fmt) for fmt in FORMATS},
    **{f"cells{fmt[0][1:] if fmt else ''}": ("cells", *RUN.values(), "--all", *fmt) for fmt in FORMATS},
    **{
        f"gate{fmt[0][1:] if fmt else ''}": (
            "gate",  # two runs on the T4 (a CPU run against a GPU run is refused: the device is no change of code)
            "--candidate",
            LATENCY_T4,
            "--baseline",
            RUN["synthetic_t4_gpu_memory"],
            "--all",
            *fmt,
        )
        for fmt in FORMATS
    },
    **{
        f"history{fmt[0][1:] if fmt else ''}": ("history", "tests/files/diag_latency_loop.ipynb", *fmt)
        for fmt in FORMATS
    },
    "runs-json": ("runs", "--json"),
    "report-scan-html": ("report", SCAN, "-o", "-", "--no-history"),
    "report-latency-html": ("report", LATENCY_CPU, LATENCY_T4, "-o", "-"),
}

# What differs between two renderings that is not the run's: the checkout's folder, the store's path, and
# what is relative to the time now.
NOT_THE_RUNS = [
    (re.compile(r"\d+ (?:second|minute|hour|day|week|month|year)s? ago"), "<ago>"),
    (re.compile(r"generated \d{4}-\d\d-\d\d[ T][\d:.]+Z?"), "generated <now>"),
]


# The checkouts the recorded runs under tests/files/records were profiled in: their own paths name them, and a
# view of them must read the same whether or not this checkout is one of those.
RECORDED_IN = re.compile(r"/work/(?:main|wt/[\w-]+)(?=/)")


def normalise(text: str, store: Path) -> str:
    text = text.replace(str(store.parent), "<store>").replace(str(REPO), "<repo>")
    text = RECORDED_IN.sub("<repo>", text)
    for pattern, replacement in NOT_THE_RUNS:
        text = pattern.sub(replacement, text)
    return text


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding every captured record, imported in the order of ``RECORDS`` (so run ids are stable)."""
    from conftest import run_in_process

    path = tmp_path_factory.mktemp("captures") / "nbscope.db"
    result = run_in_process(["import", "--db", str(path), *map(str, RECORDS)], cwd=REPO)
    assert result.returncode == 0, result.stderr
    return path


def _run(store: Path) -> Callable[[tuple[str, ...]], subprocess.CompletedProcess[str]]:
    from conftest import run_in_process

    def run(args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        return run_in_process(
            [*args, "--db", str(store)],
            cwd=REPO,
            env={"COLUMNS": "100", "LINES": "50", "NO_COLOR": "1", "TERM": "dumb"},
        )

    return run


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_view_renders_as_captured(name: str, store: Path) -> None:
    result = _run(store)(COMMANDS[name])
    rendered = normalise(f"exit {result.returncode}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}", store)
    captured = CAPTURES / f"{name}.out"
    if os.environ.get("NBSCOPE_WRITE_CAPTURES"):
        captured.write_text(rendered, encoding="utf-8")
    assert "Traceback" not in rendered, rendered
    assert rendered == captured.read_text(encoding="utf-8"), f"{name} renders differently from {captured}"


@pytest.mark.parametrize(
    ("args", "runs"),
    [
        (("report", SCAN, "-o", "-"), 1),
        (("forecast", SCAN, "--gpu", "t4", "--json"), 1),
        (("diagnose", RUN["cpu_forecast_cut"], "--gpu", "t4", "--notebook", "tests/files/forecast_cut.md"), 1),
        (("compare", LATENCY_CPU, LATENCY_T4), 2),
    ],
    ids=["report", "forecast", "diagnose", "compare"],
)
def test_each_command_decodes_each_run_once(
    args: tuple[str, ...], runs: int, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command loads each run it reads once, and decodes its document into the typed model once, however many
    analyses and views read it."""
    from nbscope.schema import codec

    decoded: list[str] = []
    decode = codec.decode

    def counting(cls: type, value: object) -> object:
        decoded.append(cls.__name__)
        return decode(cls, value)

    monkeypatch.setattr(codec, "decode", counting)
    result = _run(store)(args)
    assert result.returncode == 0, result.stderr
    assert decoded.count("NotebookRun") == runs, decoded
    assert decoded.count("Machine") <= runs, decoded
