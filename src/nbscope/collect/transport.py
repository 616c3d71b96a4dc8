"""Which ZMQ transport a kernel talks over: ``tcp`` on the loopback where it works, ``ipc`` (unix sockets)
where it does not.

Sandboxes that allow no inet socket at all (gVisor-style accelerator machines, locked-down CI, HPC nodes) or
whose loopback is down (``unshare -n``) cannot run a Jupyter kernel over TCP. jupyter_client and ipykernel
both speak ``ipc``, but two parts still reach for TCP there: jupyter_client's default ``ip`` for ``ipc`` is a
path relative to the working folder (``kernel-ipc-N`` files in the user's notebook folder), and ipykernel's
IOPub thread binds a ``tcp://127.0.0.1`` pipe for forked subprocesses, which libzmq aborts on
(``ip_resolver.cpp``: it lists the network interfaces through a netlink socket the sandbox refuses). The
kernel-side part is patched by ``_nbscope_ipc.py``, installed as the kernel's ``sitecustomize`` (chained to
any the environment has) only when ``ipc`` is chosen.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from typing import Any

# tcp, ipc, or auto (the default): ipc only where a loopback TCP round trip fails.
TRANSPORT_VARIABLE = "NBSCOPE_KERNEL_TRANSPORT"
TRANSPORTS = ("tcp", "ipc")


@functools.cache
def loopback_tcp_works(timeout_s: float = 2.0) -> bool:
    """Whether a TCP connection to a listening socket on 127.0.0.1 goes through (what a kernel needs); asked once
    a process (an audit starts many kernels)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=timeout_s):
                return True
    except OSError:  # no inet sockets at all (EAFNOSUPPORT, EPERM), or the loopback is down (ENETUNREACH)
        return False


def choose(env: dict[str, str] | None = None) -> str:
    """The transport kernels of this run use: ``NBSCOPE_KERNEL_TRANSPORT`` when it names one, else ``tcp``
    where the loopback works and ``ipc`` where it does not. Any other value (a typo: ``icp``), or ``tcp`` where no
    loopback connection goes through (a kernel would wait out its start-up time, minutes), is one line."""
    from nbscope._errors import NbscopeError

    environ = env if env is not None else os.environ
    wanted = (environ[TRANSPORT_VARIABLE].strip().lower() if TRANSPORT_VARIABLE in environ else "") or "auto"
    if wanted not in (*TRANSPORTS, "auto"):
        shown = environ[TRANSPORT_VARIABLE][:40]
        raise NbscopeError(f"{TRANSPORT_VARIABLE}={shown!r}: use tcp, ipc or auto (the default: tcp where it works)")
    if wanted == "tcp" and not loopback_tcp_works():
        raise NbscopeError(
            f"{TRANSPORT_VARIABLE}=tcp: no TCP connection to 127.0.0.1 goes through here, so a kernel cannot start "
            "over tcp; use ipc, or unset it"
        )
    return wanted if wanted in TRANSPORTS else "tcp" if loopback_tcp_works() else "ipc"


def ipc_folder(root: Path) -> Path:
    """A folder for ipc socket files under ``root``, short enough for a unix socket's 107-byte path."""
    folder = root / "ipc"
    if len(str(folder)) > 80:  # a deep temporary folder: unix socket paths are limited to 107 bytes
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="nbs-ipc-", dir="/tmp" if os.path.isdir("/tmp") else None))
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def client_config(transport: str, folder: Path) -> Any:
    """The traitlets configuration of a kernel manager that starts its kernel over ``transport`` (``ipc``:
    its socket files in ``folder``, one prefix per kernel)."""
    import uuid

    from traitlets.config import Config

    if transport != "ipc":
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "ip": str(folder / f"k{uuid.uuid4().hex[:8]}")}})
