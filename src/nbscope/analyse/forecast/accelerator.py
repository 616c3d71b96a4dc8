"""The forecast's terms that depend on what the device is rather than on its speed: XLA's compile for it, the
runtime's start in a process's first JAX cell, and the float64 operations a TPU cannot run.

A TPU is no fast GPU: XLA:TPU compiles a program in 0.06 s to tens of seconds where XLA:CPU took a few tens of
milliseconds, opening the chip costs seconds once per process, and some float64 operations fail outright (measured
on the lent v5e, jax/jaxlib 0.10.2, libtpu 0.0.42.1: ``UNIMPLEMENTED: Only F32 and C64 types are implemented in
LuDecomposition``). Each figure comes from the device table, which says where it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from nbscope import _units as units
from nbscope.analyse.forecast.devices import Device, DeviceTable, Figure
from nbscope.analyse.forecast.model import ClassCompile, CompileFigures, Term
from nbscope.schema.model import Cell, NotebookRun
from nbscope.schema.programs import Program, TargetCompile

# 64-bit values a program takes or makes: XLA:TPU emulates float64 and splits int64, and compiles them slowly.
_X64_WORDS = ("float64", "complex128", "int64", "uint64", "f64", "c128", "s64", "u64")
# Above this many 64-bit bytes a TPU compile grows with the program's size (a float64 cos over 400 MB took 4.7 s
# to compile on the v5e, over a few bytes 0.07 s): the high end adds this many seconds per byte.
_X64_COMPILE_S_PER_BYTE = 1.2e-8


@dataclass(frozen=True, slots=True)
class Failure:
    """An operation the device cannot run in a cell: what it is, why, and where that is known from."""

    operation: str
    reason: str
    source: str


# Float64 (and complex128) operations XLA:TPU does not run, each as the CUDA lowering's solver call or JAX's
# function name that shows it in a CPU run, with the error the v5e gave (nbscope's device check, 2026-12-06).
_LU = Failure(
    "float64 LU decomposition (jnp.linalg.solve, inv, det, scipy.linalg.lu)",
    "UNIMPLEMENTED: Only F32 and C64 types are implemented in LuDecomposition",
    "measured on a TPU v5e (jax 0.10.2, libtpu 0.0.42.1)",
)
_EIG = Failure(
    "float64 general eigenvalues (jnp.linalg.eig)",
    "NotImplementedError: MLIR translation rule for primitive 'eig' not found for platform tpu",
    "measured on a TPU v5e (jax 0.10.2)",
)
_FFT = Failure(
    "complex128 FFT (jnp.fft)",
    "INVALID_ARGUMENT: Unexpected operand type for FFT: c128",
    "measured on a TPU v5e (jax 0.10.2, libtpu 0.0.42.1)",
)
_TPU_CALLS = {"getrf": _LU, "getrs": _LU, "geev": _EIG}
_TPU_FUNCTIONS = {
    "solve": _LU,
    "inv": _LU,
    "det": _LU,
    "slogdet": _LU,
    "lu": _LU,
    "lu_factor": _LU,
    "eig": _EIG,
    "eigvals": _EIG,
    "fft": _FFT,
    "ifft": _FFT,
    "fftn": _FFT,
    "ifftn": _FFT,
    "fft2": _FFT,
    "ifft2": _FFT,
}


def failure_in(message: str) -> Failure | None:
    """The failure a device's error message shows (a cell that raised on the TPU), or None."""
    return next((f for f in (_LU, _EIG, _FFT) if f.reason.split(": ", 1)[1] in message), None)


def is_x64(shapes: tuple[str, ...] | list[str], dtypes: tuple[str, ...] = ()) -> bool:
    return any(word in text for text in (*shapes, *dtypes) for word in _X64_WORDS)


