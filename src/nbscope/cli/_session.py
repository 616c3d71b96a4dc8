"""One command's session: the console it prints to and the stop signals it turns into a saved, partial run,
set up when the command starts and put back as they were when it ends (so a command run twice in one process,
as the tests do, starts as a new process would).

The one CLI module below the API: signal handling is the process's state for the length of a command, which the
session installs, reads (what arrived, what the jobs saved meanwhile) and forgets; the jobs only note into it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from nbscope import _signals

if TYPE_CHECKING:
    from nbscope.render.terminal import SafeConsole


@contextmanager
def command_session(*, console: bool = True) -> Iterator[None]:
    """The console made afresh from this moment's streams and terminal size (``COLUMNS``), no escape sequence
    from a record or a notebook reaching the terminal, the stop signals handled (:func:`nbscope._signals.handled`)
    and what they noted forgotten afterwards; the inputs the command reads are its own. ``console=False``: for a
    command that prints without the console (rich is then not imported)."""
    from nbscope.api.files import forget_inputs
    from nbscope.render._clean import clean_streams, restore_streams

    shown = _console() if console else None
    saved_console: dict[str, object] = dict(shown.__dict__) if shown is not None else {}
    forget_inputs()
    before = clean_streams()
    if shown is not None:
        type(shown).__init__(shown, highlight=False)  # as render/terminal.py makes it at import
    try:
        with _signals.handled():
            yield
    finally:
        restore_streams(before)
        if shown is not None:
            shown.__dict__.clear()
            shown.__dict__.update(saved_console)
        _signals.forget()


def _console() -> SafeConsole:
    from nbscope.render.terminal import console

    return console


def stopped_by_signal() -> bool:
    """Whether a stop signal (SIGINT, SIGTERM, SIGHUP) arrived during this command."""
    return _signals.received() is not None


def stop_exit_code() -> int:
    """128 + the stop signal that arrived (130 for a plain KeyboardInterrupt), as a shell reports it."""
    return _signals.exit_code()


def stop_message() -> str:
    """The closing line of a stopped command: what stopped it and what was saved meanwhile."""
    signum = _signals.received()
    why = f"stopped by {_signals.signal_name(signum)}" if signum else "interrupted"
    saved = _signals.saved()
    tail = f"; saved {', '.join(saved)}" if saved else ""
    return f"nbscope: {why}{tail}"
