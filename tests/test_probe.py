"""The in-kernel probe: exact JAX and Numba compile counts per cell in real kernels, user vs eager
compiles, a user's IPython profile, and the probe's parts on their own (no kernel)."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from nbscope.api.profile import ProfileOptions, profile
from nbscope.collect import notebook as notebook_module
from nbscope.collect.probe import PROBE_FILE, PROBE_MODULE
from nbscope.collect.runner import ExecutionOptions, NotebookExecution, ProbeReader, execute
from nbscope.record.run import RunRecord
from nbscope.record.store import Store

FILES = Path(__file__).resolve().parent / "files"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def _load_probe_as_kernels_do() -> ModuleType:
    """The probe module under the name kernels import it by (``_nbscope_probe``, from its file)."""
    spec = importlib.util.spec_from_file_location(PROBE_MODULE, PROBE_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe_module = _load_probe_as_kernels_do()


# ---- real kernels ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], RunRecord]:
    """``profiled(name)``: the profile of ``tests/files/<name>``, run once per module and stored."""
    root = tmp_path_factory.mktemp("probe-runs")
    store = Store(root / "db" / "nbscope.db")
    done: dict[str, RunRecord] = {}

    def run(name: str) -> RunRecord:
        if name not in done:
            done[name] = profile(FILES / name, ProfileOptions(), store=store, live_path=root / f"{name}.jsonl")
        return done[name]

    return run


def jax_of(cell: dict[str, Any]) -> dict[str, Any]:
    assert cell["jax"] is not None, f"no JAX figures for cell {cell['index']}: {cell['first_line']}"
    return cell["jax"]


@pytest.mark.slow
def test_recompiles_once_per_new_shape(profiled: Callable[[str], RunRecord]) -> None:
    record = profiled("recompile_shapes.ipynb")
    assert record.status == "ok"
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok"] * 4
    imports, define, three_shapes, seen_shape = cells
    assert jax_of(imports)["compiles"] == 0  # importing jax compiles nothing (and attaches the probe)
    assert jax_of(define)["compiles"] == 0  # decorating compiles nothing
    jax = jax_of(three_shapes)
    assert jax["compiles"] == 3
    assert jax["backend_events"] == 3
    assert (jax["user_compiles"], jax["eager_compiles"], jax["library_compiles"]) == (3, 0, 0)
    [function] = jax["functions"]
    assert function["name"] == "scale_sum" and function["kind"] == "user" and function["count"] == 3
    assert function["shapes"] == ["float32[3]", "float32[4]", "float32[5]"]
    assert jax["trace_s"] > 0 and jax["lower_s"] > 0 and jax["backend_s"] > 0
    assert three_shapes["compile_s"] == pytest.approx(jax["trace_s"] + jax["lower_s"] + jax["backend_s"])
    assert 0 < three_shapes["compile_s"] <= three_shapes["wall_s"]
    assert three_shapes["run_s"] == pytest.approx(max(0.0, three_shapes["code_s"] - three_shapes["compile_s"]))
    # a shape seen before: served from the in-memory jit cache
    assert jax_of(seen_shape)["compiles"] == 0 and jax_of(seen_shape)["functions"] == []
    assert seen_shape["compile_s"] == 0
    totals = record.measurements["totals"]
    assert (totals["compiles"], totals["user_compiles"], totals["eager_compiles"]) == (3, 3, 0)
    assert totals["cache_state"] == "off" and totals["cache_hits"] == 0


@pytest.mark.slow
def test_lambda_rejitted_per_call_compiles_every_time(profiled: Callable[[str], RunRecord]) -> None:
    record = profiled("lambda_rejit.ipynb")
    loop = record.measurements["cells"][1]
    assert loop["status"] == "ok"
    jax = jax_of(loop)
    assert jax["compiles"] == 4 and jax["user_compiles"] == 4 and jax["eager_compiles"] == 0
    [function] = jax["functions"]
    assert (function["name"], function["kind"], function["count"]) == ("<lambda>", "user", 4)
    assert function["shapes"] == ["float32[4]"] * 4


@pytest.mark.slow
def test_eager_ops_compile_but_are_not_user_compiles(profiled: Callable[[str], RunRecord]) -> None:
    record = profiled("eager_ops.ipynb")
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok"] * 4
    names: set[str] = set()
    for cell in cells[1:]:
        jax = jax_of(cell)
        assert jax["compiles"] >= 1, cell["first_line"]
        assert jax["user_compiles"] == 0 and jax["library_compiles"] == 0
        assert jax["eager_compiles"] == jax["compiles"]
        assert all(f["kind"] == "eager" for f in jax["functions"])
        names |= {f["name"] for f in jax["functions"]}
    assert {"broadcast_in_dim", "convert_element_type", "_normal"} <= names
    assert "convert_element_type" in {f["name"] for f in jax_of(cells[2])["functions"]}  # astype
    assert "_normal" in {f["name"] for f in jax_of(cells[3])["functions"]}
    totals = record.measurements["totals"]
    assert totals["user_compiles"] == 0
    assert totals["eager_compiles"] == totals["compiles"] == sum(jax_of(c)["compiles"] for c in cells)


@pytest.mark.slow
def test_numba_counts_outermost_compiles_per_type(profiled: Callable[[str], RunRecord]) -> None:
    record = profiled("numba_two_types.ipynb")
    cells = record.measurements["cells"]
    assert [c["status"] for c in cells] == ["ok"] * 5
    assert all(c["jax"] is None for c in cells)  # JAX never imported: the probe did not import it either
    as_int, as_float, again = cells[2]["numba"], cells[3]["numba"], cells[4]["numba"]
    # `outer` calls the jitted `inner`: its nested compile is part of outer's, not a compile of its own
    assert as_int["compiles"] == 1 and [f["name"] for f in as_int["functions"]] == ["outer"]
    assert "int64" in as_int["functions"][0]["signature"]
    assert as_float["compiles"] == 1 and [f["name"] for f in as_float["functions"]] == ["outer"]
    assert "float64" in as_float["functions"][0]["signature"]
    assert again["compiles"] == 0
    for cell in cells[2:4]:
        assert cell["numba"]["compile_s"] == pytest.approx(cell["numba"]["functions"][0]["seconds"])
        assert cell["compile_s"] == pytest.approx(cell["numba"]["compile_s"])
        assert 0 < cell["compile_s"] <= cell["wall_s"]
    assert record.measurements["totals"]["numba_compiles"] == 2
    assert record.measurements["totals"]["compiles"] == 0


# ---- the probe changes nothing in the notebook ------------------------------------------------------


@pytest.fixture(scope="module")
def executed() -> Callable[[str], NotebookExecution]:
    """``executed(name)``: ``tests/files/<name>`` run once in a real kernel, outputs kept."""
    done: dict[str, NotebookExecution] = {}

    def run(name: str) -> NotebookExecution:
        if name not in done:
            done[name] = execute(notebook_module.read(FILES / name), ExecutionOptions())
        return done[name]

    return run


def outputs_text(execution: NotebookExecution, index: int) -> str:
    """Everything cell ``index`` (0-based, among code cells) showed: streams, results, errors."""
    cell = [c for c in execution.executed_nb.cells if c.cell_type == "code"][index]
    return "\n".join(
        str(o.get("text") or o.get("data") or "") + " ".join(str(o.get(k, "")) for k in ("ename", "evalue"))
        for o in cell.outputs
    )


@pytest.mark.slow
def test_jax_compile_logs_stay_out_of_cell_outputs(executed: Callable[[str], NotebookExecution]) -> None:
    """With ``logging.basicConfig()`` the root handler prints every record reaching it: the probe's DEBUG
    records (JAX's compile shapes) must not, while records the notebook asks for still do."""
    run = executed("probe_quiet_logging.ipynb")
    cells = run.cells
    assert [c["status"] for c in cells] == ["ok"] * 5, [c.get("error") for c in cells]
    for index in (1, 2, 3):
        text = outputs_text(run, index)
        assert "Compiling" not in text and "DEBUG" not in text, text
    # the probe still read the compile's argument shapes from the record it kept from printing
    [double] = [f for f in jax_of(cells[2])["functions"] if f["name"] == "double"]
    assert double["shapes"] == ["float32[3]"] and double["kind"] == "user"
    # jax_log_compiles: the notebook asked for those WARNING records, and they reached its handlers
    assert "Compiling" in outputs_text(run, 4)
    [double] = [f for f in jax_of(cells[4])["functions"] if f["name"] == "double"]
    assert double["shapes"] == ["float32[4]"]


@pytest.mark.slow
def test_odd_objects_in_the_namespace_do_not_break_the_cell(executed: Callable[[str], NotebookExecution]) -> None:
    """Objects whose ``__getattr__`` answers anything or raises KeyError: no "Error in callback", and the
    cell keeps its measurements."""
    run = executed("probe_odd_namespace.ipynb")
    cells = run.cells
    assert [c["status"] for c in cells] == ["ok"] * 3, [c.get("error") for c in cells]
    text = outputs_text(run, 2)
    assert "Error in callback" not in text and "KeyError" not in text, text
    jax = jax_of(cells[2])
    assert jax["user_compiles"] == 1
    assert {f["name"]: f["kind"] for f in jax["functions"]}["double"] == "user"


@pytest.mark.slow
def test_a_library_named_jax_something_is_not_jax(executed: Callable[[str], NotebookExecution]) -> None:
    """``jaxlike_library`` (as jaxopt or jaxtyping): compiles it triggers are a library's, not eager ops."""
    cells = executed("probe_jax_named_package.ipynb").cells
    assert [c["status"] for c in cells] == ["ok"] * 3, [c.get("error") for c in cells]
    library = jax_of(cells[1])
    assert library["compiles"] >= 1
    assert library["library_compiles"] == library["compiles"] and library["eager_compiles"] == 0
    assert {f["caller"] for f in library["functions"]} == {"jaxlike_library"}
    notebook = jax_of(cells[2])  # jnp called from the notebook itself: eager, as before
    assert notebook["compiles"] >= 1 and notebook["eager_compiles"] == notebook["compiles"]


@pytest.mark.slow
def test_user_ipython_profile_keeps_working(tmp_path: Path) -> None:
    """The probe loads in addition to the user's profile: start-up files still run, and cells are measured."""
    ipython_dir = tmp_path / "ipython"
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-x.py").write_text("FROM_STARTUP = 41\n")
    path = tmp_path / "uses_profile.ipynb"
    cells = [
        new_code_cell("import time\nanswer = FROM_STARTUP + 1\ntime.sleep(0.2)\nanswer"),
        # the probe imports nothing heavy and never jax or numba itself
        new_code_cell(
            "import sys\n"
            "heavy = sorted({'jax', 'numba', 'numpy', 'matplotlib', 'pynvml'} & set(sys.modules))\n"
            "assert not heavy, heavy"
        ),
    ]
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC}), path)
    record = profile(
        path,
        ProfileOptions(env={"IPYTHONDIR": str(ipython_dir)}),
        store=Store(tmp_path / "db" / "nbscope.db"),
        live_path=tmp_path / "live.jsonl",
    )
    first, second = record.measurements["cells"]
    assert first["status"] == "ok", first["error"]
    assert second["status"] == "ok", second["error"]
    # measured by the probe (the runner alone has neither the kernel-side code time nor memory)
    assert record.measurements["kernel"] is not None and record.measurements["kernel"]["type"] == "kernel"
    assert first["execution_count"] == 1
    assert first["code_s"] is not None and first["code_s"] >= 0.2
    assert first["wall_s"] >= first["code_s"]
    assert first["rss"] is not None and first["rss"]["before_bytes"] > 0


