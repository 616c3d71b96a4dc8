"""The Python API behind the CLI. Each function here is what one command does."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nbscope._errors import NbscopeError
from nbscope.collect import fingerprint as _fp
from nbscope.schema.fingerprint_file import fingerprint_in


def collect_fingerprint(*, include_jax: bool = False) -> dict[str, object]:
    """This machine's fingerprint (see :mod:`nbscope.collect.fingerprint`)."""
    return _fp.collect(include_jax=include_jax)


def load_fingerprint(path: str | Path) -> dict[str, object]:
    """A fingerprint from a file: ``nbscope info --json`` output or a whole run record."""
    from nbscope._files import read_json

    path = Path(path)
    document = read_json(path, what="JSON fingerprint")
    found = fingerprint_in(document)
    if found is None:
        raise NbscopeError(f"{path} is neither a fingerprint nor a run record")
    return found


def diff_fingerprints(
    a: str | Path, b: str | Path, *, include_volatile: bool = False
) -> list[tuple[str, object, object]]:
    return _fp.diff(load_fingerprint(a), load_fingerprint(b), include_volatile=include_volatile)


@dataclass(frozen=True)
class InfoOutcome:
    """What ``nbscope info`` found: this machine's fingerprint, or the fields two fingerprints differ in
    (``field``, value in A, value in B)."""

    fingerprint: dict[str, object] | None = None
    differences: tuple[tuple[str, object, object], ...] | None = None

    @property
    def exit_status(self) -> int:
        """As ``diff``: 1 when two fingerprints differ, else 0."""
        return 1 if self.differences else 0


def info(
    *, include_jax: bool = False, diff: tuple[Path, Path] | None = None, include_volatile: bool = False
) -> InfoOutcome:
    """``nbscope info``: the fingerprint of this machine, or (``diff``) where two fingerprints differ."""
    if diff is not None:
        return InfoOutcome(differences=tuple(diff_fingerprints(diff[0], diff[1], include_volatile=include_volatile)))
    return InfoOutcome(fingerprint=collect_fingerprint(include_jax=include_jax))