def _compiler_failures(cell: Cell, run: NotebookRun, device: Device, target: Compiled) -> list[tuple[Failure, str]]:
    """What XLA:TPU refused of the cell's programs when they were compiled for the chip here, in its own words, and
    the programs too large for its memory."""
    found: list[tuple[Failure, str]] = []
    memory = device.optional("memory_gb")
    for execution in cell.programs.executions if cell.programs is not None else ():
        compiled, program = target.compiled.get(execution.program), run.program(execution.program)
        function = (program.function if program is not None else None) or execution.program
        if compiled is None:
            continue
        if compiled.error is not None:
            message = compiled.error.split("\n", 1)[0].split(":     @", 1)[0].strip()
            found.append(
                (Failure("its compile for the TPU", message, f"XLA:TPU on this machine ({target.versions})"), function)
            )
        elif memory is not None and compiled.device_bytes is not None and compiled.device_bytes > memory.low * 2**30:
            needs = f"needs {units.size(compiled.device_bytes)} of device memory, the chip has {memory.text(' GiB')}"
            found.append(
                (Failure("its device memory", needs, f"XLA:TPU on this machine ({target.versions})"), function)
            )
    return found


def failures(
    cell: Cell, run: NotebookRun, device: Device, compiled_here: Compiled | None = None
) -> list[tuple[Failure, str]]:
    """The operations of ``cell`` that ``device`` cannot run, each with the function (or program) that calls it: as
    the compiler said where the cell's programs were compiled for it (``compiled_here``), else as known from the chip."""
    if device.platform != "tpu":
        return []
    if compiled_here is not None and any(
        e.program in compiled_here.compiled for e in (cell.programs.executions if cell.programs is not None else ())
    ):
        return _compiler_failures(cell, run, device, compiled_here)
    found: list[tuple[Failure, str]] = []
    for execution in cell.programs.executions if cell.programs is not None else ():
        program = run.program(execution.program)
        if program is None or not is_x64((), program.float_dtypes):
            continue
        calls = program.gpu.custom_calls if program.gpu is not None else {}
        for target in calls:
            failure = next((f for word, f in _TPU_CALLS.items() if word in target.lower()), None)
            if failure is not None and (failure, program.function or program.key or "?") not in found:
                found.append((failure, program.function or program.key or "?"))
    for function in cell.jax.functions if cell.jax is not None else ():
        failure = _TPU_FUNCTIONS[function.name] if function.name in _TPU_FUNCTIONS else None
        wide = failure is _FFT and any("complex128" in s or "float64" in s for s in function.shapes)
        if failure is not None and (wide or (failure is not _FFT and is_x64(function.shapes))):
            if all(f is not failure for f, _ in found):
                found.append((failure, function.name or "?"))
    return found


# What XLA:TPU's compile of one program costs depends on what the program computes more than on its size (measured
# on the v5e, 2026-12-06: tests/files/device/tpu_v5e/tpu_compile_ops.txt): a float64 power over 2,250
# elements or 2.25 M compiles for 7.8-9.8 s, a float64 reciprocal for 1.0 s, a float32 power for 3.6 s, and a float64
# multiply-and-reduce of 1.5 M elements for more than 40 s. So each compiled program is put in a class, each class
# with its own figures in the device table (``compile_each<suffix>``, ``compile_mean<suffix>``):
COMPILE_CLASSES = {
    "32-bit": "",  # no 64-bit values: most compile in a fraction of a second
    "64-bit operation": "_x64",  # JAX's eager operations and library calls on 64-bit values
    "64-bit program": "_x64_user",  # a jitted function on 64-bit values: emulated float64 reductions compile slowest
    "64-bit transcendental": "_x64_transcendental",  # float64 exp, log, power, erf_inv...: seconds each
}


def program_class(program: Program | None, kind: str | None, shapes: tuple[str, ...]) -> str:
    """The compile class of one compiled function: from its program where the run has program data (its dtypes
    and float64 transcendentals, loops' included), else from the shapes it was compiled for."""
    dtypes = program.float_dtypes if program is not None else ()
    if not is_x64(shapes, dtypes):
        return "32-bit"
    if program is not None:
        works = (program.entry, *(loop.per_iteration for loop in program.loops))
        if any((work.transcendentals_f64 or 0) > 0 for work in works):
            return "64-bit transcendental"
    return "64-bit program" if kind == "user" else "64-bit operation"


