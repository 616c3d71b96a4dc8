"""Where a notebook's JAX calls run, read from its code: calls it pins to the CPU stay there on a GPU.

A GPU machine runs a jitted call on the GPU unless the notebook says otherwise. These forms put a call
on the CPU, and the forecast then keeps it as measured ("pinned to the CPU at line N"):

* a function jitted with a CPU ``device=`` or ``backend="cpu"`` (``jax.jit(f, device=cpu)``,
  ``@partial(jax.jit, backend="cpu")``): every call of it;
* calls inside ``with jax.default_device(cpu):`` (or after ``jax.config.update("jax_default_device",
  cpu)``): the functions called in the block, else every call of the cell;
* arrays committed to the CPU (``x = jax.device_put(a, cpu)``): the calls that take them, in that cell
  and later ones;
* ``jax.config.update("jax_platform_name" | "jax_platforms", "cpu")``, ``os.environ["JAX_PLATFORMS"] =
  "cpu"`` or ``%env JAX_PLATFORMS=cpu``: every call from that cell on.

A CPU device is an expression naming ``"cpu"`` (``jax.devices("cpu")[0]``, ``jax.local_devices(backend=
"cpu")``, ``jax.devices(backend="cpu")``) or a name assigned one. The code is read as text, line by
line: a pin made in a way these forms do not cover (a device chosen at run time) is not seen.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from nbscope._redact import shorten
from nbscope.schema.codec import Write

_CPU_LITERAL = re.compile(r"""(?:devices|local_devices)\s*\(\s*(?:backend\s*=\s*)?["']cpu["']""")
_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:,\s*)?(?:\)\s*)?=\s*(.+)$")
_TUPLE_ASSIGN = re.compile(r"^\s*\(?\s*([A-Za-z_]\w*)\s*,\s*\)?\s*=\s*(.+)$")
_JIT = re.compile(r"\bjit\b\s*[(,)]")
_DEF = re.compile(r"^\s*def\s+([A-Za-z_]\w*)\s*\(")
_WITH = re.compile(r"^(\s*)with\s+.*\bdefault_device\s*\((.*)\)\s*(?:as\s+\w+\s*)?:\s*$")
_PLATFORM = re.compile(
    r"""config\.update\(\s*["'](?:jax_platform_name|jax_platforms)["']\s*,\s*["']cpu["']"""
    r"""|environ\s*\[\s*["']JAX_PLATFORMS["']\s*\]\s*=\s*["']cpu["']"""
    r"""|environ\.setdefault\(\s*["']JAX_PLATFORMS["']\s*,\s*["']cpu["']"""
    r"""|^\s*%env\s+JAX_PLATFORMS\s*=?\s*cpu\b"""
)
_DEFAULT_DEVICE = re.compile(r"""config\.update\(\s*["']jax_default_device["']\s*,\s*(.+)\)""")
_DEVICE_PUT = re.compile(r"\bdevice_put\s*\((.*)\)")
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


@dataclass
class Pin:
    """One reason calls run on the CPU: what the notebook wrote, and where."""

    how: str  # "jit device", "default_device", "committed array", "platform"
    cell: int
    row: int  # 1-based line within the cell
    text: str

    def where(self, cell_lines: dict[int, int | None]) -> str:
        first = cell_lines.get(self.cell)  # a MyST cell's fence line: its code starts on the next
        if first:
            return f"line {first + self.row}"
        return f"cell {self.cell + 1}, line {self.row}"


@dataclass
class Placement:
    """What the notebook pins to the CPU."""

    functions: dict[str, Pin] = field(default_factory=dict)  # jitted with a CPU device: every call
    cells: dict[int, list[tuple[set[str] | None, Pin]]] = field(default_factory=dict)  # per cell: functions (None: all)
    platform: Pin | None = None  # everything from this cell on

    def pins_in(self, cell: int) -> list[tuple[set[str] | None, Pin]]:
        """What pins calls to the CPU inside ``cell`` (a ``default_device`` block, a committed array), with the
        functions each covers (None: all)."""
        return self.cells.get(cell, [])

    def pin_of(self, cell: int, function: str | None) -> Pin | None:
        """Why a call of ``function`` in ``cell`` runs on the CPU, or None."""
        if self.platform is not None and cell >= self.platform.cell:
            return self.platform
        if function and function in self.functions and cell >= self.functions[function].cell:
            return self.functions[function]
        for names, pin in self.pins_in(cell):
            if names is None or (function and function in names):
                return pin
        return None

    def summary(self, cell_lines: dict[int, int | None]) -> PlacementSummary:
        """What the forecast's result says of the pins: each with where it is in the notebook."""

        def one(pin: Pin) -> PinAt:
            return PinAt(how=pin.how, cell=pin.cell, where=pin.where(cell_lines), code=pin.text)

        return PlacementSummary(
            platform=one(self.platform) if self.platform else None,
            functions={name: one(pin) for name, pin in self.functions.items()},
            cells={
                cell: tuple(
                    CellPin(tuple(sorted(names)) if names is not None else None, one(pin)) for names, pin in pins
                )
                for cell, pins in self.cells.items()
            },
        )


@dataclass(frozen=True, slots=True)
class PinAt:
    """A pin as the forecast reports it: how, in which cell, where (``line 12``) and the code."""

    how: str
    cell: int
    where: str
    code: str


@dataclass(frozen=True, slots=True)
class CellPin:
    """A pin inside one cell and the functions whose calls it pins there (None: all of the cell's)."""

    functions: tuple[str, ...] | None
    pin: Annotated[PinAt, Write(inline=True)]


