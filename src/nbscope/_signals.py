"""Stopping on a signal without losing what was measured.

The command line turns SIGINT (Ctrl-C), SIGTERM (what CI runners and ``timeout`` send) and SIGHUP (a
closed terminal) into one exception, :class:`Interrupted`. It is a ``KeyboardInterrupt``, so every
place that saves a partial run on Ctrl-C does the same for the other two; nbscope then exits with
128 + the signal's number (130, 143, 129), as a shell reports a process the signal ended.

While nbscope winds down (stopping kernels, saving the partial run) a second signal is noted and
does not cut that short; a third one does. A signal ignored when nbscope started (``nohup``, a
background job) stays ignored.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Signals after the first that are noted but not raised, so that the partial run gets saved.
WIND_DOWN_SIGNALS = 1

_received: list[int] = []
_saved: list[str] = []
_steps: list[int] = []  # the open steps (:func:`one_step`): a signal inside one is raised as it ends


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def received() -> int | None:
    """The first stop signal this process received while :func:`handled` was active, if any."""
    return _received[0] if _received else None


def exit_code(default: int = signal.SIGINT) -> int:
    """128 + the first signal received (``default`` when the stop came as a plain KeyboardInterrupt)."""
    return 128 + (received() or default)


def note_saved(text: str) -> None:
    """Remember what was saved while stopping (e.g. ``partial run 12``), for the closing message."""
    _saved.append(text)


def saved() -> list[str]:
    return list(_saved)


def forget() -> None:
    """Forget the signals received and what was saved (a command ended: the next one starts afresh)."""
    _received.clear()
    _saved.clear()


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # after SIGHUP the terminal may be gone
        print(text, file=sys.stderr, flush=True)


def _handle(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    if _steps and len(_received) == 1:
        return
    if 1 < len(_received) <= 1 + WIND_DOWN_SIGNALS:
        _say(
            f"nbscope: {signal_name(signum)} again: still stopping kernels and saving what was measured; "
            "send it once more to quit at once"
        )
        return
    # The stop is reported in one line: nbclient's request for a running cell ends with its kernel's death, and
    # asyncio would print that task's traceback when it is collected.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    raise Interrupted(signum)


@contextmanager
def one_step() -> Iterator[None]:
    """A block a first stop signal does not cut: it is raised as the block ends (a run stored and its line
    printed, never the one without the other)."""
    _steps.append(len(_received))
    try:
        yield
    finally:
        before = _steps.pop()
    if len(_received) > before and not _steps:
        raise Interrupted(_received[before])


@contextmanager
def handled() -> Iterator[None]:
    """Turn the stop signals into :class:`Interrupted` inside the block; the old handlers come back after.

    Only the command line installs this: a library caller keeps its own signal handling.
    """
    forget()
    previous: dict[int, object] = {}
    for signum in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):  # not the main thread, or a platform without the signal
            current = signal.getsignal(signum)
            if current is signal.SIG_IGN:
                continue
            signal.signal(signum, _handle)
            previous[signum] = current
    try:
        yield
    finally:
        for number, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(number, handler)  # type: ignore[arg-type]