# ---- the probe's parts, without a kernel --------------------------------------------------------------


def test_wrapped_function_names() -> None:
    assert probe_module._base_name("jit(f)") == "f"
    assert probe_module._base_name("jit(<lambda>)") == "<lambda>"
    assert probe_module._base_name("pjit(scale_sum)") == "scale_sum"
    assert probe_module._base_name("broadcast_in_dim") == "broadcast_in_dim"


def test_short_shapes() -> None:
    text = "(ShapedArray(float32[3]), ShapedArray(int32[], weak_type=True))"
    assert probe_module._short_shapes(text) == "float32[3], int32[]"
    assert probe_module._short_shapes("(ShapedArray(float32[3,4]),)") == "float32[3,4]"
    assert probe_module._short_shapes("odd") == "odd"


class FakeShell:
    def __init__(self, user_ns: dict[str, Any]) -> None:
        self.user_ns = user_ns


def run_cell(
    probe: probe_module.Probe, source: str, body: Callable[[], None], error: BaseException | None = None
) -> None:
    info = SimpleNamespace(raw_cell=source)
    probe.pre_run_cell(info)
    body()
    probe.post_run_cell(
        SimpleNamespace(error_in_exec=error, error_before_exec=None, execution_count=probe.sequence, info=info)
    )


