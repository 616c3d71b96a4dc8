"""``nbscope runs``: what it lists, in one of three modes (the kernels running now, the store's unfinished runs, or
its stored runs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nbscope._errors import NbscopeError
from nbscope.api.live import RunningKernel, running_kernels
from nbscope.api.runs import db_option, open_store, unfinished

if TYPE_CHECKING:
    from nbscope.record.live import UnfinishedRun


@dataclass(frozen=True)
class RunList:
    """What ``nbscope runs`` found, in one of its three modes: the kernels running now (``--live``), the store's
    unfinished runs (``--unfinished``), or its stored runs (newest first) with the count of unfinished ones
    waiting to be imported. ``db_hint`` is the `` --db PATH`` a hint's command needs."""

    live: tuple[RunningKernel, ...] | None = None
    unfinished: tuple[UnfinishedRun, ...] | None = None
    rows: tuple[dict[str, object], ...] = ()
    filtered: bool = False  # a --kind, --target or --label chose the rows
    waiting: int = 0
    db_hint: str = ""


def list_runs(
    db: Path | None,
    *,
    kind: str | None = None,
    target: str | None = None,
    label: str | None = None,
    limit: int | None = 50,
    unfinished_only: bool = False,
    live: bool = False,
    on_skip: Callable[[str], None] | None = None,
) -> RunList:
    """``nbscope runs``: with ``live`` the kernels that profiles, audits and traced builds of this user run now
    (any store); else the store at ``db`` (never created): its unfinished runs, or its runs of this ``kind``,
    ``target`` (a path, or a name as listed) and ``label``, at most ``limit``. A missing store is an error that
    says how many unfinished runs of it wait."""
    if live:
        return RunList(live=tuple(running_kernels()))
    store = open_store(db, read_only=True, on_skip=on_skip)
    if unfinished_only:
        return RunList(unfinished=tuple(unfinished(store)), db_hint=db_option(store))
    waiting = sum(item.state == "unfinished" for item in unfinished(store))
    if not store.path.exists():
        hint = (
            f"; {waiting} unfinished run(s) of it: see nbscope runs --unfinished{db_option(store)}" if waiting else ""
        )
        raise NbscopeError(f"{store.missing()}{hint}")
    rows = store.runs(kind=kind, target=store.names_of(target) if target else None, label=label, limit=limit)
    return RunList(rows=tuple(rows), filtered=bool(kind or target or label), waiting=waiting, db_hint=db_option(store))
