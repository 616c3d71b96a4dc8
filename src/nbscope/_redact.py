"""Credentials, removed wherever text is stored, written or printed: the one function (:func:`redact`) every
writer calls at its write point. The store: each run's document (:meth:`nbscope.record.run.RunRecord.to_json`),
its columns, its publish summary and its gate verdicts (``record.store``); every file written
(:func:`nbscope._files.write_text`: exports, reports, audits, merges, site pages, ``--append-to``), live files,
``gate --summary``, an environment's build log, marker and kernel name (``collect.environments``); the terminal
(``render._clean``). Any text shortened for a reader is shortened by :func:`shorten`, which redacts it whole
first: a credential that a cut splits is no longer one the patterns know. A variable's name that says secret
(:data:`SECRET_NAME`) is the one rule for ``--env`` values and the fingerprint's environment."""

from __future__ import annotations

import re

REDACTED = "REDACTED"
# Each pattern has bounded repeats and stops at whitespace, quotes, '<', '>' and '\' (a JSON escape), so it
# never backtracks over a long text and a record's JSON stays valid after it.
# The user information of a URL (``https://tok@host``, ``http://user:pass@host``, ``git+ssh://git@...``):
# everything up to the authority's last '@' (a password may hold one), never past its end ('/', '?', '#').
_URL_USER = re.compile(r"(?<=://)[^/?#\s\"'<>\\]{1,512}@")
# Query or fragment parameters whose name says secret (``?token=``, ``#access_token=``, ``api_key``,
# ``X-Amz-Signature``, Azure's ``sig``, ``pwd``).
_SECRET_QUERY = re.compile(
    r"([?&#;][A-Za-z0-9_.\-]{0,40}?(?:token|key|passw|pwd|secret|signature|sig|auth|credential|jwt)"
    r"[A-Za-z0-9_.\-]{0,40}=)[^&#;\s\"'<>\\]{1,2048}",
    re.IGNORECASE,
)
# Every pattern below begins at a secret word or a fixed form, never at a run of any letters: the engine then
# rejects most positions at their first character (a record of megabytes is redacted in a fraction of a second).
# Between a name and its value: ``=``, ``: `` or, when a quote closes the name (JSON, a dict, a subscript), a
# quote opening the value too. A JSON document stays valid JSON: ``"token": 5`` or ``"password": null`` is
# never touched, only a string value is. In HTML, ``&quot;`` and ``&#x27;`` are quotes (a page is redacted once
# more where it is written).
_Q = r"(?:\\?[\"']|&quot;|&#x27;)"
_SEP = rf"(?:{_Q}\]?\s{{0,4}}[:=]\s{{0,4}}{_Q}|\s{{0,4}}[:=]\s{{0,4}}{_Q}?)"
# nbscope's own keyed hash of an --env value is no secret, nor is code: a constant, a number of up to four digits
# or in Python's groups (``MAX_TOKENS = 512``, ``N_STEPS_KEY = 1_000_000``, ``KEY = -1``, ``2**10``), a call
# (``pwd = os.getcwd()``) or a type annotation (``MAX_TOKENS: int = 512``).
_ENTITY = r"&(?:quot|#x27);"  # an HTML quote ends a value


def _value(stops: str = "") -> str:
    ends = rf"\s\"'<>\\,;)\]}}&{stops}"
    code = rf"(?:None|True|False|-?\d{{1,4}}(?:_\d{{3}})*(?:\.\d+)?(?:\*\*\d{{1,3}})?)(?![^{ends}])|[\w.]{{1,200}}\("
    code += r"|\w{1,40}(?:\[[^\]]{0,80}\])?\s{1,4}=\s"  # never base64 padding (``dXNlcg=``)
    return rf"(?!hidden-|REDACTED|{_ENTITY}|{code})(?:[^{ends}]|&(?!quot;|#x27;)){{1,4096}}"