@dataclass(frozen=True, slots=True)
class PlacementSummary:
    """The notebook's CPU pins in a forecast: the platform pin, functions jitted for the CPU, and per cell."""

    platform: PinAt | None
    functions: Mapping[str, PinAt]
    cells: Mapping[int, tuple[CellPin, ...]]


def _is_cpu(expression: str, cpu_names: set[str]) -> bool:
    if _CPU_LITERAL.search(expression) or re.search(r"""backend\s*=\s*["']cpu["']""", expression):
        return True
    return any(re.search(rf"\b{re.escape(name)}\b", expression) for name in cpu_names)


def _jit_target(expression: str) -> str | None:
    """``jax.jit(f, device=cpu)`` → ``f``."""
    match = _JIT.search(expression)
    if match is None:
        return None
    inner = expression[match.end() :]
    name = re.match(r"\s*([A-Za-z_][\w.]*)", inner)
    return name.group(1).rsplit(".", 1)[-1] if name else None


def _calls(text: str) -> set[str]:
    return {name for name in _CALL.findall(text) if name not in ("print", "range", "len", "float", "int")}


def read(sources: dict[int, str]) -> Placement:
    """The CPU pins of a notebook's code cells (index → source), in notebook order."""
    reader = _Reader(sorted(sources))
    for index in sorted(sources):
        reader.cell(index, sources[index].splitlines())
    return reader.placement


class _Reader:
    """One pass over a notebook's cells: the names bound to a CPU device and the arrays committed to one carry
    from cell to cell; a ``with`` block, a pending ``@jit`` decorator and a ``def`` body are a cell's own."""

    def __init__(self, indices: list[int]) -> None:
        self.indices = indices
        self.placement = Placement()
        self.cpu_names: set[str] = set()
        self.committed: dict[str, Pin] = {}
        self.pending_decorator: Pin | None = None
        self.block: tuple[int, Pin, list[str]] | None = None  # (indent, pin, lines)
        self.inside_def: int | None = None  # the indent of the def whose body this is: its names are its own

    def cell(self, index: int, lines: list[str]) -> None:
        self.pending_decorator, self.block, self.inside_def = None, None, None
        for row, line in enumerate(lines, start=1):
            self._line(index, row, line)
        self._close_block(index)

    def _close_block(self, index: int) -> None:
        if self.block is not None:
            names = _calls("\n".join(self.block[2]))
            self.placement.cells.setdefault(index, []).append((names or None, self.block[1]))
            self.block = None

    def _line(self, index: int, row: int, line: str) -> None:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if self.inside_def is not None and stripped and indent <= self.inside_def:
            self.inside_def = None
        if self.block is not None:
            if stripped and indent <= self.block[0]:
                self._close_block(index)
            elif stripped:
                self.block[2].append(line)
        if not stripped or stripped.startswith("#"):
            return
        pin = Pin(how="", cell=index, row=row, text=shorten(stripped, 120))
        if _PLATFORM.search(line) and self.placement.platform is None:
            pin.how = "platform"
            self.placement.platform = pin
        assign = _ASSIGN.match(line) or _TUPLE_ASSIGN.match(line)
        if assign and _CPU_LITERAL.search(assign.group(2)) and not _JIT.search(assign.group(2)):
            self.cpu_names.add(assign.group(1))
        with_match = _WITH.match(line)
        if with_match and _is_cpu(with_match.group(2), self.cpu_names):
            pin.how = "default_device"
            self.block = (len(with_match.group(1)), pin, [])
            return
        default = _DEFAULT_DEVICE.search(line)
        if default and _is_cpu(default.group(1), self.cpu_names):
            self._pin_from(index, pin)
        if _JIT.search(line) and re.search(r"\b(device|backend)\s*=", line) and _is_cpu(line, self.cpu_names):
            self._jit_pin(pin, line, stripped, assign)
        definition = _DEF.match(line)
        if definition:
            if self.pending_decorator is not None:
                self.placement.functions.setdefault(definition.group(1), self.pending_decorator)
                self.pending_decorator = None
            self.inside_def = indent
            return
        if self.inside_def is None:
            self._arrays(index, line, pin, assign)

    def _pin_from(self, index: int, pin: Pin) -> None:
        """``jax.config.update("jax_default_device", cpu)``: this cell and every later one run on the CPU."""
        pin.how = "default_device"
        for later in self.indices:
            if later >= index:
                self.placement.cells.setdefault(later, []).append((None, pin))

    def _jit_pin(self, pin: Pin, line: str, stripped: str, assign: re.Match[str] | None) -> None:
        pin.how = "jit device"
        if stripped.startswith("@"):
            self.pending_decorator = pin
            return
        target = _jit_target(line)
        if target:
            self.placement.functions.setdefault(target, pin)
        if assign:
            self.placement.functions.setdefault(assign.group(1), pin)

    def _arrays(self, index: int, line: str, pin: Pin, assign: re.Match[str] | None) -> None:
        """Arrays committed to the CPU (``device_put(x, cpu)``), and the calls that pass one on."""
        put = _DEVICE_PUT.search(line)
        if put and assign and _is_cpu(put.group(1), self.cpu_names):
            pin.how = "committed array"
            self.committed[assign.group(1)] = pin
        elif assign and assign.group(1) in self.committed:
            del self.committed[assign.group(1)]  # the name now holds something else
        if self.committed and not put:
            for call in _CALL.finditer(line):
                arguments = line[call.end() :]
                for name, origin in self.committed.items():
                    if re.search(rf"\b{re.escape(name)}\b", arguments):
                        self.placement.cells.setdefault(index, []).append(({call.group(1)}, origin))
