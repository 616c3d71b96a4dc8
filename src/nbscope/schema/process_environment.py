"""The process environment, typed: every variable nbscope reads (outside the in-kernel probe and the workers that
run without nbscope), decoded at once by ``read()`` where a command needs one, then read as attributes.

Each value is kept as the environment holds it: absent reads as None, and an empty value stays "" (an empty
``CUDA_VISIBLE_DEVICES`` hides every GPU; an empty ``NBSCOPE_DB`` is no store); what each means is its
reader's. ``read()`` decodes the environment as it is now, not as it was at start-up: ``--label`` sets
``NBSCOPE_LABEL`` for the length of a command, and a test sets what it needs. An environment built for a child
process stays a mapping (the child needs all of it); ``read(env)`` decodes one to see what it sets.

The variables nbscope sets for the probe (``NBSCOPE_PROBE_*``) are the probe's to read, and
``NBSCOPE_CGROUP`` is read by ``nbscope._processes``, below the stages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from nbscope.schema.codec import Read, decode

RUNS_ON_PREFIX = "RUNS_ON_"  # the labels of a runs-on (GitHub Actions) runner


def _search_path(value: object) -> str:
    """``PATH``, or the system's default where it is absent (what ``shutil.which`` and exec search then)."""
    return value if isinstance(value, str) else os.defpath


def _nvml_mode(value: object) -> str:
    return value.lower() if isinstance(value, str) else "auto"


@dataclass(frozen=True, slots=True)
class Ci:
    """What a CI service says of the run: GitHub Actions' runner and workflow, or another's ``CI``."""

    github_actions: Annotated[str | None, Read(key="GITHUB_ACTIONS")]  # "true" on GitHub Actions
    runner_name: Annotated[str | None, Read(key="RUNNER_NAME")]
    runner_os: Annotated[str | None, Read(key="RUNNER_OS")]
    runner_arch: Annotated[str | None, Read(key="RUNNER_ARCH")]
    workflow: Annotated[str | None, Read(key="GITHUB_WORKFLOW")]
    run_id: Annotated[str | None, Read(key="GITHUB_RUN_ID")]
    repository: Annotated[str | None, Read(key="GITHUB_REPOSITORY")]
    sha: Annotated[str | None, Read(key="GITHUB_SHA")]
    runs_on: Mapping[str, str]  # every ``RUNS_ON_*`` variable, in the environment's order
    ci: Annotated[str | None, Read(key="CI")]  # set by most CI services

    @staticmethod
    def reshape(environ: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**environ, "runs_on": {k: v for k, v in environ.items() if k.startswith(RUNS_ON_PREFIX)}}


@dataclass(frozen=True, slots=True)
class ProcessEnvironment:
    """nbscope's settings and the platform's variables it reads, under names that say what they hold."""

    # nbscope's own settings
    store: Annotated[str | None, Read(key="NBSCOPE_DB")]  # the store commands use without --db
    label: Annotated[str | None, Read(key="NBSCOPE_LABEL")]  # the label of runs recorded now (--label sets it)
    cache_dir: Annotated[str | None, Read(key="NBSCOPE_CACHE_DIR")]  # nbscope's cache folder
    environments_dir: Annotated[str | None, Read(key="NBSCOPE_ENV_CACHE")]  # where made environments are kept
    running_dir: Annotated[str | None, Read(key="NBSCOPE_RUNNING_DIR")]  # where running probe homes are listed
    jupyter_book2: Annotated[str | None, Read(key="NBSCOPE_JUPYTER_BOOK2")]  # the jupyter-book 2 command to use
    myst: Annotated[str | None, Read(key="NBSCOPE_MYST")]  # the myst command to use
    devices_file: Annotated[str | None, Read(key="NBSCOPE_DEVICES")]  # the user's device table
    nvml: Annotated[str, Read(_nvml_mode, key="NBSCOPE_NVML")]  # auto (default), off or force, lower case
    # the platform's
    path: Annotated[str, Read(_search_path, key="PATH")]
    pythonpath: Annotated[str | None, Read(key="PYTHONPATH")]
    xdg_cache_home: Annotated[str | None, Read(key="XDG_CACHE_HOME")]
    xdg_config_home: Annotated[str | None, Read(key="XDG_CONFIG_HOME")]
    xdg_runtime_dir: Annotated[str | None, Read(key="XDG_RUNTIME_DIR")]
    jupyter_path: Annotated[str | None, Read(key="JUPYTER_PATH")]
    jupyter_config_path: Annotated[str | None, Read(key="JUPYTER_CONFIG_PATH")]
    cuda_visible_devices: Annotated[str | None, Read(key="CUDA_VISIBLE_DEVICES")]
    jax_platforms: Annotated[str | None, Read(key="JAX_PLATFORMS")]
    jax_platform_name: Annotated[str | None, Read(key="JAX_PLATFORM_NAME")]  # the older name of JAX_PLATFORMS
    jax_compilation_cache_dir: Annotated[str | None, Read(key="JAX_COMPILATION_CACHE_DIR")]
    xla_flags: Annotated[str | None, Read(key="XLA_FLAGS")]
    numba_num_threads: Annotated[str | None, Read(key="NUMBA_NUM_THREADS")]
    numba_threading_layer: Annotated[str | None, Read(key="NUMBA_THREADING_LAYER")]
    ci: Ci

    @staticmethod
    def reshape(environ: Mapping[str, Any]) -> Mapping[str, Any]:
        """The CI service's variables as one object (its own class reads them)."""
        return {**environ, "ci": environ}


def read(environ: Mapping[str, str] | None = None) -> ProcessEnvironment:
    """This process's environment now (``environ``: another one, such as one built for a child process)."""
    return decode(ProcessEnvironment, os.environ if environ is None else environ)
