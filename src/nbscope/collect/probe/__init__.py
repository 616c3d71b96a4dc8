"""The in-kernel probe (``_nbscope_probe.py``, standard library only) and where to find it."""

from pathlib import Path

PROBE_MODULE = "_nbscope_probe"
PROBE_FILE = Path(__file__).with_name(f"{PROBE_MODULE}.py")
