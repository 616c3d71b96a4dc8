"""``nbscope audit`` and ``nbscope merge``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nbscope.api.files import write_text
from nbscope.cli import app
from nbscope.cli._options import DbOption, JsonOption, LabelOption, MarkdownOption, TimeoutOption, open_store, warn

if TYPE_CHECKING:
    from nbscope.api.audit import AuditOutcome

HtmlOption = Annotated[Path | None, typer.Option("--html", help="Also write a self-contained HTML report here.")]
OutputOption = Annotated[
    Path | None, typer.Option("-o", "--output", help="Write the audit, with its runs, to this JSON file (for merge).")
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines on stderr.")]


def _emit(
    outcome: AuditOutcome, *, as_json: bool, markdown: bool, html_path: Path | None, diagnosis: bool = True
) -> None:
    from nbscope.api.runs import db_option
    from nbscope.render.audit import audit_html, emit_audit

    if html_path is not None:
        write_text(html_path, audit_html(outcome.record, outcome.audit), option="--html")
    db = db_option(outcome.store)
    emit_audit(
        outcome.record,
        outcome.audit,
        as_json=as_json,
        markdown=markdown,
        store_path=outcome.store.path,
        written=(outcome.output, html_path),
        diagnose_command=(lambda run_id: f"nbscope diagnose {run_id}{db}") if diagnosis else None,
    )


@app.command()
def audit(
    targets: Annotated[
        list[str],
        typer.Argument(help="Book folder (with _toc.yml or myst.yml), a _toc.yml / myst.yml, notebooks, or a glob."),
    ],
    backends: Annotated[
        str, typer.Option("--backends", help="Comma-separated backends: cpu, cuda (gpu), rocm, tpu.")
    ] = "cpu",
    workers: Annotated[
        int, typer.Option("--workers", "-j", help="CPU-backend notebooks at once (parallel runs share cores).")
    ] = 1,
    force: Annotated[
        bool, typer.Option("--force", help="Profile again notebooks already profiled unchanged here.")
    ] = False,
    shard: Annotated[
        str | None, typer.Option("--shard", help="Only shard i of n (e.g. 2/4); join with nbscope merge.")
    ] = None,
    dask: Annotated[
        str | None, typer.Option("--dask", help="Dask scheduler address (tcp://host:8786), or local[:N].")
    ] = None,
    share_gpu: Annotated[
        bool, typer.Option("--share-gpu", help="Let notebooks share a GPU, each capped to its memory share.")
    ] = False,
    jobs_per_gpu: Annotated[
        int, typer.Option("--jobs-per-gpu", help="With --share-gpu: notebooks per GPU at once.")
    ] = 2,
    timeout: TimeoutOption = None,
    forecast: Annotated[
        str | None,
        typer.Option(
            "--forecast",
            metavar="GPU[,GPU...]",
            help="Record program data in the CPU runs and forecast each lecture on these GPUs: the GPU "
            "blast radius of a CPU-only fleet (see `nbscope forecast --help`).",
        ),
    ] = None,
    output: OutputOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    html_path: HtmlOption = None,
    quiet: QuietOption = False,
    no_diagnose: Annotated[
        bool, typer.Option("--no-diagnose", help="Do not list each notebook's top findings.")
    ] = False,
    db: DbOption = None,
    label: LabelOption = None,
) -> None:
    """Profile every notebook of a book on each backend: per lecture CPU vs GPU, the winner and the top cause; then
    each notebook's top findings with their fixes.

    Resumable: a notebook already profiled with the same file, backend and environment is reused. With
    --forecast t4, no GPU is needed: each lecture's CPU run is forecast on the T4 (time range, verdict,
    dominant term), sorted by forecast slowdown, and the GPU rules of diagnose fire as forecast risks.
    """
    from nbscope.api.audit import AuditOptions, parse_backends, run_audit
    from nbscope.render.audit import audit_progress

    options = AuditOptions(
        backends=parse_backends(backends),
        workers=workers,
        force=force,
        shard=shard,
        dask=dask,
        share_gpu=share_gpu,
        jobs_per_gpu=jobs_per_gpu,
        timeout=timeout,
        forecast=[g.strip() for g in forecast.split(",") if g.strip()] if forecast else [],
    )
    options.validate()  # before the store is opened: a bad option creates nothing
    outcome = run_audit(
        targets, options, open_store(db), output=output, html=html_path, label=label, on_event=audit_progress(quiet)
    )
    _emit(outcome, as_json=as_json, markdown=markdown, html_path=html_path, diagnosis=not no_diagnose)


@app.command()
def merge(
    files: Annotated[list[Path], typer.Argument(help="Audit JSON files written by nbscope audit -o.")],
    output: OutputOption = None,
    as_json: JsonOption = False,
    markdown: MarkdownOption = False,
    html_path: HtmlOption = None,
    db: DbOption = None,
) -> None:
    """Join audit files (CI shards, or CPU and GPU runners' audits) into one audit; their runs are imported."""
    from nbscope.api.audit import run_merge

    outcome = run_merge(files, open_store(db), output=output, html=html_path)
    _emit(outcome, as_json=as_json, markdown=markdown, html_path=html_path)
    if outcome.missing and not as_json:
        warn(f"{len(outcome.missing)} notebook(s) of the book are in none of the files")