_VALUE = _value()
# HTTP headers in logs (``Authorization: Bearer ...``, ``PRIVATE-TOKEN: ...``, ``X-API-Key: ...``), keeping the
# scheme word.
_HEADER = re.compile(
    rf"((?<![\w-])(?:proxy-)?authorization{_SEP}(?:(?:bearer|basic|token|digest|negotiate|bot)\s+)?"
    r"|(?:token|api-key|apikey|secret|password)\s*:\s*)" + _VALUE,
    re.IGNORECASE,
)
# What a variable's name says when it holds a secret (``HF_TOKEN``, ``PYPI_PASSWORD``, ``DB_PASS``, ``MYSQL_PWD``,
# ``AWS_SECRET_ACCESS_KEY``, ``SSH_KEY``, ``NPM_AUTH``, ``GH_PAT``): the one rule for ``--env`` values
# (:mod:`nbscope.record.secrets`), the environment a fingerprint records and ``NAME=value`` in any text.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|PASSPHRASE|PASS(?:$|_)|PWD|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|KEY|_PAT(?:$|_)"
)
# Assignments and options naming a secret: ``GITHUB_TOKEN=...``, ``export HF_TOKEN="..."``, ``DB_PASS=...``,
# ``"XLA_TOKEN": "..."`` (JSON), ``--password x``, ``--token=x``; in any case the names of config files
# (``aws_secret_access_key = ...``, ``password: ...``, ``client_secret=...``) ending in a secret word.
_ASSIGNED = re.compile(
    r"((?:(?<![a-z])(?:TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|COOKIE|PRIVATE|API_?KEY|_PAT(?==))"
    r"|(?<![A-Za-z])(?:PASS(?=[_=])|PWD|AUTH(?=[_=])|KEY))[A-Z0-9_]{0,40}"
    rf"(?:=(?:\\?[\"'])?|{_SEP}))"
    + _VALUE
    + r"|((?<![/.\\])(?i:passw(?:or)?d|pwd|secret|_token|api_?key|access_?key|secret_?key|private_?key|credentials?|passphrase)"
    + _SEP
    + ")"
    + _value("([{")  # code's ``f(password: str)`` keeps its parenthesis
    # A string given to a parameter or variable named token (``login(token="...")``); unquoted it is code.
    + r"|((?<!\w)(?i:token)\s{0,4}=\s{0,4}\\?[\"'])"
    + _VALUE
    + r"|(?<![\w-])(--?(?:password|passwd|token|api[-_]key|secret|access[-_]token|auth[-_]token)(?:=|\s+))"
    r"(?!-)[^\s\"'<>\\]{1,4096}"
)
# A netrc line (``machine h login u password p``, or ``password p`` on a line of its own).
_NETRC = re.compile(
    r"(\blogin\s{1,8}[^\s\"'<>\\]{1,256}\s{1,8}(?:password|passwd|account)\s{1,8}|^\s{0,8}(?:password|passwd)\s{1,8}"
    r"|(?<=\\n)\s{0,8}(?:password|passwd)\s{1,8})(?!REDACTED|[=:])[^\s\"'<>\\]{1,4096}",
    re.IGNORECASE | re.MULTILINE,
)
# Tokens whose form names them wherever they stand: GitHub, GitLab, PyPI, Hugging Face, npm, Slack, AWS, Google,
# OpenAI and Anthropic keys, JSON web tokens; a PEM private key, whole.
_TOKEN = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{30,255}|glpat-[A-Za-z0-9_\-]{20,255}"
    r"|gl(?:dt|rt|ptt|cbt|imt|soat|ft)-[A-Za-z0-9_\-]{20,255}|pypi-[A-Za-z0-9_\-]{50,1024}|hf_[A-Za-z0-9]{30,255}"
    r"|npm_[A-Za-z0-9]{36,255}|xox[abposer]-[A-Za-z0-9\-]{10,255}|xapp-[A-Za-z0-9\-]{10,255}"
    r"|(?:A[KS]IA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{35}|sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,255}"
    r"|eyJ[A-Za-z0-9_\-]{8,4096}\.eyJ[A-Za-z0-9_\-]{8,4096}\.[A-Za-z0-9_\-]{0,4096})"
    r"|-----BEGIN[A-Z ]{0,40} PRIVATE KEY-----.{0,20000}?(?:-----END[A-Z ]{0,40} PRIVATE KEY-----|$)",
    re.DOTALL,
)

# Words one of whose presence lets a pattern match at all: a text without any is not searched by it (most records).
_HEADER_WORDS = ("authorization", "token", "api-key", "apikey", "secret", "password")
_NAME_WORDS = ("TOKEN", "SECRET", "PASS", "PWD", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE", "KEY", "_PAT")
_KEY_WORDS = (
    "passw",
    "pwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "access_key",
    "accesskey",
    "private_key",
    "privatekey",
    "credential",
    "passphrase",
)


def redact(text: str, *, assignments: bool = True) -> str:
    """``text`` with every credential the patterns above know replaced by ``REDACTED``: the one function for what a
    record keeps (:meth:`nbscope.record.run.RunRecord.to_json`, live files) and what a terminal shows
    (``nbscope.render._clean``). ``assignments=False`` leaves ``NAME_TOKEN=value`` and ``--password value`` for
    a record being read: its ``--env NAME=value`` arguments are hidden under the store's keyed hash
    (:mod:`nbscope.record.secrets`), which needs the value; the record is redacted whole when it is written."""
    if "://" in text:
        text = _URL_USER.sub(REDACTED + "@", text)
    if "=" in text:
        text = _SECRET_QUERY.sub(lambda match: match.group(1) + REDACTED, text)
    if ":" not in text and "=" not in text and " " not in text:
        return _TOKEN.sub(REDACTED, text)
    lowered = text.lower()
    if any(word in lowered for word in _HEADER_WORDS):
        text = _HEADER.sub(lambda match: match.group(1) + REDACTED, text)
    if assignments and (any(word in text for word in _NAME_WORDS) or any(word in lowered for word in _KEY_WORDS)):
        text = _ASSIGNED.sub(lambda match: next(group for group in match.groups() if group) + REDACTED, text)
    if assignments and ("passw" in lowered or "account" in lowered):
        text = _NETRC.sub(lambda match: match.group(1) + REDACTED, text)
    return _TOKEN.sub(REDACTED, text)


def shorten(text: str, limit: int, *, keep_end: bool = False) -> str:
    """``text`` redacted whole, then, when longer than ``limit`` characters, cut to ``limit`` with ``…`` where it
    was cut (``keep_end``: its end kept, as a log's last lines): the one function that shortens a text anyone
    will read (the terminal, a record, a report). Cutting first would leave part of a credential the patterns
    no longer recognise (a URL cut before its '@', a token shorter than its form)."""
    text = redact(text)
    if len(text) <= limit:
        return text
    if keep_end:
        return "…" + text[len(text) - limit + 1 :].lstrip()
    return text[: max(limit - 1, 0)].rstrip() + "…"