# The JAX side of a compile as the probe sees it. Defined in a namespace named like a JAX module: the probe
# skips JAX's own frames when it looks for the code that asked for the compile.
_JAX_LIKE: dict[str, Any] = {"__name__": "jax._src.fake_dispatch"}
exec(
    "def fake_compile(probe, name, *, hit=False):\n"
    "    probe._on_jax_event('/jax/compilation_cache/compile_requests_use_cache')\n"
    "    probe._on_jax_duration('/jax/core/compile/jaxpr_trace_duration', 0.001, fun_name=name)\n"
    "    probe._on_jax_duration('/jax/core/compile/jaxpr_to_mlir_module_duration', 0.002, fun_name=f'jit({name})')\n"
    "    probe._on_jax_event('/jax/compilation_cache/cache_hits' if hit else '/jax/compilation_cache/cache_misses')\n"
    "    probe._on_jax_duration('/jax/core/compile/backend_compile_duration', 0.01, fun_name=f'jit({name})')\n",
    _JAX_LIKE,
)
fake_compile: Callable[..., None] = _JAX_LIKE["fake_compile"]


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The probe's lines, its kernel line once: the probe writes it again, with ``jax_backend``, the first time it
    sees JAX's backend started, which in these in-process tests another test of the same process may have done."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line for i, line in enumerate(lines) if not (i and line["type"] == "kernel")]


