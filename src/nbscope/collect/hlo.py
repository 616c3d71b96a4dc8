"""What one compiled program does, read from its optimised HLO: loops, trip counts, syncs, work, dtypes.

Input is the text XLA prints for an optimised module (``HloModule.to_string()``); ``describe`` turns it
into the ``programs`` entry documented in docs/run-record.md:

* **Regions.** A program runs as its entry computation plus, per ``while``, a body and a condition run
  once per iteration (loops nest). A ``call`` is part of its caller; fusions are one kernel each.
* **Trip counts** come from the ``known_trip_count`` XLA's ``WhileLoopTripCountAnnotator`` writes into a
  ``while``'s ``backend_config`` (``lax.scan`` and ``fori_loop`` with concrete bounds). A loop without one
  (``while_loop``, ``fori_loop`` with traced bounds) has a count only known at run time: ``None`` here.
* **Syncs.** XLA:GPU copies a ``conditional``'s branch index to the host and waits, and does the same
  with the predicate of a ``while`` without a known trip count (openxla ``conditional_thunk.cc``,
  ``while_thunk.cc``): each such loop iteration waits for the host. XLA:CPU turns a ``cond`` with cheap
  branches into a ``select`` (``conditional-to-select``); its instructions keep ``/cond/`` in their
  ``op_name``, so such a loop is flagged as *possibly* syncing (``select_conds``).
* **Work.** Per region, flops, transcendentals and bytes accessed from XLA's own cost analysis of that
  region alone (a sub-module whose entry is the region; XLA counts a ``while`` body once, so the
  regions are costed apart and multiplied by trip counts here), or where jaxlib's cost analysis is
  unavailable or refuses the sub-module, an estimate from the HLO text (elementwise ops: one flop per
  element, ``dot``: 2·M·N·K, bytes: kernel operands and results), labelled ``estimate``.
* **Dtypes.** The floating-point types of the work, and the share of flops done in float64 (which
  weak-FP64 GPUs run 32–64× slower), counted per element from the instruction shapes.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from nbscope.schema.codec import Write, decode, known
from nbscope.schema.hlo_backend_config import BackendConfig
from nbscope.schema.programs import WORK_FIELDS, SourceSpan, Work

ELEMENT_BYTES = {
    "pred": 1,
    "s4": 1,
    "u4": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "s32": 4,
    "u32": 4,
    "s64": 8,
    "u64": 8,
    "f16": 2,
    "bf16": 2,
    "f32": 4,
    "f64": 8,
    "c64": 8,
    "c128": 16,
}
FLOAT64 = {"f64", "c128"}
FLOATS = {"f16", "bf16", "f32", "f64", "c64", "c128"}
NO_WORK = Work(**dict.fromkeys(WORK_FIELDS, 0.0))  # what sums start from
_SHAPE = re.compile(r"\b(pred|[su](?:4|8|16|32|64)|f8\w*|bf16|f16|f32|f64|c64|c128|token)\[([0-9,]*)\]")
# Instructions that run no kernel of their own (views, plumbing, literals).
NO_KERNEL = {
    "parameter",
    "constant",
    "tuple",
    "get-tuple-element",
    "bitcast",
    "after-all",
    "add-dependency",
    "opt-barrier",
    "partition-id",
    "replica-id",
    "domain",
}
TRANSCENDENTAL = {
    "cosine",
    "sine",
    "tan",
    "exponential",
    "exponential-minus-one",
    "log",
    "log-plus-one",
    "logistic",
    "power",
    "rsqrt",
    "sqrt",
    "cbrt",
    "tanh",
    "atan2",
    "erf",
}
# Ops that are arithmetic on each element (one flop per element, as XLA's cost analysis counts them).
_NOT_ARITHMETIC = NO_KERNEL | {
    "broadcast",
    "reshape",
    "transpose",
    "copy",
    "slice",
    "dynamic-slice",
    "dynamic-update-slice",
    "concatenate",
    "pad",
    "iota",
    "convert",
    "bitcast-convert",
    "reverse",
    "gather",
    "scatter",
    "while",
    "conditional",
    "call",
    "fusion",
    "custom-call",
    "rng",
    "rng-bit-generator",
    "sort",
    "infeed",
    "outfeed",
    "copy-start",
    "copy-done",
    "send",
    "recv",
    "send-done",
    "recv-done",
    "get-dimension-size",
}
_HEADER_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_CALLED = re.compile(
    r"\b(calls|to_apply|body|condition|true_computation|false_computation)=%?([\w.\-]+)"
    r"|\b(branch_computations|called_computations)=\{([^}]*)\}"
)
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")
_COND_BRANCH = re.compile(r"/(cond|switch)/branch_\d+")
_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([0-9,]*)\}")
_COMPUTATION = re.compile(r"^(ENTRY )?%?([\w.\-]+)\s")
_ASSIGN = re.compile(r"^\s*(ROOT )?%?([\w.\-]+) = ")
_OPERANDS = re.compile(r"%([\w.\-]+)")


@dataclass
class Instruction:
    name: str
    shape: str
    opcode: str
    text: str
    called: list[str] = field(default_factory=list)
    root: bool = False

    @property
    def trip_count(self) -> int | None:
        known_count = decode(BackendConfig, self.backend_config()).known_trip_count
        return known_count.n if known_count is not None else None

    def backend_config(self) -> dict[str, Any]:
        marker = self.text.find("backend_config=")
        start = self.text.find("{", marker)
        if marker < 0 or start < 0:
            return {}
        try:
            value, _ = json.JSONDecoder().raw_decode(self.text, start)  # the object, whatever follows it
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}

    @property
    def op_name(self) -> str:
        match = _OP_NAME.search(self.text)
        return match.group(1) if match else ""

    @property
    def frame(self) -> int | None:
        match = _FRAME_ID.search(self.text)
        return int(match.group(1)) if match else None


@dataclass
class Computation:
    name: str
    entry: bool
    lines: list[str]
    instructions: list[Instruction]

    @functools.cached_property
    def named(self) -> dict[str, Instruction]:
        return {i.name: i for i in self.instructions}

    def find(self, name: str) -> Instruction | None:
        return self.named[name] if name in self.named else None

    @property
    def root(self) -> Instruction | None:
        return next((i for i in self.instructions if i.root), None)


@dataclass(frozen=True, slots=True)
class FileLocation:
    """A row of the module's ``FileLocations`` table (``{file_name_id=1 function_name_id=1 line=7 ...}``): ids
    into the ``FileNames`` and ``FunctionNames`` tables, 1-based (0: none), and where in that file."""

    file_name_id: int
    function_name_id: int
    line: int | None
    end_line: int | None
    column: int | None
    end_column: int | None


@dataclass(frozen=True, slots=True)
class StackFrame:
    """A row of the module's ``StackFrames`` table: its location and the frame that called it (1-based; 0: none)."""

    file_location_id: int
    parent_frame_id: int