def compile_classes(cell: Cell, run: NotebookRun, compile_s: float) -> dict[str, tuple[int, float]]:
    """The cell's compiled programs by compile class, each class with its CPU compile seconds: each function JAX
    compiled, its program found by name among those the cell executed (the cell's compile its functions do not
    account for goes to the class with the most programs)."""
    classes: dict[str, tuple[int, float]] = {}
    if cell.jax is None:
        return classes
    programs = [run.program(e.program) for e in (cell.programs.executions if cell.programs is not None else ())]
    for function in cell.jax.functions:
        if function.compiles:
            program = next((p for p in programs if p is not None and p.function == function.name), None)
            name = program_class(program, function.kind, function.shapes)
            n, seconds = classes[name] if name in classes else (0, 0.0)
            classes[name] = (n + function.compiles, seconds + function.compile_s)
    rest = compile_s - sum(seconds for _, seconds in classes.values())
    if classes and rest > 0:
        most = max(classes, key=lambda name: classes[name][0])
        classes[most] = (classes[most][0], classes[most][1] + rest)
    return classes


def class_figure(device: Device, figure: str, name: str, *, fallback: bool = True) -> Figure | None:
    """A compile class's figure (``compile_each_s`` for 32-bit, ``compile_each_x64_s``...): the class's own, else
    (``fallback``) the device's figure without a class."""
    suffix = COMPILE_CLASSES[name]
    own = device.optional(f"{figure.removesuffix('_s')}{suffix}_s")
    return own if own is not None or not fallback else device.optional(figure)


def compile_term(cell: Cell, compile_s: float, run: NotebookRun, device: Device, table: DeviceTable) -> Term:
    """The cell's compile on ``device``: the CPU's compile times the device's ratio (its 64-bit ratio for programs
    with 64-bit values), at least the fixed cost of each compiled program by its class; a GPU without its own
    figures uses the table's gpu_compile_ratio."""
    ratio = device.optional("compile_ratio") or table.model["gpu_compile_ratio"]
    ratio_x64 = device.optional("compile_ratio_x64") or ratio
    shapes = [s for f in (cell.jax.functions if cell.jax is not None else ()) for s in f.shapes]
    programs = [run.program(e.program) for e in (cell.programs.executions if cell.programs is not None else ())]
    x64 = is_x64(shapes, tuple(d for p in programs if p is not None for d in p.float_dtypes))
    classes = compile_classes(cell, run, compile_s) if device.optional("compile_each_s") is not None else {}
    parts: tuple[ClassCompile, ...] = ()
    if not classes:
        used = ratio_x64 if x64 else ratio
        low, high = compile_s * used.low, compile_s * used.high
        words = f"XLA:{device.kind} compile: {units.seconds(compile_s)} on this CPU × {used.text()} ({used.basis})"
    else:
        ranges: list[tuple[ClassCompile, Figure]] = []
        for name, (n, seconds) in sorted(classes.items()):
            used = ratio if name == "32-bit" else ratio_x64
            each = class_figure(device, "compile_each_s", name)
            assert each is not None  # compile_each_s is there: ``classes`` is empty without it
            part = ClassCompile(name, n, max(seconds * used.low, n * each.low), seconds * used.high + n * each.high)
            ranges.append((part, each))
        parts = tuple(part for part, _ in ranges)
        low, high = sum(p.low_s for p in parts), sum(p.high_s for p in parts)
        used = ratio_x64 if x64 else ratio
        times = (
            used.text()
            if len({name == "32-bit" for name in classes}) == 1
            else f"{ratio.text()} (32-bit), {ratio_x64.text()} (64-bit)"
        )
        words = f"XLA:{device.kind} compile: {units.seconds(compile_s)} on this CPU × {times} ({used.basis}), at least "
        words += ", ".join(
            f"{p.programs} × {each.text(' s')}" + ("" if list(classes) == ["32-bit"] else f" ({p.name})")
            for p, each in ranges
        )
        words += " per compiled program"
    if x64 and device.platform == "tpu":
        wide = sum(sum(p.parameters_bytes) + (p.output_bytes or 0) for p in programs if p is not None)
        if wide:
            high += wide * _X64_COMPILE_S_PER_BYTE
            words += f"; 64-bit values ({units.size(wide)}) compile slower there"
    figures = CompileFigures(compile_s, used.basis, parts)
    return Term(kind="compile", low_s=low, high_s=high, words=words, figures=figures)


