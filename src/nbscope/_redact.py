"""Credentials in URLs, removed wherever a URL is written: the one function (:func:`redact`) that every
stage uses (records and live files in ``record``, build logs in ``collect``, the terminal in ``render``)."""

from __future__ import annotations

import re

REDACTED = "REDACTED"
# Credentials in URLs, wherever a URL is written: the user information before ``@`` (``https://tok@host``,
# ``http://user:pass@host``, ``git+https://tok@github.com/...``) and the values of query parameters whose
# name says secret (``?token=``, ``access_token=``, ``private_token=``, ``key=``, ``password=``,
# ``X-Amz-Signature=``). Bounded repeats: the patterns never backtrack over a long text.
_URL_USER = re.compile(r"(?<=://)[^/\s@\"'<>\\]{1,512}@")
_SECRET_QUERY = re.compile(
    r"([?&][A-Za-z0-9_.\-]{0,40}?(?:token|key|passw|secret|signature|auth|credential)[A-Za-z0-9_.\-]{0,40}=)"
    r"[^&#\s\"'<>\\]{1,2048}", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``REDACTED`` (see the patterns above): the one
    function for what a record keeps (:meth:`nbscope.record.run.RunRecord.to_json`, live files) and what a
    terminal shows (``nbscope.render._clean``)."""
    if "://" in text:
        text = _URL_USER.sub(REDACTED + "@", text)
    if "=" in text:
        text = _SECRET_QUERY.sub(lambda match: match.group(1) + REDACTED, text)
    return text