@dataclass
class Module:
    name: str
    computations: dict[str, Computation]
    entry: str
    files: dict[int, str]
    functions: dict[int, str]
    locations: dict[int, FileLocation]
    frames: dict[int, StackFrame]

    def computation(self, name: str) -> Computation | None:
        """The computation the module's text defines under ``name``; None: it defines none of that name (an
        entry or a callee its text lacks)."""
        return self.computations.get(name)

    def source(self, frame_id: int | None) -> SourceSpan | None:
        """The innermost source location of a stack frame: file, function, line, columns."""
        if frame_id is None or frame_id not in self.frames:
            return None
        location = self.locations.get(self.frames[frame_id].file_location_id)
        if location is None:
            return None
        return SourceSpan(
            file=self.files.get(location.file_name_id),
            function=self.functions.get(location.function_name_id),
            line=location.line,
            end_line=location.end_line,
            column=location.column,
            end_column=location.end_column,
        )


# ---- parsing -----------------------------------------------------------------------------------


def _split_shape(rest: str) -> tuple[str, str]:
    """``(s32[], f32[]) while(...)`` → shape ``(s32[], f32[])`` and the remainder ``while(...)``."""
    if rest.startswith("("):
        depth = 0
        for index, char in enumerate(rest):
            depth += char == "("
            depth -= char == ")"
            if depth == 0:
                return rest[: index + 1], rest[index + 1 :].lstrip()
        return rest, ""
    shape, _, remainder = rest.partition(" ")
    return shape, remainder


