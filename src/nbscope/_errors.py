"""The one exception type that reaches users as a one-line message."""


class NbscopeError(Exception):
    """A problem with the user's input or environment; the CLI prints it on one line and exits 2."""

    exit_code = 2
