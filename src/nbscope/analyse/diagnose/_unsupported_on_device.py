"""Unsupported on the device: a cell that raised on an accelerator because XLA there does not implement an operation
for its dtype (a float64 LU decomposition, ``eig``, a complex128 FFT on a TPU), named from the error it raised, with
the functions the cell compiled, to keep on the CPU (``nbscope try --remedy cpu:FUNCTION`` measures that)."""

from __future__ import annotations

from collections.abc import Iterator

from nbscope._redact import shorten
from nbscope.analyse.diagnose._base import Context, Finding, Outcome, Rule, seconds

NAME = "unsupported-on-device"


def evaluate(ctx: Context) -> Iterator[Outcome]:
    platform = ctx.backend.platform
    if platform in (None, "cpu"):
        return
    from nbscope.analyse.forecast.accelerator import failure_in  # the forecast's table of what a TPU cannot run

    device = platform.upper()
    for cell in ctx.run.cells:
        message = cell.error.message if cell.error is not None else None
        failure = failure_in(message) if message else None
        if failure is None:
            continue
        functions = [f.name for f in cell.jax.of_kind("user")] if cell.jax else []
        first = functions[0] if functions else None
        where = f" in `{first}`" if first else ""
        keep = f"keep `{first}` on the CPU" if first else "run this cell's JAX code on the CPU"
        remedy = f"cpu:{first}" if first else "cpu"
        wall = cell.notebook_wall_s or cell.wall_s or 0.0
        yield Finding(
            rule=NAME,
            title=f"Fails on the {device}: {failure.operation.split(' (')[0]}",
            cell_index=cell.index,
            severity="high",  # the cell raises: its results are missing, whatever its time
            confidence=0.95,
            evidence={
                "platform": platform,
                "operation": failure.operation,
                "error": shorten(message, 300) if message else None,
                "functions": functions,
                "wall_s": round(wall, 4),
                "seconds_at_stake": round(wall, 4),
            },
            summary=f"raised on the {device} after {seconds(wall)}: {failure.operation}{where} ({failure.reason})",
            highlights=[("error", shorten(message or "", 160)), ("known from", failure.source)],
            action=keep,
            fix=(
                f"XLA on the {device} does not implement this operation for this dtype. Run "
                + (f"the calls of `{first}`" if first else "the cell's JAX code")
                + ' inside `with jax.default_device(jax.devices("cpu")[0]):` (its arguments move with '
                '`jax.device_put(x, jax.devices("cpu")[0])`), or use float32 where that precision is enough; '
                f"`nbscope try RUN --cell {cell.index + 1} --remedy {remedy}` runs the notebook both ways on this "
                "machine and compares."
            ),
        )


RULE = Rule(NAME, evaluate)