class Compiled(Protocol):
    """The run's programs compiled for the TPU here (``collect.target_compile.TargetCompiles``)."""

    compiled: dict[str, TargetCompile]
    guessed: dict[str, str]
    versions: str | None


def target_notes(target: Compiled | None) -> list[str]:
    """What was compiled for the TPU here, and which programs' compile was guessed, and why."""
    if target is None:
        return []
    failed = sum(1 for c in target.compiled.values() if c.error is not None)
    notes = [
        f"{len(target.compiled)} programs compiled for the TPU on this machine ({target.versions or 'no compiler'}), "
        f"{failed} refused by the compiler"
    ]
    reasons: dict[str, int] = {}
    for why in target.guessed.values():
        reasons[why] = reasons.get(why, 0) + 1
    notes += [
        f"{n} program{'s' if n != 1 else ''}' TPU compile guessed from its class: {why}" for why, n in reasons.items()
    ]
    return notes


def measured_compile_term(
    cell: Cell, run: NotebookRun, device: Device, table: DeviceTable, target: Compiled
) -> Term | None:
    """The cell's compile on the TPU from its programs compiled for it here: JAX's trace and lowering as the CPU
    run measured them, and XLA:TPU's compile of each program the cell compiled (first ran) as measured here, times
    the factor from this machine to the chip's host (``target_compile_factor``); programs not compiled here keep
    their class's guess. None: no program of the cell was compiled here."""
    factor = device.optional("target_compile_factor")
    programs = [p for p in (run.program_data.programs if run.program_data else {}).values()]
    mine = [p for p in programs if p.first_cell == cell.index and p.key is not None]
    measured = [target.compiled[p.key] for p in mine if p.key in target.compiled]
    seconds = sum(c.compile_cpu_s if c.compile_cpu_s is not None else (c.compile_s or 0.0) for c in measured)
    if factor is None or not measured or cell.jax is None:
        return None
    jax_s = cell.jax.trace_s + cell.jax.lower_s  # JAX's own part, which the chip's host does as the CPU did
    guessed = [p for p in mine if p.key not in target.compiled]
    low, high = jax_s + seconds * factor.low, jax_s + seconds * factor.high
    words = (
        f"XLA:{device.kind} compile of {len(measured)} program{'s' if len(measured) != 1 else ''} measured on this "
        f"machine ({units.seconds(seconds)} of CPU, {target.versions}) × {factor.text()} ({factor.basis}), and JAX's trace "
        f"and lowering as on the CPU ({units.seconds(jax_s)})"
    )
    if guessed:
        share = cell.jax.backend_s * len(guessed) / len(mine)
        guess = compile_term(cell, share, run, device, table)
        low, high = low + guess.low_s, high + (guess.high_s if guess.high_s is not None else guess.low_s)
        why = target.guessed.get(guessed[0].key or "", "not compiled here")
        words += f"; {len(guessed)} more guessed from their class ({why}): {units.seconds(guess.low_s)} or more"
    return Term(
        kind="compile", low_s=low, high_s=high, words=words, figures=CompileFigures(cell.jax.compile_s, "measured")
    )


def runtime_start_term(device: Device) -> Term | None:
    """Opening the device in the first cell that uses JAX (None: the table gives no figure for it)."""
    start: Figure | None = device.optional("runtime_start_s")
    if start is None:
        return None
    return Term(
        kind="runtime",
        low_s=start.low,
        high_s=start.high,
        words=f"opening the {device.kind} runtime, once per kernel: {start.text(' s')} ({start.basis})",
    )
