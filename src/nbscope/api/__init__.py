"""Stage 5, api: the jobs behind the commands (profile, trace, pathways, audit, bench, loops, backends): each runs
collect, then record (then analyse) and returns data; ``public.py`` holds what ``import nbscope`` offers.

:class:`NbscopeError` is named here too: it is what every job raises for bad input (one line, exit 2), and the
command line, which reaches the library only through this package, raises it for a bad option."""

from nbscope._errors import NbscopeError

__all__ = ["NbscopeError"]
