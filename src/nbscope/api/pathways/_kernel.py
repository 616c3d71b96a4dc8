"""The kernel pathway: exactly ``nbscope profile`` (nbclient driving a fresh IPython kernel)."""

from __future__ import annotations

from pathlib import Path

from nbscope._errors import NbscopeError
from nbscope.api.pathways._common import PathwayOptions, PathwayResult, kernel_described, one_line, reap
from nbscope.record.run import object_in, objects_in


def run_kernel(
    path: Path, options: PathwayOptions, *, fingerprint: dict[str, object], live_path: Path
) -> PathwayResult:
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
    m = record.measurements  # a profile's, which always holds its runner, totals and cells
    runner = dict(object_in(m, "runner"))
    run = record.notebook_run()
    runner["kernel"] = kernel_described(run)
    return PathwayResult(
        "kernel",
        record.status,
        cells=objects_in(m, "cells"),
        totals=dict(object_in(m, "totals")),
        runner=runner,
        overheads={"kernel_start_s": run.runner.kernel_start_s, "shutdown_s": run.runner.shutdown_s},
        interrupted=interrupted,
    )
