"""One benchmark group in a fresh process: ``python -m nbscope.collect.bench._worker GROUP --out FILE ...``.

Writes one JSON document to ``--out``: status (``ok``, ``skipped``, ``error``), the reason, the figures,
facts about the group's environment, import times and the process's peak RSS. A missing library is a
skip, not an error: the import is really attempted here, in the environment the group runs in.
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import sys
import time
import traceback

from nbscope.collect.bench._config import GROUPS


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nbscope.collect.bench._worker")
    parser.add_argument("group", choices=list(GROUPS))
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--size", default="quick", choices=["quick", "default", "seed"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--param", action="append", default=[], metavar="GROUP.NAME=JSON")
    return parser.parse_args(argv)


def run_group(group: str, dtype: str, size: str, overrides: dict[str, object] | None = None) -> dict[str, object]:
    """Run one group in this process and return its result document."""
    from nbscope.collect.bench._context import BenchContext

    started = time.perf_counter()
    spec = GROUPS[group]
    result: dict[str, object] = {"group": group, "dtype": dtype, "size": size, "status": "ok", "reason": None}
    ctx = BenchContext(group, dtype, size, overrides)
    imports: dict[str, float] = {}
    try:
        for module in spec.requires:
            start = time.perf_counter()
            try:
                importlib.import_module(module)
            except ImportError as exc:
                result["status"] = "skipped"
                result["reason"] = f"{module} is not importable ({exc})"
                break
            imports[module] = time.perf_counter() - start
        if result["status"] == "ok":
            importlib.import_module(f"nbscope.collect.bench.{spec.module}").run(ctx)
            ctx.flush()
    except Exception as exc:  # the group failed; report it, keep what was measured
        result["status"] = "error"
        result["reason"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        result["traceback"] = traceback.format_exc(limit=8)
    result["figures"] = ctx.figures
    result["info"] = ctx.info
    result["notes"] = ctx.notes
    result["reference_s"] = [float(f"{v:.6g}") for v in ctx.reference_s]
    result["import_s"] = imports
    result["worker_s"] = time.perf_counter() - started
    result["self_peak_rss_bytes"] = result["peak_rss_bytes"] = _own_peak_bytes()
    return result


def _own_peak_bytes() -> int:
    """This process's own peak resident memory: VmHWM. ru_maxrss is kept across execve, so it reads at least what
    the process that started this one held when it did (nbscope's own memory, not the benchmark's)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux; no /proc: the lifetime peak


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    overrides = {}
    for item in args.param:
        key, _, value = item.partition("=")
        overrides[key] = json.loads(value)
    result = run_group(args.group, args.dtype, args.size, overrides)
    with open(args.out, "w") as handle:
        json.dump(result, handle, default=_default)
    return 0


def _default(value: object) -> object:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


if __name__ == "__main__":
    raise SystemExit(main())