def test_probe_lines_and_compile_classification(tmp_path: Path) -> None:
    main: dict[str, Any] = {"__name__": "__main__"}
    exec("def step(x):\n    return x + 1\n", main)  # a function defined in the notebook
    out = tmp_path / "probe.jsonl"
    probe = probe_module.Probe(FakeShell({"step": main["step"]}), str(out))
    probe.jax_attached = True  # as if the notebook had imported jax
    main["probe"], main["fake_compile"] = probe, fake_compile

    def notebook_code() -> None:
        # compiles triggered from notebook code (frames whose module is __main__)
        exec(
            "fake_compile(probe, 'step')\nfake_compile(probe, 'step', hit=True)\nfake_compile(probe, 'broadcast_in_dim')",
            main,
        )

    run_cell(probe, "y = step(x)\n", notebook_code)
    run_cell(probe, "raise ValueError('no')", lambda: None, error=ValueError("no"))
    probe.out.close()

    kernel, start1, cell1, start2, cell2 = read_lines(out)
    assert kernel["type"] == "kernel" and kernel["probe_version"] == probe_module.PROBE_VERSION
    assert (start1["type"], start1["seq"], start1["hash"]) == ("start", 1, probe_module.source_hash("y = step(x)"))
    assert cell1["type"] == "cell" and cell1["seq"] == 1 and cell1["hash"] == start1["hash"]
    assert cell1["status"] == "ok" and cell1["error"] is None and cell1["wall_s"] >= 0
    jax = cell1["jax"]
    # three backend events, one of them a persistent-cache hit: two real compiles
    assert (jax["backend_events"], jax["cache_hits"], jax["cache_misses"], jax["compiles"]) == (3, 1, 2, 2)
    assert (jax["user_compiles"], jax["eager_compiles"], jax["library_compiles"]) == (1, 1, 0)
    functions = {f["name"]: f for f in jax["functions"]}
    assert functions["step"]["kind"] == "user" and functions["step"]["count"] == 2
    assert functions["step"]["cache_hits"] == 1
    assert functions["broadcast_in_dim"]["kind"] == "eager"
    assert jax["trace_s"] == pytest.approx(0.003) and jax["backend_s"] == pytest.approx(0.03)
    assert cell2["status"] == "error" and cell2["error"] == {"name": "ValueError", "message": "no"}
    assert cell2["jax"]["compiles"] == 0  # counters reset per cell


