"""The jobs behind the commands (profile, trace, pathways, audit, bench, loops, backends): each runs
collect, then record (then analyse) and returns data; ``public.py`` holds what ``import nbscope`` offers."""