def _instruction(line: str) -> Instruction | None:
    match = _ASSIGN.match(line)
    if match is None:
        return None
    shape, remainder = _split_shape(line[match.end() :])
    opcode = remainder.split("(", 1)[0].strip()
    called: list[str] = []
    for single_key, single, list_key, many in _CALLED.findall(remainder):
        if single_key and single:
            called.append(single)
        elif list_key and many:
            called.extend(part.strip().lstrip("%") for part in many.split(",") if part.strip())
    return Instruction(
        name=match.group(2), shape=shape, opcode=opcode, text=remainder, called=called, root=bool(match.group(1))
    )


def _braced(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", text)}


def parse(text: str) -> Module:
    """Parse an HLO module as XLA prints it (with or without metadata tables)."""
    lines = text.splitlines()
    name_match = re.match(r"HloModule\s+([\w.\-]+)", lines[0] if lines else "")
    module = Module(
        name=name_match.group(1) if name_match else "",
        computations={},
        entry="",
        files={},
        functions={},
        locations={},
        frames={},
    )
    table: str | None = None
    current: Computation | None = None
    for line in lines[1:]:
        stripped = line.strip()
        if current is not None:
            current.lines.append(line)
            if stripped == "}" and not line.startswith(" "):
                current = None
                continue
            instruction = _instruction(line)
            if instruction is not None:
                current.instructions.append(instruction)
            continue
        if stripped in _HEADER_TABLES:
            table = stripped
            continue
        if not stripped:
            table = None
            continue
        if table is not None:
            head, _, value = stripped.partition(" ")  # a row: its 1-based id, then its value
            if not head.isdigit():
                continue
            key = int(head)
            if table == "FileNames":
                module.files[key] = value.strip('"')
            elif table == "FunctionNames":
                module.functions[key] = value.strip('"')
            elif table == "FileLocations":
                module.locations[key] = decode(FileLocation, _braced(value))
            else:
                module.frames[key] = decode(StackFrame, _braced(value))
            continue
        if stripped.endswith("{") and not line.startswith(" "):
            match = _COMPUTATION.match(line)
            if match:
                current = Computation(name=match.group(2), entry=bool(match.group(1)), lines=[line], instructions=[])
                module.computations[current.name] = current
                if current.entry:
                    module.entry = current.name
    return module


# ---- shapes --------------------------------------------------------------------------------------


def shape_arrays(shape: str) -> list[tuple[str, int]]:
    """(element type, element count) of each array in a (possibly tuple) shape."""
    arrays = []
    for dtype, dims in _SHAPE.findall(shape):
        arrays.append((dtype, math.prod(int(dim) for dim in dims.split(",") if dim.strip())))
    return arrays


def shape_bytes(shape: str) -> int:
    return sum(ELEMENT_BYTES.get(dtype, 4) * count for dtype, count in shape_arrays(shape) if dtype != "token")


def _elements(shape: str) -> tuple[str | None, int]:
    arrays = shape_arrays(shape)
    if not arrays:
        return None, 0
    return arrays[0][0], sum(count for _, count in arrays)


# ---- regions, kernels and loops ------------------------------------------------------------------


@dataclass
class Region:
    """Code that runs as a unit: the entry, or one iteration of a loop's body plus its condition."""

    key: str  # "entry" or the while instruction's name
    computations: list[str]  # entry, or [body, condition]
    parent: str | None = None
    instruction: Instruction | None = None  # the while
    kernels: int = 0
    conditionals: int = 0
    select_conds: int = 0  # instructions with /cond/ in their op_name but no conditional left
    children: list[str] = field(default_factory=list)


class _Walker:
    """Sorts a module's computations into regions: which computations run how often."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.regions: dict[str, Region] = {}

    def walk(self) -> dict[str, Region]:
        entry = Region(key="entry", computations=[self.module.entry])
        self.regions["entry"] = entry
        self._visit(self.module.entry, entry, set())
        for region in self.regions.values():
            if region.conditionals:  # a real conditional already syncs: a converted one adds nothing
                region.select_conds = 0
        return self.regions

    def _visit(self, name: str, region: Region, stack: set[str]) -> None:
        computation = self.module.computation(name)
        if computation is None or name in stack:
            return
        stack = stack | {name}
        for instruction in computation.instructions:
            opcode = instruction.opcode
            if opcode == "while":
                self._loop(instruction, region, stack)
            elif opcode == "call":
                for callee in instruction.called:
                    self._visit(callee, region, stack)
            elif opcode == "conditional":
                region.conditionals += 1
                region.kernels += 1  # the branch index is computed, copied to the host, waited for
                before = region.kernels
                branch_kernels = []
                for branch in instruction.called:
                    region.kernels = before
                    self._visit(branch, region, stack)
                    branch_kernels.append(region.kernels - before)
                region.kernels = before + max(branch_kernels, default=0)
            elif opcode not in NO_KERNEL:
                region.kernels += 1
                if region.key != "entry" and _COND_BRANCH.search(instruction.op_name):
                    region.select_conds += 1

    def _loop(self, instruction: Instruction, parent: Region, stack: set[str]) -> None:
        body = next((c for c in instruction.called if c in attribute(instruction, "body")), None)
        condition = next((c for c in instruction.called if c in attribute(instruction, "condition")), None)
        key = instruction.name
        while key in self.regions:
            key += "'"
        loop = Region(
            key=key, computations=[c for c in (body, condition) if c], parent=parent.key, instruction=instruction
        )
        self.regions[key] = loop
        parent.children.append(key)
        for computation in loop.computations:
            self._visit(computation, loop, stack)


def attribute(instruction: Instruction, name: str) -> str:
    """The computation an instruction names in its attribute ``name`` (``body=%region_1``); "" if none."""
    match = re.search(rf"\b{name}=%?([\w.\-]+)", instruction.text)
    return match.group(1) if match else ""


# ---- work -------------------------------------------------------------------------------------

CostFunction = Callable[[str], Work | None]  # sub-module text -> its flops, transcendentals and bytes


def _callees(module: Module, name: str, seen: set[str]) -> list[str]:
    """Computations ``name`` calls, transitively, callees first."""
    order: list[str] = []
    computation = module.computation(name)
    if computation is None:
        return order
    for instruction in computation.instructions:
        for callee in instruction.called:
            if callee not in seen and callee in module.computations:
                seen.add(callee)
                order.extend(_callees(module, callee, seen))
                order.append(callee)
    return order


def submodule_text(module: Module, computation: str) -> str:
    """A module whose entry is ``computation`` (with what it calls), for costing one region alone."""
    seen = {computation}
    parts = [f"HloModule region_{re.sub(r'[^A-Za-z0-9_]', '_', computation)}", ""]
    for callee in _callees(module, computation, seen):
        lines = list(module.computations[callee].lines)
        lines[0] = lines[0].replace("ENTRY ", "", 1)
        parts.extend([*lines, ""])
    lines = list(module.computations[computation].lines)
    if not lines[0].startswith("ENTRY "):
        lines[0] = "ENTRY " + lines[0]
    parts.extend(lines)
    return "\n".join(parts) + "\n"


def _unvisited(module: Module, name: str, seen: set[str]) -> tuple[list[Any], set[str]]:
    """A computation's instructions when it is not on the current call path yet (else none), and the
    path with it."""
    computation = module.computation(name)
    if computation is None or name in seen:
        return [], seen
    return computation.instructions, seen | {name}


def _estimate(module: Module, names: list[str], include_loops: bool) -> tuple[Work, set[str]]:
    """Work of computations from their text (flops per element, dot 2·M·N·K, kernel operand bytes), and the
    element types of their instructions."""
    work = dict.fromkeys(WORK_FIELDS, 0.0)
    dtypes: set[str] = set()
    shapes = {i.name: i.shape for computation in module.computations.values() for i in computation.instructions}

    def arithmetic(name: str, seen: set[str]) -> None:
        instructions, seen = _unvisited(module, name, seen)
        for instruction in instructions:
            opcode = instruction.opcode
            dtype, elements = _elements(instruction.shape)
            if dtype in FLOATS:
                dtypes.add(dtype)
            if opcode in (
                "fusion",
                "call",
                "conditional",
                "reduce",
                "reduce-window",
                "map",
                "sort",
                "scatter",
                "select-and-scatter",
                "all-reduce",
            ):
                for callee in instruction.called:
                    arithmetic(callee, seen)
            if opcode == "while":
                if include_loops:
                    for callee in instruction.called:
                        arithmetic(callee, seen)
                continue
            if opcode in ("dot", "convolution"):
                depth = 1
                operands = _OPERANDS.findall(instruction.text.split(")", 1)[0])
                match = _CONTRACTING.search(instruction.text)
                if operands and match and operands[0] in shapes:
                    lhs = _SHAPE.search(shapes[operands[0]])
                    if lhs:
                        dims = [int(d) for d in lhs.group(2).split(",") if d.strip()]
                        for index in match.group(1).split(","):
                            if index.strip() and int(index) < len(dims):
                                depth *= dims[int(index)]
                flops = 2.0 * elements * depth
                work["flops"] += flops
                if dtype in FLOAT64:
                    work["flops_f64"] += flops
            elif opcode in TRANSCENDENTAL:
                work["transcendentals"] += elements
                if dtype in FLOAT64:
                    work["transcendentals_f64"] += elements
            elif opcode not in _NOT_ARITHMETIC and dtype is not None:
                work["flops"] += elements
                if dtype in FLOAT64:
                    work["flops_f64"] += elements

    def traffic(name: str, seen: set[str]) -> None:
        instructions, seen = _unvisited(module, name, seen)
        for instruction in instructions:
            if instruction.opcode == "call" or (instruction.opcode == "while" and include_loops):
                for callee in instruction.called:
                    traffic(callee, seen)
                continue
            if instruction.opcode in NO_KERNEL or instruction.opcode in ("while", "conditional"):
                continue
            operands = _OPERANDS.findall(instruction.text.split(")", 1)[0])
            work["bytes"] += shape_bytes(instruction.shape) + sum(shape_bytes(shapes.get(o, "")) for o in operands)

    for name in names:
        arithmetic(name, set())
        traffic(name, set())
    return Work(**work), dtypes


def _region_work(module: Module, region: Region, cost: CostFunction | None) -> tuple[Work, set[str], str]:
    """One execution of a region (for a loop: one iteration), nested loops excluded; its element types; and
    where the figures come from."""
    estimate, dtypes = _estimate(module, region.computations, include_loops=False)
    if cost is None:
        return estimate, dtypes, "estimate"
    measured = NO_WORK
    for name in region.computations:
        total = cost(submodule_text(module, name))
        if total is None:
            return estimate, dtypes, "estimate"
        measured = measured.plus(total)
    return measured, dtypes, "xla-cost-analysis"


def _subtract_children(work: Work, children: list[Work]) -> Work:
    def own(name: str) -> float:
        return max(0.0, (getattr(work, name) or 0.0) - sum(getattr(c, name) or 0.0 for c in children))

    return Work(
        flops=own("flops"),
        transcendentals=own("transcendentals"),
        bytes=own("bytes"),
        flops_f64=0.0,
        transcendentals_f64=0.0,
    )


@dataclass(frozen=True, slots=True)
class EntryWork:
    """A program's entry computation: the kernels it launches, its conditionals, and its own work."""

    kernels: int
    conditionals: int
    work: Annotated[Work, Write(inline=True)]


@dataclass(frozen=True, slots=True)
class ExecutionWork:
    """The work of one execution, loop bodies multiplied by their iterations."""

    work: Annotated[Work, Write(inline=True)]
    complete: bool  # False: a trip count is unknown, and its loop counts one iteration (a lower bound)


@dataclass(slots=True)
class LoopDescription:
    """One HLO ``while`` (``schema.programs.Loop`` reads it back); the collector adds what made it in the
    notebook (``call``, ``cell``, ``kind``, ``cell_line``) and whether a GPU would run it (``cpu_only``)."""

    id: str
    parent: str | None
    trip_count: int | None
    trip_count_source: str | None
    outer_iterations: float | None
    kernels_per_iteration: int
    conditionals_per_iteration: int
    select_conds: int
    syncs_per_iteration: int
    per_iteration: Work
    source: SourceSpan | None
    op_name: str
    body: str | None
    call: str | None = None
    cell: int | None = None
    kind: str | None = None
    cell_line: Annotated[int | None, Write(when=known)] = None
    cpu_only: Annotated[bool | None, Write(when=known)] = None
    # the most iterations its condition allows (a counter from a constant, stepped by a constant, compared with
    # a constant: ``(i < 5) & (err > tol)``), where its trip count is known only at run time
    trip_cap: Annotated[int | None, Write(when=known)] = None


def _failed(gpu: GpuDescription) -> bool:
    return gpu.error is not None


def _not_lowered(gpu: GpuDescription) -> bool:
    return gpu.error is not None or gpu.note is not None


@dataclass(frozen=True, slots=True)
class GpuDescription:
    """What a program would run on a GPU, from its lowering for CUDA (``schema.programs.GpuLowering`` reads it
    back): lowered (its loops, library calls, conditionals and the lowering's time), skipped (``note``: no
    loops, ``custom_calls`` empty) or failed (``error`` alone)."""

    source: str | None  # "lower (cuda)", or "not lowered"
    loops: Annotated[int | None, Write(omit=_failed)] = None
    custom_calls: Annotated[dict[str, Any], Write(omit=_failed)] = field(default_factory=dict)
    note: Annotated[str | None, Write(when=known)] = None  # why it was skipped
    error: Annotated[str | None, Write(when=known)] = None  # why lowering failed
    conditionals: Annotated[float | None, Write(omit=_not_lowered)] = None
    seconds: Annotated[float | None, Write(omit=_not_lowered)] = None


@dataclass(slots=True)
class ProgramDescription:
    """The ``programs`` entry of one optimised HLO module (``schema.programs.Program`` reads it back), written
    with the keys, and in the order, records have always had; the collector names it (``key`` to
    ``first_cell``) and adds its CUDA lowering (``gpu``)."""

    module: str
    entry: EntryWork
    loops: list[LoopDescription]
    per_execution: ExecutionWork
    float_dtypes: list[str]
    cost_source: str
    parameters_bytes: list[int]
    output_bytes: int
    key: str | None = None
    program_id: int | None = None
    function: str | None = None
    kind: str | None = None
    first_cell: int | None = None
    gpu: Annotated[GpuDescription | None, Write(when=known)] = None  # None: not lowered for CUDA
    target: Annotated[dict[str, str] | None, Write(when=known)] = None  # ``schema.programs.TargetModule``


def describe(text: str, cost: CostFunction | None = None) -> ProgramDescription:
    """The ``programs`` entry of one optimised HLO module (see the module docstring)."""
    module = parse(text)
    if not module.entry:
        raise ValueError("no ENTRY computation in the HLO text")
    regions = _Walker(module).walk()
    # XLA's cost of a sub-module covers everything it calls, loop bodies included once: the region's own
    # work is its total minus its child loops' totals (their bodies and conditions, counted once).
    totals: dict[str, Work] = {}
    dtypes: set[str] = set()
    sources: set[str] = set()
    for key, region in regions.items():
        totals[key], region_dtypes, source = _region_work(module, region, cost)
        dtypes |= region_dtypes
        sources.add(source)
    measured = sources == {"xla-cost-analysis"}
    own: dict[str, Work] = {}
    for key, region in regions.items():
        # XLA's cost includes the child loops (taken off here); the estimate never includes them
        work = _subtract_children(totals[key], [totals[c] for c in region.children]) if measured else totals[key]
        estimate, _ = _estimate(module, region.computations, include_loops=False)
        share = (estimate.flops_f64 or 0.0) / estimate.flops if estimate.flops else 0.0
        tshare = (estimate.transcendentals_f64 or 0.0) / estimate.transcendentals if estimate.transcendentals else 0.0
        own[key] = replace(
            work, flops_f64=(work.flops or 0.0) * share, transcendentals_f64=(work.transcendentals or 0.0) * tshare
        )
    loops = []
    # Every region but the entry is a loop, walked after the region it sits in: its parent's multiplier is set.
    multipliers: dict[str, float | None] = {"entry": 1.0}
    for key, region in regions.items():
        if region.instruction is None:
            continue
        trips = region.instruction.trip_count
        parent = multipliers[region.parent or "entry"]
        multipliers[key] = parent * trips if parent is not None and trips is not None else None
        loops.append(_loop_entry(module, region, own[key], trips, parent))
    total = NO_WORK
    complete = True
    for key in regions:
        multiplier = multipliers[key]
        if multiplier is None:
            complete = False
            multiplier = 1.0  # at least one iteration: the totals are then a lower bound
        total = total.plus(own[key], multiplier)
    entry = regions["entry"]
    main = module.computations[module.entry]  # ``parse`` names an entry only with its computation
    return ProgramDescription(
        module=module.name,
        entry=EntryWork(kernels=entry.kernels, conditionals=entry.conditionals, work=own["entry"]),
        loops=loops,
        per_execution=ExecutionWork(work=total, complete=complete),
        float_dtypes=[d for d in sorted(dtypes) if d in FLOATS],
        cost_source="xla-cost-analysis" if measured else "estimate",
        parameters_bytes=[shape_bytes(i.shape) for i in main.instructions if i.opcode == "parameter"],
        output_bytes=shape_bytes(main.root.shape) if main.root is not None else 0,
    )


def _loop_entry(module: Module, region: Region, work: Work, trips: int | None, outer: float | None) -> LoopDescription:
    assert region.instruction is not None
    instruction = region.instruction
    syncs = region.conditionals + (0 if trips is not None else 1)
    return LoopDescription(
        id=region.key,
        parent=None if region.parent == "entry" else region.parent,
        trip_count=trips,
        trip_count_source="static" if trips is not None else None,
        outer_iterations=outer,
        kernels_per_iteration=region.kernels,
        conditionals_per_iteration=region.conditionals,
        select_conds=region.select_conds,
        syncs_per_iteration=syncs,
        per_iteration=work,
        source=module.source(instruction.frame),
        op_name=instruction.op_name,
        body=region.computations[0] if region.computations else None,
        trip_cap=None if trips is not None else _condition_cap(module, instruction),
    )


_CONSTANT = re.compile(r"constant\((-?\d+)\)")
_DIRECTION = re.compile(r"direction=(LT|LE|GT|GE)")
_INDEX = re.compile(r"index=(\d+)")


def _operands(instruction: Instruction) -> list[str]:
    """The names an instruction reads (its operand list, before its attributes)."""
    text = instruction.text.split(" = ", 1)[-1]
    start = text.find("(")
    depth, end = 0, len(text)
    for index in range(start, len(text)):
        depth += text[index] == "("
        depth -= text[index] == ")"
        if depth == 0:
            end = index
            break
    return _OPERANDS.findall(text[start:end]) if start >= 0 else []


def _condition_cap(module: Module, loop: Instruction) -> int | None:
    """The most iterations a ``while`` whose trip count XLA does not know can run, where its condition compares a
    counter with a constant (``i < 5``, alone or under an ``and``), the body steps that counter by a positive
    constant and the loop starts it at a constant; None otherwise. Fusions are followed into their computations."""
    condition = module.computation(attribute(loop, "condition"))
    body = module.computation(attribute(loop, "body"))
    if condition is None or body is None:
        return None
    caps = []
    for index, bound, inclusive in _counter_bounds(module, condition):
        step = _counter_step(module, body, index)
        start = _counter_start(module, loop, index)
        if step is None or start is None or step <= 0:
            continue
        caps.append(max(0, -(-(bound + (1 if inclusive else 0) - start) // step)))
    return min(caps) if caps else None


def _counter_bounds(module: Module, condition: Computation) -> list[tuple[int, int, bool]]:
    """(tuple index, constant, inclusive) of each ``counter < constant`` the condition's result requires."""
    found: list[tuple[int, int, bool]] = []

    def visit(computation: Computation, name: str, meaning: dict[str, tuple[str, Any]], depth: int) -> None:
        instruction = computation.find(name)
        if instruction is None or depth > 6:
            return
        if instruction.opcode == "and":
            for operand in _operands(instruction):
                visit(computation, operand, meaning, depth + 1)
        elif instruction.opcode == "fusion" and instruction.called:
            inner = module.computation(instruction.called[0])
            if inner is None:
                return
            parameters = {
                i.name: int(m.group(1))
                for i in inner.instructions
                if i.opcode == "parameter" and (m := re.search(r"parameter\((\d+)\)", i.text))
            }
            operands = _operands(instruction)
            inner_meaning = {
                p: _meaning(computation, operands[n], meaning) for p, n in parameters.items() if n < len(operands)
            }
            if inner.root is not None:
                visit(inner, inner.root.name, inner_meaning, depth + 1)
        elif instruction.opcode == "compare" and (direction := _DIRECTION.search(instruction.text)):
            sides = [_meaning(computation, o, meaning) for o in _operands(instruction)]
            if len(sides) != 2:
                return
            (left_kind, left), (right_kind, right) = sides
            if direction.group(1) in ("GT", "GE"):
                (left_kind, left), (right_kind, right) = (right_kind, right), (left_kind, left)
            if left_kind == "counter" and right_kind == "constant":
                found.append((left, right, direction.group(1) in ("LE", "GE")))

    if condition.root is not None:
        visit(condition, condition.root.name, {}, 0)
    return found


def _meaning(computation: Computation, name: str, outer: dict[str, tuple[str, Any]]) -> tuple[str, Any]:
    """What a value is: ("counter", tuple index) for an integer element of the loop's state, ("constant", n)."""
    if name in outer:
        return outer[name]
    instruction = computation.find(name)
    if instruction is None:
        return ("other", None)
    if instruction.opcode in ("copy", "convert", "bitcast", "reshape", "broadcast") and _operands(instruction):
        return _meaning(computation, _operands(instruction)[0], outer)
    if instruction.opcode == "constant" and (value := _CONSTANT.search(instruction.text)):
        return ("constant", int(value.group(1)))
    if (
        instruction.opcode == "get-tuple-element"
        and instruction.shape.startswith(("s32[]", "s64[]", "u32[]", "u64[]", "s16[]", "s8["))
        and (index := _INDEX.search(instruction.text))
        and (source := computation.find(next(iter(_operands(instruction)), ""))) is not None
        and source.opcode == "parameter"
    ):
        return ("counter", int(index.group(1)))
    return ("other", None)


def _counter_step(module: Module, body: Computation, index: int) -> int | None:
    """The constant the body adds to the state's element ``index`` (``i + 1``), or None."""
    root = body.root
    if root is None or root.opcode != "tuple" or index >= len(_operands(root)):
        return None
    value = body.find(_operands(root)[index])
    while value is not None and value.opcode in ("copy", "convert", "bitcast"):
        value = body.find(_operands(value)[0]) if _operands(value) else None
    if value is None:
        return None
    sides = [_meaning(body, o, {}) for o in _operands(value)]
    if value.opcode == "fusion" and value.called:
        inner = module.computation(value.called[0])
        inner_root = inner.root if inner is not None else None
        if inner_root is None or inner_root.opcode != "add":
            return None
    elif value.opcode != "add":
        return None
    if ("counter", index) in sides:
        constants = [v for kind, v in sides if kind == "constant"]
        return constants[0] if len(constants) == 1 else None
    return None


def _counter_start(module: Module, loop: Instruction, index: int) -> int | None:
    """The constant the loop's state element ``index`` starts at, following the state through the ``call`` XLA:CPU
    wraps a small loop in; None when it is not a constant."""
    name, computation = next(iter(_operands(loop)), None), _holder(module, loop.name)
    for _ in range(4):
        if name is None or computation is None:
            return None
        state = computation.find(name)
        while state is not None and state.opcode in ("copy", "bitcast"):
            state = computation.find(next(iter(_operands(state)), ""))
        if state is None:
            return None
        if state.opcode == "tuple" and index < len(_operands(state)):
            kind, value = _meaning(computation, _operands(state)[index], {})
            return value if kind == "constant" else None
        if state.opcode != "parameter":
            return None
        caller = next(
            (
                (c, i)
                for c in module.computations.values()
                for i in c.instructions
                if i.opcode == "call" and computation.name in i.called
            ),
            None,
        )
        if caller is None:
            return None
        computation, name = caller[0], next(iter(_operands(caller[1])), None)
    return None


def _holder(module: Module, instruction: str) -> Computation | None:
    return next((c for c in module.computations.values() if any(i.name == instruction for i in c.instructions)), None)
