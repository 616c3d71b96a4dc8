"""Compile a run's programs for a TPU on the machine at hand: what XLA:TPU's compile costs, what the compiler says
each program costs the chip, and which ones it refuses, measured instead of guessed.

The kernel kept each program as the StableHLO module XLA:CPU compiled (or, where JAX lowers it otherwise for a
TPU, lowered again for the TPU: ``probe/_nbscope_program.py``). Here each module is compiled by XLA:TPU for a
topology with no chip present, in nbscope's *target environment*: a virtual environment of its own in the cache
(``environments.ensure``) holding ``jax[tpu]`` at the notebook's jax version (jaxlib and the libtpu that jax
release pins), installed from the package index by ``nbscope target-env tpu --install``. Compiles run in parallel,
one worker process per core (``_target_worker.py``, which imports only JAX), under a time budget; each result is
cached by the module's hash, the topology and libtpu, so a second forecast of the same run reads them back.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nbscope.collect import environments
from nbscope.schema.codec import decode
from nbscope.schema.programs import Program, TargetCompile

TOPOLOGY = "v5e:1x1"  # the lent chip: one TPU v5e (``v5e:1x1`` needs its chips per host given)
CHIPS_PER_HOST = "1,1,1"
WORKER = Path(__file__).with_name("_target_worker.py")
ProgressCallback = Callable[[str], None]


def requirements(jax_version: str) -> tuple[str, ...]:
    """What the target environment holds: JAX's ``tpu`` extra pins jaxlib and the libtpu of that release."""
    return (f"jax[tpu]=={jax_version}",)


def environment(jax_version: str, *, install: bool, on_progress: ProgressCallback | None = None) -> Path | None:
    """The target environment's Python for ``jax_version``: found complete in the cache, else (``install``) built
    from the package index; None when it is absent and not installed."""
    spec = environments.EnvironmentSpec(requirements(jax_version))
    path = environments.default_cache_root() / spec.key()
    if not install and not environments.is_complete(path):
        return None
    return environments.ensure(spec, on_progress=on_progress).path / "bin" / "python"


def cache_folder() -> Path:
    return environments.default_cache_root().parent / "target-compiles"


@dataclass
class TargetCompiles:
    """A run's programs compiled for the target: each one's result by program key, and why the rest were not."""

    topology: str
    compiled: dict[str, TargetCompile] = field(default_factory=dict)
    guessed: dict[str, str] = field(default_factory=dict)  # program key → why it was not compiled
    cached: int = 0  # of ``compiled``, read back from the cache
    seconds: float = 0.0  # the compiling's wall time here
    versions: str | None = None  # "jax 0.10.2, libtpu 0.0.42.1"

    @classmethod
    def from_document(cls, text: str) -> TargetCompiles:
        """A run's compiles saved as JSON (``benchmarks/target_check.py --save`` writes them), read back."""
        document: dict[str, dict[str, dict[str, object]] | str | None] = json.loads(text)
        compiled, guessed, topology, versions = (
            document.get(k) for k in ("compiled", "guessed", "topology", "versions")
        )
        results = {
            key: decode(TargetCompile, value) for key, value in (compiled if isinstance(compiled, dict) else {}).items()
        }
        why = {key: str(value) for key, value in (guessed if isinstance(guessed, dict) else {}).items()}
        return cls(str(topology), results, why, versions=versions if isinstance(versions, str) else None)


def _cache_path(module: str, versions: str, folder: Path) -> Path:
    digest = hashlib.sha256(f"{TOPOLOGY}\n{versions}\n{module}".encode()).hexdigest()
    return folder / digest[:2] / f"{digest}.json"


