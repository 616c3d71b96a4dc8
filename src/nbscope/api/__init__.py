"""Stage 5, api: the jobs behind the commands (profile, trace, pathways, audit, bench, loops, backends): each runs
collect, then record (then analyse) and returns data; ``public.py`` holds what ``import nbscope`` offers.

:class:`NbscopeError` is named here too: it is what every job raises for bad input (one line, exit 2), and the
command line, which reaches the library only through this package, raises it for a bad option, and reads a number
given it with ``whole`` and ``decimal``."""

from nbscope._errors import NbscopeError
from nbscope._units import decimal, whole  # the one reader of a number a user writes (an option's, a variable's)

__all__ = ["NbscopeError", "decimal", "whole"]
