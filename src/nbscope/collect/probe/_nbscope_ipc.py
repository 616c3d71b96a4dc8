"""Kernels and the tools that start them, over ``ipc`` where no inet socket works (``nbscope.collect.transport``).

nbscope copies this file as ``sitecustomize.py`` into the probe's folder on ``PYTHONPATH`` only when it chose
the ``ipc`` transport; every Python process of the run then imports it at start-up. It first runs the
environment's own ``sitecustomize`` (if any), then, lazily as each is imported, makes:
- ipykernel's IOPub pipe for forked subprocesses bind an ``ipc://`` socket instead of ``tcp://127.0.0.1``
  (libzmq aborts the whole kernel there when the sandbox refuses the netlink socket it lists interfaces with);
- jupyter_client's kernel managers (in a traced tool, e.g. jupyter-book) start kernels over ``ipc`` with their
  socket files in ``NBSCOPE_IPC_DIR``, not ``kernel-ipc-N`` files in the user's folder.
Standard library only; it imports neither ipykernel nor jupyter_client itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import uuid
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for types only: this file imports neither at run time
    from importlib.machinery import ModuleSpec

    from ipykernel.iostream import IOPubThread
    from jupyter_client.manager import KernelManager
    from zmq import Context, Socket

_HERE = os.path.dirname(os.path.abspath(__file__))
_FOLDER = os.environ.get("NBSCOPE_IPC_DIR", "/tmp")


def _chain_site_customisation() -> None:
    """Run the ``sitecustomize`` this file stands in front of, as Python would have."""
    if os.path.basename(__file__) != "sitecustomize.py":
        return
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # as site.py does: a broken customisation is reported, the process goes on
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}", file=sys.stderr)


def _ipc_pipe(iostream: ModuleType) -> None:
    thread = getattr(iostream, "IOPubThread", None)
    if thread is None or not hasattr(thread, "_setup_pipe_in") or not hasattr(thread, "_setup_pipe_out"):
        return

    def setup_pipe_in(self: IOPubThread) -> None:
        import zmq
        from zmq.eventloop.zmqstream import ZMQStream

        self._pipe_uuid = os.urandom(16)
        pipe_in = self.socket.context.socket(zmq.PULL)
        pipe_in.linger = 0
        address = f"ipc://{_FOLDER}/pipe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        setattr(self, "_nbscope_pipe", address)  # noqa: B010 (an attribute of nbscope's own on ipykernel's object)
        try:
            pipe_in.bind(address)
        except zmq.ZMQError:  # as ipykernel does when its pipe cannot bind: forked output is lost, the kernel runs
            self._pipe_flag = False
            pipe_in.close()
            return
        self._pipe_in = ZMQStream(pipe_in, self.io_loop)
        self._pipe_in.on_recv(self._handle_pipe_msg)

    def setup_pipe_out(self: IOPubThread) -> tuple[Context[Socket[bytes]], Socket[bytes]]:
        import zmq

        context: Context[Socket[bytes]] = zmq.Context()
        pipe_out: Socket[bytes] = context.socket(zmq.PUSH)
        pipe_out.linger = 3000
        pipe_out.connect(getattr(self, "_nbscope_pipe"))  # noqa: B009
        return context, pipe_out

    thread._setup_pipe_in, thread._setup_pipe_out = setup_pipe_in, setup_pipe_out


def _ipc_managers(manager_module: ModuleType) -> None:
    manager = getattr(manager_module, "KernelManager", None)
    if manager is None:
        return
    original = manager.__init__

    def init(self: KernelManager, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        if self.transport == "tcp":
            self.transport = "ipc"
            self.ip = f"{_FOLDER}/k{uuid.uuid4().hex[:8]}"

    manager.__init__ = init


_PATCHES = {"ipykernel.iostream": _ipc_pipe, "jupyter_client.manager": _ipc_managers}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch on a module right after it is first imported, without importing it earlier."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in _PATCHES:
            return None
        patch = _PATCHES[name]
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_chain_site_customisation()
if not any(isinstance(finder, _PatchAfterImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, _PatchAfterImport())