def compile_programs(
    programs: Mapping[str, Program],
    python: Path | None,
    *,
    budget_s: float,
    workers: int | None = None,
    on_progress: ProgressCallback | None = None,
    cache: Path | None = None,
) -> TargetCompiles:
    """Compile each program's kept module for the TPU (``python``: the target environment's; None: absent), at most
    ``budget_s`` seconds of wall time; what could not be compiled is named with the reason."""
    result = TargetCompiles(TOPOLOGY)
    modules: dict[str, str] = {}
    for key, program in programs.items():
        target = program.target
        if target is None or (target.module is None and target.lowering_error is None):
            result.guessed[key] = "the kernel kept no module of it (compiled before nbscope's hook, or an older probe)"
        elif target.lowering_error is not None:
            result.compiled[key] = TargetCompile(None, None, None, None, None, None, None, target.lowering_error)
        elif target.module is not None:
            modules[key] = target.module
    if not modules:
        return result
    if python is None:
        for key in modules:
            result.guessed[key] = "no target environment (`nbscope target-env tpu --install` makes one)"
        return result
    started = time.perf_counter()
    versions = _versions(python)
    result.versions = versions
    folder = cache or cache_folder()
    pending: list[tuple[str, str]] = []
    for key, module in modules.items():
        path = _cache_path(module, versions, folder)
        if path.is_file():
            result.compiled[key] = decode(TargetCompile, json.loads(path.read_text()))
            result.cached += 1
        else:
            pending.append((key, module))
    if pending:
        _run_workers(pending, python, (versions, folder), budget_s, workers or os.cpu_count() or 1, result, on_progress)
    result.seconds = time.perf_counter() - started
    return result


def _versions(python: Path) -> str:
    script = "import importlib.metadata as m; print(f\"jax {m.version('jax')}, libtpu {m.version('libtpu')}\")"
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def _run_workers(
    pending: list[tuple[str, str]],
    python: Path,
    cached_as: tuple[str, Path],
    budget_s: float,
    workers: int,
    result: TargetCompiles,
    on_progress: ProgressCallback | None,
) -> None:
    """Compile ``pending`` in ``workers`` processes, largest modules first spread round-robin; stop them all when
    the budget is spent, naming each program left."""
    pending.sort(key=lambda item: len(item[1]), reverse=True)
    shards = [pending[i::workers] for i in range(min(workers, len(pending)))]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # libtpu lets one process at a time load it (a lock file in /tmp), even to compile with no chip: without this
    # the second worker aborts ("Internal error when accessing libtpu multi-process lockfile").
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    selector = selectors.DefaultSelector()
    processes = []
    errors = tempfile.TemporaryFile()  # the workers' own words, for a worker that ends early
    for shard in shards:
        process = subprocess.Popen(
            [str(python), str(WORKER), TOPOLOGY, CHIPS_PER_HOST],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=env,
            start_new_session=True,
        )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("".join(json.dumps({"key": key, "module": module}) + "\n" for key, module in shard))
        process.stdin.close()
        selector.register(process.stdout, selectors.EVENT_READ)
        processes.append(process)
    left = {key for key, _ in pending}
    modules = dict(pending)
    deadline = time.monotonic() + budget_s
    try:
        while left and selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for ready, _ in selector.select(timeout=min(remaining, 1.0)):
                line = ready.fileobj.readline()  # type: ignore[union-attr]
                if not line:
                    selector.unregister(ready.fileobj)
                    continue
                item = json.loads(line)
                if "key" not in item or item["key"] not in left:
                    continue
                left.discard(item["key"])
                compiled = decode(TargetCompile, item)
                result.compiled[item["key"]] = compiled
                path = _cache_path(modules[item["key"]], *cached_as)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(item))
                if on_progress is not None:
                    done = len(pending) - len(left)
                    on_progress(f"compiled for the TPU: {done}/{len(pending)} programs")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        errors.seek(0)
        said = [line for line in errors.read().decode("utf-8", "replace").splitlines() if "Error" in line]
        errors.close()
    for key in left:
        result.guessed[key] = (
            f"the compile budget ({budget_s:.0f} s) ran out first (`--compile-budget` gives more)"
            if time.monotonic() >= deadline
            else f"the compiler stopped before it: {said[-1] if said else 'its worker ended'}"
        )
