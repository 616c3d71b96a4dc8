"""Writes the small diag_*.ipynb notebooks that tests/test_diagnose_*.py profile (run once: python make_diag_notebooks.py).

Each pattern comes as a pair: the notebook that shows it and a corrected (or clean) one on which the
rule must not fire.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

IMPORTS = "import jax\nimport jax.numpy as jnp"

RECORD_PATHS = (
    "_work = {}\n"
    "\n"
    "def record_paths(n_paths, n_steps, every=512):\n"
    '    """Every `every`-th step of n_paths paths, in three work arrays made by the first call and reused."""\n'
    "    key = (n_paths, n_steps)\n"
    "    if key not in _work:\n"
    "        _work[key] = [np.empty((n_paths, n_steps)) for _ in range(3)]\n"
    "    level, drift, noise = _work[key]\n"
    "    for value, out in enumerate((level, drift, noise)):\n"
    "        out[:, ::every] = value  # one write per 4 KiB page\n"
    "    return level[:, ::every].sum()"
)

NOTEBOOKS: dict[str, list[str]] = {
    # A Python loop of 200 steps inside jit: traced 200 times, compile grows with the length.
    "diag_unrolled_loop": [
        IMPORTS,
        "@jax.jit\n"
        "def simulate(x):\n"
        "    # a Python loop inside jit: unrolled into 200 copies of the body\n"
        "    for t in range(200):\n"
        "        x = 0.9 * jnp.sin(x) + 0.1 * x * x\n"
        "    return x\n"
        "\n"
        "y = simulate(jnp.ones(1000)).block_until_ready()",
    ],
    "diag_unrolled_loop_fixed": [
        IMPORTS,
        "@jax.jit\n"
        "def simulate(x):\n"
        "    def step(t, x):\n"
        "        return 0.9 * jnp.sin(x) + 0.1 * x * x\n"
        "    return jax.lax.fori_loop(0, 200, step, x)\n"
        "\n"
        "y = simulate(jnp.ones(1000)).block_until_ready()",
    ],
    # The issue-15 pattern: cells before and after set n = 50_000_000; the cell that defines the jitted function
    # sets n = 20 first (in a tuple, as the real lecture does), so the default `n=n` (evaluated when the def runs),
    # and the loop, has 20 steps.
    "diag_shadowed_default": [
        IMPORTS,
        'n = 50_000_000  # draws for a Monte Carlo estimate elsewhere in the lecture\nprint(f"{n:,} draws")',
        "n, β = 20, 0.9  # as jax_intro.md's exercise sets its parameters\n"
        "\n"
        "@jax.jit\n"
        "def iterate(x, β=β, n=n):\n"
        "    for t in range(n):\n"
        "        x = β * jnp.sin(x) + 0.1 * x * x\n"
        "    return x\n"
        "\n"
        "y = iterate(jnp.ones(1000)).block_until_ready()",
        "n = 50_000_000  # the Monte Carlo again, later in the lecture: the last `n` of the notebook\n"
        'print(f"{n:,} draws")',
    ],
    # A loop whose length is a static argument: each call with a new length compiles a new, longer program.
    "diag_static_loop": [
        IMPORTS + "\nfrom functools import partial",
        "steps = 5_000  # a different `steps` elsewhere in the lecture\ngrid = jnp.linspace(0.0, 1.0, 1000)",
        '@partial(jax.jit, static_argnames=("steps",))\n'
        "def iterate(x, steps):\n"
        "    for t in range(steps):\n"
        "        x = 0.9 * jnp.sin(x) + 0.1 * x * x\n"
        "    return x\n"
        "\n"
        "y = iterate(grid, 30).block_until_ready()",
        "y = iterate(grid, steps=60).block_until_ready()",
    ],
    # Timing JAX work without waiting for it.
    "diag_unsync_timing": [
        "import time\nimport numpy as np\n" + IMPORTS,
        "@jax.jit\n"
        "def step(a):\n"
        "    return jnp.tanh(a @ a)\n"
        "\n"
        "a = jnp.ones((300, 300)) / 300\n"
        "step(a).block_until_ready()  # compile outside the timing",
        "start = time.perf_counter()\n"
        "b = step(a)\n"
        "elapsed = time.perf_counter() - start\n"
        'print(f"step: {elapsed * 1e3:.3f} ms")',
        "%timeit -n 5 -r 1 step(a)",
        "# NumPy is synchronous: timing it this way is fine\n"
        "m = np.ones((300, 300))\n"
        "start = time.perf_counter()\n"
        "n = np.tanh(m @ m)\n"
        'print(f"numpy: {(time.perf_counter() - start) * 1e3:.3f} ms")',
    ],
    "diag_unsync_timing_fixed": [
        "import time\nimport numpy as np\n" + IMPORTS,
        "@jax.jit\n"
        "def step(a):\n"
        "    return jnp.tanh(a @ a)\n"
        "\n"
        "a = jnp.ones((300, 300)) / 300\n"
        "step(a).block_until_ready()  # compile outside the timing",
        "start = time.perf_counter()\n"
        "b = step(a).block_until_ready()\n"
        "elapsed = time.perf_counter() - start\n"
        'print(f"step: {elapsed * 1e3:.3f} ms")',
        "%timeit -n 5 -r 1 step(a).block_until_ready()",
        "# NumPy is synchronous: timing it this way is fine\n"
        "m = np.ones((300, 300))\n"
        "start = time.perf_counter()\n"
        "n = np.tanh(m @ m)\n"
        'print(f"numpy: {(time.perf_counter() - start) * 1e3:.3f} ms")',
    ],
    # One function compiled for eight shapes; a lambda jitted anew on every call.
    "diag_retrace": [
        "import numpy as np\n" + IMPORTS,
        "@jax.jit\ndef normalise(x):\n    return (x - x.mean()) / x.std()",
        "# a new length on every call: one compile per shape\n"
        "for n in range(100, 108):\n"
        "    normalise(np.linspace(0, 1, n, dtype=np.float32)).block_until_ready()",
        "# a jitted lambda created anew on every call: it never hits the compile cache\n"
        "x = jnp.ones(100)\n"
        "for i in range(5):\n"
        "    y = jax.jit(lambda v: v * 2.0 + 1.0)(x)",
    ],
    "diag_retrace_fixed": [
        "import numpy as np\n" + IMPORTS,
        "@jax.jit\ndef normalise(x):\n    return (x - x.mean()) / x.std()",
        "# one shape for every call: one compile\n"
        "for n in range(100, 108):\n"
        "    normalise(np.linspace(0, n, 128, dtype=np.float32)).block_until_ready()",
        "# the jit created once, outside the loop\n"
        "double = jax.jit(lambda v: v * 2.0 + 1.0)\n"
        "x = jnp.ones(100)\n"
        "for i in range(5):\n"
        "    y = double(x)",
    ],
    # Eager operations on a new shape per iteration: each op compiles again for each shape.
    "diag_eager_flood": [
        IMPORTS,
        "total = 0.0\n"
        "for n in range(1, 11):\n"
        "    v = jnp.ones(n) * 2.0 + 1.0\n"
        "    total += float(jnp.sum(v * v))\n"
        "print(total)",
    ],
    "diag_eager_flood_fixed": [
        IMPORTS,
        "@jax.jit\n"
        "def term(v, n):\n"
        "    w = jnp.where(jnp.arange(v.shape[0]) < n, v * 2.0 + 1.0, 0.0)\n"
        "    return jnp.sum(w * w)\n"
        "\n"
        "v = jnp.ones(10)\n"
        "total = sum(float(term(v, n)) for n in range(1, 11))\n"
        "print(total)",
    ],
    # Real compiles worth caching (linear algebra compiles take ~0.2-1 s each on a small CPU).
    "diag_cold_cache": [
        IMPORTS,
        "@jax.jit\n"
        "def solve(a, b):\n"
        "    return jnp.linalg.solve(a, b)\n"
        "\n"
        "@jax.jit\n"
        "def spectrum(a):\n"
        "    return jnp.linalg.eigh(a)[0]\n"
        "\n"
        "@jax.jit\n"
        "def inverse(a):\n"
        "    return jnp.linalg.inv(a)\n"
        "\n"
        "a = jnp.eye(50) * 2.0\n"
        "b = jnp.ones(50)\n"
        "x = solve(a, b).block_until_ready()\n"
        "w = spectrum(a).block_until_ready()\n"
        "ai = inverse(a).block_until_ready()",
    ],
    # A notebook so small that importing JAX and the first PRNG call are most of its time.
    "diag_first_call": [IMPORTS, "key = jax.random.key(0)\nx = jax.random.normal(key, (100,))\nprint(float(x.mean()))"],
    # Its real work lasts four times what importing JAX and the first operations took before it, whatever
    # the machine's speed: the first-call share stays below 20 %.
    "diag_first_call_clean": [
        "import time\n\nstarted = time.perf_counter()",
        IMPORTS,
        "x = jnp.arange(10.0)\nprint(float(x.sum()))",
        "# the notebook's real work (a stand-in for a long computation)\n"
        "time.sleep(max(5.0, 4 * (time.perf_counter() - started)))",
    ],
    # lax.scan with a tiny body: cheap on a CPU, latency-bound on a GPU (GPU figures are synthetic).
    "diag_latency_loop": [
        IMPORTS + "\nfrom functools import partial\nfrom jax import lax",
        "@partial(jax.jit, static_argnums=(1,))\n"
        "def logistic_path(x0, n, r=3.9):\n"
        "    def update(x, _):\n"
        "        x = r * x * (1 - x)\n"
        "        return x, x\n"
        "    _, path = lax.scan(update, x0, None, length=n)\n"
        "    return path",
        "path = logistic_path(0.2, 1_000_000).block_until_ready()",
        "path = logistic_path(0.2, 1_000_000).block_until_ready()",
        "@jax.jit\n"
        "def bump(x):\n"
        "    return jnp.max(jnp.cos(x ** 2) / (1 + x ** 2))\n"
        "\n"
        "grid = jnp.linspace(-3, 3, 4_000_000)\n"
        "m = bump(grid).block_until_ready()",
        "m = bump(grid).block_until_ready()",
    ],
    # One compile, then real work: compile is a small share of the cell (clean for compile-bound). The work
    # goes on for five times the first call (its compiles included), so the share stays below 20 % on a
    # machine whose matrix products are fast next to its compiler, too.
    "diag_compute_bound": [
        "import time\n" + IMPORTS,
        "@jax.jit\n"
        "def power_step(m):\n"
        "    return jnp.tanh(m @ m)\n"
        "\n"
        "start = time.perf_counter()\n"
        "m = jnp.ones((1000, 1000)) / 1000\n"
        "m = power_step(m).block_until_ready()\n"
        "first = time.perf_counter() - start\n"
        "steps = 1\n"
        "while steps < 30 or time.perf_counter() - start < 5 * first:\n"
        "    m = power_step(m).block_until_ready()\n"
        "    steps += 1",
    ],
    # Numba functions compiled in every run (no cache=True) and the same with cache=True.
    "diag_numba_cache": [
        "import numpy as np\nimport numba",
        "@numba.njit\n"
        "def logistic(x0, n):\n"
        "    x = np.empty(n)\n"
        "    x[0] = x0\n"
        "    for t in range(n - 1):\n"
        "        x[t + 1] = 3.9 * x[t] * (1 - x[t])\n"
        "    return x\n"
        "\n"
        "@numba.njit\n"
        "def mean(x):\n"
        "    total = 0.0\n"
        "    for value in x:\n"
        "        total += value\n"
        "    return total / len(x)\n"
        "\n"
        "print(mean(logistic(0.2, 100_000)))",
    ],
    "diag_numba_cache_fixed": [
        "import numpy as np\nimport numba",
        "@numba.njit(cache=True)\n"
        "def logistic(x0, n):\n"
        "    x = np.empty(n)\n"
        "    x[0] = x0\n"
        "    for t in range(n - 1):\n"
        "        x[t + 1] = 3.9 * x[t] * (1 - x[t])\n"
        "    return x\n"
        "\n"
        "@numba.njit(cache=True)\n"
        "def mean(x):\n"
        "    total = 0.0\n"
        "    for value in x:\n"
        "        total += value\n"
        "    return total / len(x)\n"
        "\n"
        "print(mean(logistic(0.2, 100_000)))",
    ],
    # A library's Numba function (numba_tables/, beside the notebook) compiled on its first call: the fix belongs
    # in the notebook cell that calls it, never in the library's decorator.
    "diag_library_numba": [
        "import numpy as np\nimport numba_tables as nt",
        "# the library compiles its Numba kernel on this first call\nP = nt.decay_matrix(200)\nprint(P.shape)",
        "P = nt.decay_matrix(300)  # same argument types: no compile",
    ],
    # A first call slowed by first-touch allocation: it allocates three 500 MB work arrays (kept for later calls)
    # and writes one value per 4 KiB page, so the operating system maps and zeroes 1.5 GB; the identical call in
    # the next cell finds the pages mapped. Sized for CI machines (24 GiB) and far from noise: zeroing 1.5 GB takes
    # tens of times longer than the repeat's scattered writes on any machine.
    "diag_slow_first_call": [
        "import numpy as np",
        RECORD_PATHS,
        "# the first call: allocates and touches 1.5 GB of work arrays\ntotal = record_paths(500, 125_000)",
        "# the same call again: the work arrays exist\ntotal = record_paths(500, 125_000)",
    ],
    # The same call, the work arrays allocated and touched in a setup cell: the first call is as fast as its repeat
    # (each also waits 0.5 s, a stand-in for a simulation's steady work, so that noise cannot double either).
    "diag_slow_first_call_clean": [
        "import time\nimport numpy as np",
        RECORD_PATHS.replace(
            "    return level[:, ::every].sum()",
            "    time.sleep(0.5)  # stands in for the steady work of each call\n    return level[:, ::every].sum()",
        ),
        "# the work arrays, allocated and written before the calls\n"
        "_work[(500, 125_000)] = [np.full((500, 125_000), 0.0) for _ in range(3)]",
        "total = record_paths(500, 125_000)",
        "total = record_paths(500, 125_000)",
    ],
    # A table built on the first run and read back by later runs (`--repeat` runs each in a fresh kernel): only the
    # first run pays for it. DIAG_DATA_DIR keeps the file out of the source tree.
    "diag_first_run_data": [
        "import os\nimport pathlib\nimport time\nimport numpy as np",
        'path = pathlib.Path(os.environ.get("DIAG_DATA_DIR", ".")) / "table.npy"\n'
        "if path.exists():\n"
        "    table = np.load(path)\n"
        "else:\n"
        "    time.sleep(1.0)  # stands in for an expensive computation of the table\n"
        "    table = np.arange(1_000.0)\n"
        "    np.save(path, table)",
        "print(table.sum())",
    ],
    # float64 throughout (GPU figures are synthetic: a T4 has 1/32-rate float64).
    "diag_x64": [
        'import jax\njax.config.update("jax_enable_x64", True)\nimport jax.numpy as jnp',
        "@jax.jit\n"
        "def smooth(x):\n"
        "    return jnp.cumsum(jnp.sin(x) * jnp.cos(x)) / x.size\n"
        "\n"
        "x = jnp.linspace(0, 10, 2_000_000)\n"
        "y = smooth(x).block_until_ready()",
        "y = smooth(x).block_until_ready()",
    ],
}


def write_all() -> None:
    for name, cells in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
        for index, cell in enumerate(nb.cells):
            cell["id"] = f"{name.replace('_', '-')}-{index}"  # stable ids: regenerating gives identical files
        nbformat.write(nb, HERE / f"{name}.ipynb")


if __name__ == "__main__":
    write_all()