def test_compiles_from_another_package_are_library(tmp_path: Path) -> None:
    probe = probe_module.Probe(FakeShell({}), str(tmp_path / "probe.jsonl"))
    probe.jax_attached = True
    library: dict[str, Any] = {"__name__": "quantecon.fake", "probe": probe, "fake_compile": fake_compile}
    run_cell(probe, "qe.solve()", lambda: exec("fake_compile(probe, 'solve')", library))
    probe.out.close()
    cell = read_lines(tmp_path / "probe.jsonl")[-1]
    assert (cell["jax"]["library_compiles"], cell["jax"]["user_compiles"]) == (1, 0)
    assert cell["jax"]["functions"][0]["caller"] == "quantecon.fake"


def test_packages_named_like_jax_are_callers_of_their_own(tmp_path: Path) -> None:
    """Only ``jax``, ``jaxlib`` and their submodules are JAX's frames: ``jaxopt`` is a library."""
    probe = probe_module.Probe(FakeShell({}), str(tmp_path / "probe.jsonl"))
    probe.jax_attached = True
    for module in ("jaxopt._src.gradient_descent", "jaxtyping", "jaxlibrary"):
        library: dict[str, Any] = {"__name__": module, "probe": probe, "fake_compile": fake_compile}
        run_cell(probe, "solver.run()", lambda library=library: exec("fake_compile(probe, 'solve')", library))
        cell = read_lines(tmp_path / "probe.jsonl")[-1]
        assert (cell["jax"]["library_compiles"], cell["jax"]["eager_compiles"]) == (1, 0), module
        assert cell["jax"]["functions"][0]["caller"] == module
    probe.out.close()


def test_namespace_objects_are_read_without_running_their_code(tmp_path: Path) -> None:
    """Jitted, wrapped and partial functions are unwrapped from what they store; an object whose
    ``__getattr__`` answers anything (even with a notebook function) or raises is passed over."""
    import functools

    main: dict[str, Any] = {"__name__": "__main__", "functools": functools}
    exec(
        "def step(x):\n    return x + 1\n"
        "def impostor(x):\n    return x\n"
        "def inner(x):\n    return x\n"
        "@functools.wraps(inner)\ndef wrapper(x):\n    return inner(x)\n"
        "class Anything:\n    def __getattr__(self, name):\n        return impostor\n"
        "class Strict:\n    def __getattr__(self, name):\n        raise KeyError(name)\n"
        "    def __getattribute__(self, name):\n        raise KeyError(name)\n"
        "class Model:\n    member = Strict()\n    other = Anything()\n"
        "    def method(self):\n        return 1\n"
        "    @staticmethod\n    def helper():\n        return 2\n",
        main,
    )
    namespace = {
        "partial_step": functools.partial(main["step"], 1),
        "wrapper": main["wrapper"],
        "anything": main["Anything"](),
        "strict": main["Strict"](),
        "Model": main["Model"],
    }
    probe = probe_module.Probe(FakeShell(namespace), str(tmp_path / "probe.jsonl"))
    names = probe._notebook_function_names()
    probe.out.close()
    assert names == {"step", "inner", "method", "helper"}


