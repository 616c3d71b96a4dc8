"""The kernel pathway: exactly ``nbscope profile`` (nbclient driving a fresh IPython kernel)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope.api.pathways._common import PathwayOptions, PathwayResult, one_line, reap


def run_kernel(path: Path, options: PathwayOptions, *, fingerprint: dict[str, Any], live_path: Path) -> PathwayResult:
    from nbscope.api.profile import RunSpec, profile_until_stopped

    try:
        record, interrupted = profile_until_stopped(
            path,
            RunSpec(timeout=options.timeout, kernel=options.kernel, env=options.process_env(), label=options.label),
            fingerprint=fingerprint,
            live_path=live_path,
        )
    except NbscopeError as exc:  # e.g. the kernel could not start: the other pathways still count
        return PathwayResult("kernel", "error", runner={"pathway": "kernel"}, error=one_line(str(exc)))
    finally:
        reap(options.token)
    m = record.measurements
    runner = dict(m.get("runner") or {})
    header = m.get("kernel") or {}
    runner["kernel"] = {key: header.get(key) for key in ("pid", "cwd", "executable", "started_unix")}
    result_totals = dict(m.get("totals") or {})
    return PathwayResult(
        "kernel",
        record.status,
        cells=list(m.get("cells") or []),
        totals=result_totals,
        runner=runner,
        overheads={"kernel_start_s": runner.get("kernel_start_s"), "shutdown_s": runner.get("shutdown_s")},
        interrupted=interrupted,
    )
