"""What a run record keeps of the values given with ``--env NAME=VALUE``: never the value of a variable that
may hold a secret (``--env HF_TOKEN=...``), only its name and a short hash, so that ``compare`` can still say
that two runs were given different values. The kernel gets the real value; the record, the live file, every
listing and every export get ``hidden-hmac-1a2b3c4d:0123456789abcdef``.

Kept readable: the variables that change what a notebook measures and that nbscope's own analyses read
(``JAX_PLATFORMS``, ``JAX_ENABLE_X64``, ``XLA_PYTHON_CLIENT_MEM_FRACTION``, ``OMP_NUM_THREADS`` ...: the names
the machine fingerprint records from the process environment, :data:`nbscope.collect.fingerprint.RESULT_ENV_PREFIXES`),
unless the name itself says secret (``TOKEN``, ``SECRET``, ``PASSWORD``, ``KEY`` ...). ``--env-store-values``
keeps every value, for a store that stays on the user's machine.

A run stored by an nbscope older than this rule kept its values: the store hides them when it migrates
(store version 5), and every run added or imported goes through :func:`hide_stored_values` first, so an
old export imported again keeps no value either. A run recorded with ``--env-store-values`` keeps them.

The hash is keyed: HMAC-SHA256 with the run store's own random key (``meta.env_key``, made with the store,
never exported), 16 hex digits, after the key's id (8 hex digits of its SHA-256). Within one store the same
value hashes the same, so ``compare`` and ``history`` still tell equal from different; a record exported
from it hides even a short or guessable value from whoever tries candidates offline, since the key stays
behind. A run imported from another store keeps that store's hashes, which never equal this store's (the
key ids differ: ``history`` says so). Without a store (the API with ``store=None``) the key is this
process's own, random. The command line keeps only ``NAME=hidden-hmac-...`` under the same kind of key.

Older records and stores hold unkeyed ``hidden-sha256:`` prefixes (12 hex digits): they are kept as they
are and still compare among themselves.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets as random_source
from collections.abc import Mapping, Sequence

from nbscope._redact import SECRET_NAME

STORE_VALUES_FLAG = "--env-store-values"

# No markup characters: the marker reads the same in a terminal, in markdown (GitHub drops <...>) and in HTML.
HIDDEN = re.compile(r"hidden-sha256:[0-9a-f]{12}|hidden-hmac-[0-9a-f]{8}:[0-9a-f]{16}")
# The key of values hidden without a store: this process's own.
_PROCESS_KEY = random_source.token_bytes(32)


def new_key() -> bytes:
    """A fresh random key for a store's hidden values."""
    return random_source.token_bytes(32)


def key_id(key: bytes) -> str:
    """The short public name of a key (8 hex digits of its SHA-256): says which store hid a value."""
    return hashlib.sha256(key).hexdigest()[:8]


def hidden(value: str, key: bytes | None = None) -> str:
    """What is kept of a hidden value: its HMAC under ``key`` (the store's; None: this process's), marked
    with the key's id (a value already in a hidden form is kept)."""
    if HIDDEN.fullmatch(value):
        return value
    key = key or _PROCESS_KEY
    digest = hmac.new(key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:16]
    return f"hidden-hmac-{key_id(key)}:{digest}"


def signed(env: Mapping[str, str], key: bytes | None) -> dict[str, str]:
    """``settings.env_signed``: each ``--env NAME=VALUE`` as the record keeps it, hashed under the store's key. A
    rerun (``try``, ``gate --confirm``) gives a kernel a stored value only where it still matches (:func:`trusted`):
    a record is data, never instructions, unless this store recorded it so."""
    return {name: hidden(f"{name}={value}", key) for name, value in env.items()}


def trusted(env: Mapping[str, str], signatures: Mapping[str, str], key: bytes) -> tuple[dict[str, str], list[str]]:
    """The ``--env`` values of a stored run that a rerun may give its kernels, and the names left out: those
    this store did not record as they stand (a run imported, or edited, whose ``PYTHONPATH`` would run another's
    code), kept only as a hash, or redacted."""
    from nbscope._redact import REDACTED

    kept = {
        name: value
        for name, value in env.items()
        if not HIDDEN.fullmatch(value)
        and REDACTED not in value
        and name in signatures
        and hidden(f"{name}={value}", key) == signatures[name]
    }
    return kept, [name for name in env if name not in kept]


def hidden_key_ids(env: Mapping[str, object]) -> set[str]:
    """The ids of the keys that hid values of ``env`` (a run's ``settings.env``)."""
    matches = (re.fullmatch(r"hidden-hmac-([0-9a-f]{8}):[0-9a-f]{16}", str(value)) for value in env.values())
    return {match.group(1) for match in matches if match}


def readable(name: str) -> bool:
    """Whether ``--env NAME=...`` keeps its value in the record (a timing setting that holds no secret)."""
    from nbscope.collect.fingerprint import RESULT_ENV_NAMES, RESULT_ENV_PREFIXES  # not at import: the CLI's
    # output streams use this module's redact before any command runs

    upper = name.upper()
    if SECRET_NAME.search(upper):
        return False
    return upper.startswith(RESULT_ENV_PREFIXES) or upper in RESULT_ENV_NAMES


def env_for_record(env: Mapping[str, str], *, store_values: bool = False, key: bytes | None = None) -> dict[str, str]:
    """``--env`` as the record keeps it: each value, or its hash under ``key`` (see the module)."""
    if store_values:
        return dict(env)
    return {name: value if readable(name) else hidden(value, key) for name, value in env.items()}


def hide_stored_values(settings: dict[str, object], command: list[str], key: bytes | None = None) -> bool:
    """Hide, in place, the ``--env`` values a run's settings and command kept that the rule above would
    not keep (a run recorded before the rule, or imported from one); nothing for a run recorded with
    ``--env-store-values``. Whether anything changed."""
    if STORE_VALUES_FLAG in command:
        return False
    changed = False
    env = settings.get("env")
    if isinstance(env, dict):
        kept = {
            str(name): value if not isinstance(value, str) or readable(str(name)) else hidden(value, key)
            for name, value in env.items()
        }
        if kept != env:
            settings["env"], changed = kept, True
    shown = command_for_record(command, key)
    if shown != command:
        command[:], changed = shown, True
    return changed


def command_for_record(argv: Sequence[str], key: bytes | None = None) -> list[str]:
    """A command line as records keep it: the values of ``--env NAME=VALUE`` (and ``--env=NAME=VALUE``)
    hidden by :func:`env_for_record`'s rule, unless the command itself asked for ``--env-store-values``."""
    args = [str(a) for a in argv]
    if STORE_VALUES_FLAG in args:
        return args
    result: list[str] = []
    expect_pair = False
    for arg in args:
        if expect_pair:
            result.append(_hide_pair(arg, key))
            expect_pair = False
        elif arg == "--env":
            result.append(arg)
            expect_pair = True
        elif arg.startswith("--env="):
            result.append("--env=" + _hide_pair(arg.removeprefix("--env="), key))
        else:
            result.append(arg)
    return result


def _hide_pair(pair: str, key: bytes | None) -> str:
    name, sep, value = pair.partition("=")
    if not sep:
        return pair
    return f"{name}={value if readable(name) else hidden(value, key)}"