def test_compile_shape_records_are_read_but_not_passed_on(tmp_path: Path) -> None:
    """The probe lowers JAX's logger to read its DEBUG records; only what the notebook's own set-up would
    have let through reaches the handlers above it."""
    import logging

    class Seen(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    parent = logging.getLogger("nbscope_test_probe")  # stands for the root logger after basicConfig()
    parent.propagate = False
    parent.setLevel(logging.WARNING)
    seen = Seen()
    parent.addHandler(seen)
    logger = logging.getLogger("nbscope_test_probe.pxla")
    probe = probe_module.Probe(FakeShell({}), str(tmp_path / "probe.jsonl"))
    probe_module._capture_compile_shapes(probe, logger)
    message = "Compiling %s with global shapes and types %s. Argument mapping: %s."
    try:
        logger.debug(message, "jit(f)", "(ShapedArray(float32[3]),)", "()")
        assert seen.messages == []
        assert probe.counters.functions["f"]["shapes"] == ["float32[3]"]
        logger.warning(message, "jit(f)", "(ShapedArray(float32[4]),)", "()")  # as with jax_log_compiles
        assert len(seen.messages) == 1 and "float32[4]" in seen.messages[0]
        logger.setLevel(logging.DEBUG)  # the notebook asks for this logger's DEBUG records itself
        logger.debug(message, "jit(f)", "(ShapedArray(float32[5]),)", "()")
        assert len(seen.messages) == 2
        assert probe.counters.functions["f"]["shapes"] == ["float32[3]", "float32[4]", "float32[5]"]
    finally:
        parent.removeHandler(seen)
        for item in list(logger.filters):
            logger.removeFilter(item)
        logger.setLevel(logging.NOTSET)
        probe.out.close()


class FakeKernel:
    """What the probe uses of an ipykernel Kernel: shell handlers and the status publisher."""

    def __init__(self) -> None:
        self.published: list[tuple[str, str]] = []
        self.shell_handlers: dict[str, Any] = {"execute_request": self.execute_request}
        self.run: Callable[[], None] = lambda: None

    async def execute_request(self, *args: Any) -> None:
        self.run()

    def _publish_status(self, status: str, channel: str, parent: Any = None) -> None:
        self.published.append((status, channel))


def test_cell_wall_time_runs_from_busy_to_idle(tmp_path: Path) -> None:
    """nbclient times a cell from the kernel's busy message to its idle one; so does the probe."""
    import asyncio

    out = tmp_path / "probe.jsonl"
    kernel = FakeKernel()
    probe = probe_module.Probe(SimpleNamespace(user_ns={}, kernel=kernel), str(out))
    assert probe.wrap_execute_request() and probe.status_hooked
    kernel.run = lambda: run_cell(probe, "a = 1", lambda: time.sleep(0.01))

    kernel._publish_status("busy", "shell")
    time.sleep(0.05)  # ipykernel's work before the handler
    asyncio.run(kernel.shell_handlers["execute_request"]())
    kernel._publish_status("busy", "control")  # other channels do not count
    time.sleep(0.05)  # ... and after it (hooks, flushing output)
    assert [line["type"] for line in read_lines(out)] == ["kernel", "start"]  # held until idle
    kernel._publish_status("idle", "shell")
    cell = read_lines(out)[-1]
    assert cell["type"] == "cell" and cell["hash"] == probe_module.source_hash("a = 1")
    assert cell["wall_s"] >= 0.1 + cell["code_s"] - 0.005
    assert cell["code_s"] >= 0.01
    assert kernel.published == [("busy", "shell"), ("busy", "control"), ("idle", "shell")]

    # a request without status messages (a concurrent one) is written when its handler returns
    kernel.run = lambda: run_cell(probe, "b = 2", lambda: None)
    asyncio.run(kernel.shell_handlers["execute_request"]())
    probe.out.close()
    assert read_lines(out)[-1]["hash"] == probe_module.source_hash("b = 2")


def test_stderr_alarms_are_noted_and_passed_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    probe = probe_module.Probe(FakeShell({}), str(tmp_path / "probe.jsonl"))
    probe.watch_stderr()
    alarm = "E1130 slow_operation_alarm.cc:65] Constant folding ... Very slow compile? ..."

    def body() -> None:
        sys.stderr.write("ordinary warning\n")
        sys.stderr.write(alarm + "\n")

    run_cell(probe, "z = 1", body)
    probe.out.close()
    assert stream.getvalue() == "ordinary warning\n" + alarm + "\n"
    assert read_lines(tmp_path / "probe.jsonl")[-1]["alarms"] == [alarm]


def test_import_watcher_attaches_after_the_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "nbscope_watched_pkg"
    (tmp_path / f"{name}.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[Any] = []
    watcher = probe_module._ImportWatcher({name: lambda module: seen.append(module.VALUE)})
    sys.meta_path.insert(0, watcher)
    try:
        module = __import__(name)
        assert module.VALUE == 7
        assert seen == [7]  # called once, with the module fully executed
        sys.modules.pop(name)
        __import__(name)
        assert seen == [7]  # not again
    finally:
        sys.meta_path.remove(watcher)
        sys.modules.pop(name, None)


def test_probe_reader_waits_for_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "probe.jsonl"
    reader = ProbeReader(path)
    reader.poll()  # no file yet
    with open(path, "w") as handle:
        handle.write(json.dumps({"type": "kernel", "pid": 1}) + "\n")
        handle.write(json.dumps({"type": "start", "seq": 1, "hash": "h1"}) + "\n")
        handle.write('{"type": "cell", "seq": 1, "ha')  # a line still being written
        handle.flush()
        reader.poll()
        assert reader.kernel == {"type": "kernel", "pid": 1}
        assert 1 in reader.started and reader.cells == {}
        handle.write('sh": "h1", "wall_s": 0.5}\n')
        handle.write(json.dumps({"type": "cell", "seq": 2, "hash": "h1", "wall_s": 0.25}) + "\n")
    first = reader.take("h1")
    assert first is not None and first.seq == 2  # the latest run of that source
    second = reader.take("h1")
    assert second is not None and second.seq == 1
    assert reader.take("h1") is None


@pytest.mark.slow
def test_a_cells_peak_is_the_kernels_own_not_what_started_it() -> None:
    """A cell's peak is the kernel's own VmHWM since the cell started. Linux keeps ``ru_maxrss`` across execve, so
    read from there a kernel started by a process holding 700 MB said every cell peaked at 700 MB or more (the
    forecast benchmark's per-cell growth then swung by hundreds of MB from run to run)."""
    held = b"\x01" * (700 * 2**20)  # resident in this process, which starts the kernel
    record = profile(FILES / "gate_tiny.ipynb", ProfileOptions(), fingerprint={"digest": "test"})
    cells = record.measurements["cells"]
    assert cells and all(c["status"] == "ok" for c in cells)
    for cell in cells:
        assert cell["rss"]["peak_is_per_cell"] is True
        assert cell["rss"]["before_bytes"] <= cell["rss"]["peak_bytes"] < 400 * 2**20, cell["rss"]
    assert len(held) == 700 * 2**20


def test_the_kernel_line_names_jax_backend_once_it_is_started(tmp_path: Path) -> None:
    jax = pytest.importorskip("jax")
    jax.numpy.zeros(1).block_until_ready()  # JAX's CPU backend started, as a notebook's first JAX cell does
    out = tmp_path / "probe.jsonl"
    probe = probe_module.Probe(FakeShell({}), str(out))
    run_cell(probe, "a = 1", lambda: None)
    probe.out.close()
    kernels = [json.loads(line) for line in out.read_text().splitlines() if '"kernel"' in line]
    assert "jax_backend" not in kernels[0] and kernels[-1]["jax_backend"]["platform"] == "cpu"
    assert kernels[-1]["jax_backend"]["devices"] >= 1 and kernels[-1]["pid"] == kernels[0]["pid"]
