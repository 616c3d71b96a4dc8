#!/usr/bin/env python3
"""Count the lines of src/ where mypy types an expression `Any`, outside the JSON boundary, against a ceiling that
may only fall (the ratchet in `.ci/any-lines.txt`).

A line counts once, however many of its expressions are `Any` (`mypy --disallow-any-expr`). The schema (the codec
and the migrations, which read JSON documents by design) and the in-kernel probe (plain JSON, nothing of the model)
are the boundary and are not counted. Over the ceiling fails (exit 1), printing the count per file; under it, lower
the ceiling (`python3 .ci/any_lines.py --update`). `--files` prints the count per file without judging.
"""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CEILING = ROOT / ".ci" / "any-lines.txt"
BOUNDARY = ("src/nbscope/schema/", "src/nbscope/collect/probe/")


def untyped_lines(report: str) -> set[tuple[str, str]]:
    """Each (file, line) of a `mypy --disallow-any-expr` report with an error that names `Any`, outside the boundary."""
    found = (line.split(":", 3) for line in report.splitlines())
    return {(parts[0], parts[1]) for parts in found
            if len(parts) == 4 and parts[2].strip() == "error" and "Any" in parts[3]
            and not parts[0].startswith(BOUNDARY)}


def main() -> int:
    # A cache of its own: the strict run of mypy_baseline.py (without --disallow-any-expr) keeps its cache warm.
    run = subprocess.run([sys.executable, "-m", "mypy", "--disallow-any-expr", "--no-color-output",
                          "--no-error-summary", "--cache-dir", ".mypy_cache/any-expr"],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    if run.returncode not in (0, 1):
        sys.exit(f"mypy did not run: {(run.stderr or run.stdout).strip()[-2000:]}")
    lines = untyped_lines(run.stdout)
    per_file = collections.Counter(path for path, _ in lines)
    if "--update" in sys.argv[1:]:
        CEILING.write_text(f"{len(lines)}\n")
        print(f"Any lines: ceiling lowered to {len(lines)} in {CEILING.relative_to(ROOT)}")
        return 0
    ceiling = int(CEILING.read_text().strip())
    if "--files" in sys.argv[1:] or len(lines) > ceiling:
        for path, count in sorted(per_file.items(), key=lambda item: (-item[1], item[0])):
            print(f"{count:5d} {path}")
    if len(lines) > ceiling:
        print(f"{len(lines)} lines with an expression typed Any outside {', '.join(BOUNDARY)}: over the ceiling "
              f"of {ceiling} ({CEILING.relative_to(ROOT)}); type what was added (decode JSON into the model once)")
        return 1
    print(f"Any lines: {len(lines)} (ceiling {ceiling}, {CEILING.relative_to(ROOT)}"
          + ("; lower it with --update)" if len(lines) < ceiling else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
