"""The one exception type that reaches users as a one-line message."""


class NbscopeError(Exception):
    """A problem with the user's input or environment; the CLI prints it on one line and exits 2."""

    exit_code = 2


def describe(exc: BaseException) -> str:
    """An exception on one line: its type and the last line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"
