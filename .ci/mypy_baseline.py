#!/usr/bin/env python3
"""Type-check src/ with mypy in strict mode (pyproject.toml's [tool.mypy]) against a baseline of known errors
that may only shrink.

An error that is not in `.ci/mypy-baseline.txt` fails (exit 1). So does a baseline entry mypy no longer
reports: the fix is kept by shrinking the file (`python3 .ci/mypy_baseline.py --update`), never by growing it.
Entries leave out line numbers, so that an edit above a known error does not move it.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / ".ci" / "mypy-baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:]+):\d+: error: (?P<message>.*)$")


def current_errors() -> collections.Counter[str]:
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-color-output", "--no-error-summary"],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    if run.returncode not in (0, 1) or "error:" not in run.stdout and run.returncode == 1:
        sys.exit(f"mypy did not run: {(run.stderr or run.stdout).strip()[-2000:]}")
    return collections.Counter(f"{m['path']}: {m['message']}" for line in run.stdout.splitlines()
                               if (m := ERROR.match(line)))


def main() -> int:
    errors = current_errors()
    if "--update" in sys.argv[1:]:
        BASELINE.write_text("".join(f"{entry}\n" for entry in sorted(errors.elements())))
        print(f"mypy baseline: {sum(errors.values())} known errors written to {BASELINE.relative_to(ROOT)}")
        return 0
    known = collections.Counter(line for line in BASELINE.read_text().splitlines() if line.strip())
    new, fixed = errors - known, known - errors
    for entry in sorted(new.elements()):
        print(f"new mypy error: {entry}")
    if fixed:
        print(f"{sum(fixed.values())} baseline errors are fixed: shrink the baseline with `python3 .ci/mypy_baseline.py --update`")
    if new or fixed:
        return 1
    print(f"mypy: no new errors ({sum(errors.values())} known, in {BASELINE.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
