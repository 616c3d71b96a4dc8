"""Credentials, removed wherever text is written: the one function (:func:`redact`) that every stage uses
(records and live files in ``record``, build logs in ``collect``, the terminal in ``render``)."""

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
# HTTP headers in logs (``Authorization: Bearer ...``, ``PRIVATE-TOKEN: ...``, ``X-API-Key: ...``), keeping the
# scheme word.
_HEADER = re.compile(
    r"\b((?:proxy-)?authorization\s*[:=]\s*(?:(?:bearer|basic|token|digest|negotiate|bot)\s+)?"
    r"|[A-Za-z-]{0,30}(?:token|api-key|apikey|secret|password)\s*:\s*)[^\s\"'<>\\,;]{1,4096}",
    re.IGNORECASE,
)
# Assignments and options naming a secret: ``GITHUB_TOKEN=...``, ``export HF_TOKEN="..."``, ``PYPI_PASSWORD=...``,
# ``--password x``, ``--token=x``.
_ASSIGNED = re.compile(
    r"\b([A-Z0-9_]{0,40}(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)[A-Z0-9_]{0,40}="
    r"(?:\\?[\"'])?)"
    r"(?!hidden-)[^\s\"'<>\\]{1,4096}"  # nbscope's own keyed hash of an --env value is no secret
    r"|(?<![\w-])(--?(?:password|passwd|token|api[-_]key|secret|access[-_]token|auth[-_]token)(?:=|\s+))"
    r"(?!-)[^\s\"'<>\\]{1,4096}"
)
# Tokens whose form names them wherever they stand: GitHub, GitLab, PyPI, Hugging Face, npm, Slack, AWS keys.
_TOKEN = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{30,255}|glpat-[A-Za-z0-9_\-]{20,255}"
    r"|pypi-[A-Za-z0-9_\-]{50,1024}|hf_[A-Za-z0-9]{30,255}|npm_[A-Za-z0-9]{36,255}|xox[abprs]-[A-Za-z0-9\-]{10,255}"
    r"|A[KS]IA[0-9A-Z]{16})\b"
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
    if ":" in text or "=" in text:
        text = _HEADER.sub(lambda match: match.group(1) + REDACTED, text)
    if assignments:
        text = _ASSIGNED.sub(lambda match: (match.group(1) or match.group(2)) + REDACTED, text)
    return _TOKEN.sub(REDACTED, text)
