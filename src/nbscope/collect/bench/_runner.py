"""Runs each group in a fresh subprocess and collects its JSON, exit status and peak RSS.

A fresh process per group (and per dtype) keeps cold costs honest: imports, backend start-up and
first compiles are paid again, as a notebook pays them. Groups run one after another so they do not
compete for cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from nbscope.collect.bench._config import GROUPS


def worker_command(group: str, dtype: str, size: str, out: Path, overrides: dict[str, Any] | None) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "nbscope.collect.bench._worker",
        group,
        "--dtype",
        dtype,
        "--size",
        size,
        "--out",
        str(out),
    ]
    for key, value in (overrides or {}).items():
        command += ["--param", f"{key}={json.dumps(value)}"]
    return command


def worker_env(group: str, jax_platform: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if GROUPS[group].uses_jax and jax_platform:
        env["JAX_PLATFORMS"] = jax_platform
    # Python buffers would hold back the last stderr line we quote when a worker dies.
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_worker(
    group: str,
    dtype: str,
    size: str,
    *,
    timeout_s: float,
    jax_platform: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one group in a child process; always returns a result document (status ok/skipped/error)."""
    with tempfile.TemporaryDirectory(prefix="nbscope-bench-") as tmp:
        out = Path(tmp) / "result.json"
        log = Path(tmp) / "stderr.txt"
        started = time.perf_counter()
        busy_before = cpu_busy_s()
        with open(log, "wb") as stderr:
            process = subprocess.Popen(
                worker_command(group, dtype, size, out, overrides),
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                env=worker_env(group, jax_platform),
                # Its own process group: a timeout or a stop signal ends it with anything it started, and a
                # terminal's Ctrl-C reaches nbscope alone, which then stops it.
                start_new_session=True,
            )
            timed_out = threading.Event()

            def kill() -> None:
                timed_out.set()
                _kill_group(process)

            timer = threading.Timer(timeout_s, kill)
            timer.start()
            try:
                # wait4 gives this child's own resource usage (RUSAGE_CHILDREN would mix all children); a signal
                # does not interrupt it (PEP 475: it is retried).
                _, status, usage = os.wait4(process.pid, 0)
            except BaseException:
                _kill_group(process)
                process.wait()
                raise
            finally:
                timer.cancel()
            process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        busy_after = cpu_busy_s()
        result = _read_result(out)
        if result is None:
            result = {
                "group": group,
                "dtype": dtype,
                "size": size,
                "status": "error",
                "reason": _failure_reason(process.returncode, timed_out.is_set(), timeout_s, log),
                "figures": [],
                "info": {},
                "notes": [],
                "import_s": {},
            }
        result["exit_code"] = process.returncode
        result["wall_s"] = wall
        # The worker's own VmHWM where it said (its result's peak_rss_bytes); else wait4's ru_maxrss (KiB on Linux),
        # which keeps, across the worker's execve, what this process held when it started it.
        result.setdefault("peak_rss_bytes", usage.ru_maxrss * 1024)
        result["cpu_s"] = usage.ru_utime + usage.ru_stime
        if busy_before is not None and busy_after is not None and wall > 0:
            # CPU time the whole machine spent that this worker did not: other processes (and a VM's
            # steal time) competing with the benchmark. Averaged over the run, in cores.
            result["background_cores"] = max(busy_after - busy_before - result["cpu_s"], 0.0) / wall
        return result


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:  # the group is empty: the worker is gone already
        pass


def cpu_busy_s() -> float | None:
    """Seconds of CPU time spent by all processes since boot (Linux /proc/stat), or None."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _failure_reason(code: int, timed_out: bool, timeout_s: float, log: Path) -> str:
    if timed_out:
        return f"timed out after {timeout_s:.0f} s"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"worker killed by {name}{hint}"
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    last = lines[-1].strip() if lines else "no output"
    return f"worker exited with code {code}: {last}"
