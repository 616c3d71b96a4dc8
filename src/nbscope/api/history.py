"""``nbscope history``: a notebook's (or benchmark suite's) figures over time, with change points."""

from __future__ import annotations

from nbscope._errors import NbscopeError
from nbscope.analyse.history import ChangeOptions, History
from nbscope.analyse.history import history as build_history
from nbscope.record.store import Store


def history(
    store: Store,
    target: str,
    *,
    metric: str = "wall_s",
    cell: str | None = None,
    kind: str | None = None,
    digest: str | None = None,
    limit: int | None = None,
    min_size: int = 2,
    threshold: float = 4.0,
    rel_floor: float = 0.10,
) -> History:
    """The series of ``target``'s runs (by any name the store knows it under), each with its change points:
    shifts of ``threshold`` noise units or more, of at least ``rel_floor`` of the level, with ``min_size`` runs
    on each side."""
    if min_size < 1:
        raise NbscopeError("--min-size must be at least 1")
    if kind == "trial":
        raise NbscopeError("trial runs make no history: `nbscope show RUN` lists them with the run they try")
    options = ChangeOptions(min_size=min_size, k=threshold, rel_floor=rel_floor)
    return build_history(
        store,
        target,
        metric=metric,
        cell=cell,
        kind=kind,
        digest=digest,
        limit=limit,
        options=options,
        aliases=store.names_of(target),
    )
