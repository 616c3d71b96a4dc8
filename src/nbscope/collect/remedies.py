"""The remedies ``nbscope try`` applies to one cell without editing the notebook: each parsed from its short form
(``unroll:8``), checked against the cell's code and the run's backend (a one-line refusal where it cannot apply),
and turned into what the kernel runs just before and after the cell (silently: no cell of its own, outside the
cell's time) or the environment the trial's kernel starts with. The code run after the cell also writes the values
the cell binds to a file, the same on both sides of a trial, for :mod:`nbscope.analyse.trial` to compare."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field

from nbscope import _units as units
from nbscope._errors import NbscopeError
from nbscope.collect.cell_python import in_source_order, python_of

FORMS = "cpu, cpu:FUNCTION, unroll:K, xla-flags:FLAGS, x64:off, matmul-precision:highest|default, threads:N, cache:warm"
# Device placements: on a machine whose JAX runs on the CPU already they change nothing, so they are not tested.
PLACEMENTS = ("cpu",)
MAX_UNROLL = 100_000  # steps unrolled into one program: past this, XLA compiles for minutes (a loop's full unroll)
_FLAG = re.compile(r"--xla_[a-z0-9_]+(=\S+)?")
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMBA_NUM_THREADS",
)


@dataclass(frozen=True)
class Remedy:
    """One remedy, ready to run: ``before``/``after`` (code run around the cell; empty: none), ``env`` (the trial
    kernel's environment), ``primes_cache`` (a first, untimed kernel fills a compile cache) and ``whole_kernel``
    (it acts on every cell, not only the one tried)."""

    text: str
    kind: str
    before: str = ""
    after: str = ""
    env: dict[str, str] = field(default_factory=dict)
    primes_cache: bool = False
    whole_kernel: bool = False

    @property
    def placement(self) -> bool:
        return self.kind in PLACEMENTS


def parse(text: str, source: str, cell: int, backend: str | None, env: dict[str, str]) -> Remedy:
    """The remedy ``text`` names, for the code cell ``cell`` (1-based) with ``source``, on a run whose JAX used
    ``backend`` (cpu, gpu, tpu) in an environment with ``env``: a one-line NbscopeError where it cannot apply."""
    kind, _, arg = text.strip().partition(":")
    jax_needed = f"raise RuntimeError('JAX is not imported when cell {cell} starts (try a later cell)')"
    if kind == "cpu":
        if arg and arg not in called_names(source):
            calls = ", ".join(sorted(called_names(source))[:8]) or "none"
            raise NbscopeError(f"--remedy {text}: cell {cell} calls no function named {arg!r} (it calls: {calls})")
        if arg:
            return Remedy(text, kind, _jax(_ON_CPU.format(name=arg), jax_needed), _jax(_OFF_CPU, ""))
        # The cell's code on the CPU, and the arrays it reads there too: an array made on the TPU stays there, and
        # each operation on it under a CPU default device would copy it back first.
        before = _set("jax_default_device", "jax.devices('cpu')[0]") + _TO_CPU.format(names=read_names(source))
        return Remedy(text, kind, _jax(before, jax_needed), _jax(_UNSET + _BACK_FROM_CPU, ""))
    if kind == "unroll":
        if (steps := units.whole(arg, 1, MAX_UNROLL)) is None:
            raise NbscopeError(f"--remedy unroll: takes a whole number of steps from 1 to {MAX_UNROLL:,} (unroll:8)")
        return Remedy(text, kind, _jax(_UNROLL.format(k=steps), jax_needed), _jax(_ROLL, ""))
    if kind == "x64" and arg == "off":
        refuse = f"raise RuntimeError('float64 is off already when cell {cell} starts: nothing to turn off')"
        return Remedy(
            text,
            kind,
            _jax(
                f"if not jax.config.jax_enable_x64:\n        {refuse}\n" + _set("jax_enable_x64", "False"), jax_needed
            ),
            _jax(_UNSET, ""),
        )
    if kind == "matmul-precision" and arg in ("highest", "default"):
        return Remedy(text, kind, _jax(_set("jax_default_matmul_precision", repr(arg)), jax_needed), _jax(_UNSET, ""))
    if kind == "threads":
        cores = os.cpu_count() or 1
        if (count := units.whole(arg, 1, cores)) is None:
            raise NbscopeError(f"--remedy threads: takes a number from 1 to this machine's {cores} cores")
        threads = {name: str(count) for name in THREAD_VARIABLES}
        if count == 1:  # XLA's CPU backend has no thread count, only its Eigen pool on or off
            threads["XLA_FLAGS"] = _joined(env, "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
        return Remedy(text, kind, env=threads, whole_kernel=True)
    if kind == "xla-flags":
        return Remedy(text, kind, env=_xla_flags(text, arg, backend, env), whole_kernel=True)
    if kind == "cache" and arg == "warm":
        return Remedy(text, kind, primes_cache=True, whole_kernel=True)
    raise NbscopeError(f"--remedy {text!r} is not a remedy nbscope can try; use one of: {FORMS}")


def _xla_flags(text: str, arg: str, backend: str | None, env: dict[str, str]) -> dict[str, str]:
    """XLA_FLAGS (LIBTPU_INIT_ARGS for a TPU's flags) with the flags added: a flag for a platform
    the run did not use, or one that is not ``--xla_name[=value]``, refused."""
    flags = arg.split()
    if not flags:
        raise NbscopeError(
            f"--remedy {text}: give the flags after 'xla-flags:' (xla-flags:--xla_cpu_use_thunk_runtime=false)"
        )
    for flag in flags:
        if not _FLAG.fullmatch(flag):
            raise NbscopeError(f"--remedy {text}: {flag!r} is not an XLA flag (--xla_name or --xla_name=value)")
        platform = next((p for p in ("gpu", "tpu") if flag.startswith(f"--xla_{p}_")), None)
        if platform is not None and platform != backend:  # a CPU flag acts wherever JAX runs: its host backend
            where = f"the run's JAX used the {(backend or 'cpu').upper()}"
            raise NbscopeError(f"--remedy {text}: {flag} is a {platform.upper()} flag and {where}: it would do nothing")
    # libtpu compiles for the TPU and reads its flags from LIBTPU_INIT_ARGS; XLA_FLAGS keeps the host's (CPU, dumps).
    tpu = [f for f in flags if (backend == "tpu" and not f.startswith(("--xla_cpu_", "--xla_dump"))) or "_tpu_" in f]
    found = {"XLA_FLAGS": _joined(env, "XLA_FLAGS", *[f for f in flags if f not in tpu])}
    return found | ({"LIBTPU_INIT_ARGS": _joined(env, "LIBTPU_INIT_ARGS", *tpu)} if tpu else {})


def _joined(env: dict[str, str], name: str, *flags: str) -> str:
    """The run's value of ``name`` (else this process's) with ``flags`` after it."""
    known = env.get(name, os.getenv(name, ""))
    return " ".join([known, *flags]).strip()


def called_names(source: str) -> set[str]:
    """The names of the functions a cell calls (``f(...)``, ``obj.f(...)``), timed ones too (``%time f(x)``); none
    when it does not parse."""
    tree = python_of(source)
    if tree is None:
        return set()
    return {name for node in ast.walk(tree) if isinstance(node, ast.Call) and (name := _called(node.func))}


CLOCKS = ("time", "perf_counter", "monotonic", "process_time", "time_ns", "perf_counter_ns", "now", "default_timer")


def clock_names(source: str) -> list[str]:
    """The names a cell binds to clock readings (``start = time()``, ``elapsed = time() - start``,
    ``times.append(perf_counter() - t0)``): values that differ in every run, which no remedy is judged by. Only
    names the cell binds at its top level count (a function's locals are not values a trial compares)."""
    tree = python_of(source)
    if tree is None:
        return []
    found: dict[str, None] = {}
    for node in in_source_order(tree, into_scopes=False):
        value: ast.expr | None = None
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            value, targets = node.value, node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _APPENDS:
            value, targets = ast.Tuple(elts=list(node.args), ctx=ast.Load()), [node.func.value]
        if value is None:
            continue
        reads = list(ast.walk(value))
        if any(isinstance(n, ast.Call) and _called(n.func) in CLOCKS for n in reads) or any(
            isinstance(n, ast.Name) and n.id in found for n in reads
        ):
            for target in targets:
                while isinstance(target, (ast.Subscript, ast.Attribute)):  # `times[i] = ...` holds clock readings
                    target = target.value
                if isinstance(target, ast.Name):
                    found[target.id] = None
    bound = set(bound_names(source))
    return [name for name in found if name in bound]


_APPENDS = ("append", "extend", "insert")


def _called(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def read_names(source: str) -> list[str]:
    """The names a cell reads (``f(x[i])`` reads ``f``, ``x`` and ``i``; builtins too), each once; none when it does
    not parse."""
    tree = python_of(source)
    if tree is None:
        return []
    found = {node.id: None for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return list(found)


def bound_names(source: str) -> list[str]:
    """The names a cell assigns or changes at its top level (``x = ...``, ``a, b = ...``, ``x += ...``, ``a[i] = ...``,
    ``for i in``, ``with ... as f``), in order, timed statements too (``%%time``): the values a trial compares.
    Definitions and imports bind no value to compare."""
    tree = python_of(source)
    if tree is None:
        return []
    found: dict[str, None] = {}
    skip = (
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
        ast.Lambda,
        ast.ListComp,
        ast.SetComp,
        ast.DictComp,
        ast.GeneratorExp,
    )

    def visit(node: ast.AST) -> None:
        if isinstance(node, skip):
            return
        if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            while isinstance(node, (ast.Subscript, ast.Attribute)):  # ``a[0] = ...``, ``m.x = ...`` change ``a``, ``m``
                node = node.value
            if isinstance(node, ast.Name):
                found[node.id] = None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id != "_":
            found[node.id] = None
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return list(found)


def capture(names: list[str], path: str, notes: str = "{}") -> str:
    """Code run after the cell: the values of ``names`` as plain data (arrays as NumPy arrays, sequences and dicts
    element by element, anything else pickled, or why not) with ``notes`` (an expression), pickled to ``path``."""
    return _CAPTURE.format(names=names, path=path, notes=notes)


def _jax(body: str, missing: str) -> str:
    """``body`` in a function run once, with ``jax`` and the trial's state ``s`` (leaves no name behind); where JAX
    is not imported yet, ``missing`` runs instead (a refusal), or nothing."""
    lines = ["def _nbscope_trial():", "    import sys, types", "    if 'jax' not in sys.modules:"]
    lines += [
        f"        {missing or 'return'}",
        "    import jax",
        "    s = sys.modules.setdefault('_nbscope_trial', types.ModuleType('_nbscope_trial'))",
    ]
    lines += ["    " + line for line in body.strip("\n").split("\n")]
    return "\n".join([*lines, "_nbscope_trial(); del _nbscope_trial"])


def _set(name: str, value: str) -> str:
    return f"s.saved = ({name!r}, jax.config.{name})\njax.config.update({name!r}, {value})"


_UNSET = "if hasattr(s, 'saved'):\n    jax.config.update(*s.saved)\n    del s.saved"
_TO_CPU = """
ns, cpu = get_ipython().user_ns, jax.devices('cpu')[0]
s.moved = {{}}
for name in {names!r}:
    value = ns[name] if name in ns else None
    if isinstance(value, jax.Array) and not value.is_deleted() and any(d.platform != 'cpu' for d in value.devices()):
        s.moved[name] = (value, jax.device_put(value, cpu))
        ns[name] = s.moved[name][1]
"""
# Run after _UNSET: arrays the cell rebound on the CPU are put back on the run's default device.
_BACK_FROM_CPU = """
import numpy
ns = get_ipython().user_ns
for name, (value, copy) in getattr(s, 'moved', {}).items():
    if name in ns and ns[name] is copy:  # the cell left it as it was: the notebook's own array again
        ns[name] = value
    elif name in ns and isinstance(ns[name], jax.Array) and all(d.platform == 'cpu' for d in ns[name].devices()):
        ns[name] = jax.numpy.asarray(numpy.asarray(ns[name]))  # rebound on the CPU: back where the run keeps arrays
s.notes = {'moved': sorted(getattr(s, 'moved', {}))}
s.moved = {}  # the CPU copies are not kept alive past the cell
"""
_ON_CPU = """
s.calls = 0
def on_cpu(function):
    def call(*args, **kwargs):
        s.calls += 1
        saved = jax.config.jax_default_device
        jax.config.update('jax_default_device', jax.devices('cpu')[0])
        try:
            return function(*args, **kwargs)
        finally:
            jax.config.update('jax_default_device', saved)
    return call
import ast
class OnCpu(ast.NodeTransformer):
    def visit_Call(self, node):
        self.generic_visit(node)
        name = getattr(node.func, 'id', getattr(node.func, 'attr', None))
        if name == {name!r}:
            node.func = ast.Call(ast.Name('_nbscope_on_cpu', ast.Load()), [node.func], [])
        return node
shell = get_ipython()
shell.user_ns['_nbscope_on_cpu'] = on_cpu
s.transformer = OnCpu()
shell.ast_transformers.append(s.transformer)
"""
_OFF_CPU = """
shell = get_ipython()
if s.transformer in shell.ast_transformers:
    shell.ast_transformers.remove(s.transformer)
shell.user_ns.pop('_nbscope_on_cpu', None)
s.notes = {'calls': s.calls}
"""
_UNROLL = """
import functools
s.calls, s.originals = 0, {{'scan': jax.lax.scan, 'fori_loop': jax.lax.fori_loop}}
def unrolled(original):
    @functools.wraps(original)
    def call(*args, **kwargs):
        s.calls += 1
        if 'unroll' in kwargs:
            return original(*args, **kwargs)
        try:
            return original(*args, unroll={k}, **kwargs)
        except ValueError as error:  # fori_loop unrolls only a loop of known length
            if 'unroll' not in str(error):
                raise
            s.calls -= 1
            return original(*args, **kwargs)
    return call
ns = get_ipython().user_ns
s.rebound = {{}}
for name, original in s.originals.items():
    setattr(jax.lax, name, unrolled(original))
    for key, value in list(ns.items()):
        if value is original:
            s.rebound[key] = original
            ns[key] = getattr(jax.lax, name)
"""
_ROLL = """
for name, original in s.originals.items():
    setattr(jax.lax, name, original)
ns = get_ipython().user_ns
for key, original in s.rebound.items():
    ns[key] = original
s.notes = {'calls': s.calls}
"""
_CAPTURE = """
def _nbscope_trial():
    import pickle, sys
    np = sys.modules['numpy'] if 'numpy' in sys.modules else None
    ns = get_ipython().user_ns
    def plain(value, depth):
        if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
            return ('v', value)
        if np is not None and hasattr(value, '__array__') and (hasattr(value, 'dtype') or hasattr(value, 'to_numpy')):
            if getattr(value, 'nbytes', 0) > 2**28:
                return ('u', 'larger than 256 MiB: not compared')
            try:
                return ('a', np.asarray(value))
            except Exception as error:
                return ('u', 'not readable as an array (' + type(error).__name__ + ')')
        if isinstance(value, (list, tuple)) and depth < 3 and len(value) <= 1000:
            return ('s', [plain(item, depth + 1) for item in value])
        if isinstance(value, dict) and depth < 3 and len(value) <= 1000:
            return ('s', [('v', repr(key)) for key in value] + [plain(item, depth + 1) for item in value.values()])
        if callable(value) or isinstance(value, type(sys)):
            return ('f', type(value).__name__)
        try:
            return ('p', pickle.dumps(value))
        except Exception as error:
            return ('u', 'cannot be pickled (' + type(error).__name__ + ')')
    state = sys.modules['_nbscope_trial'] if '_nbscope_trial' in sys.modules else None
    notes = getattr(state, 'notes', {notes})
    values = {{name: plain(ns[name], 0) for name in {names!r} if name in ns}}
    with open({path!r}, 'wb') as out:
        pickle.dump({{'values': values, 'notes': notes}}, out)
_nbscope_trial(); del _nbscope_trial
"""
