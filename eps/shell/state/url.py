"""Where the ledger lives: the state directory's SQLite file (the default), or a PostgreSQL
database named by ``[state] url`` / ``EPS_STATE_URL`` (``postgresql://...``, or a libpq
``service=NAME`` / key-value string).

The URL may hold a password (libpq allows it); eps never shows one: every message names the
database by :func:`redact`, which keeps the user, host, port and database and drops the
password, wherever libpq's syntax puts it.  Light: no driver, no urllib (the plan path reads
:func:`is_postgres`)."""

from __future__ import annotations

import re

SCHEMES = ("postgresql://", "postgres://")
#: ``password=...`` in a key-value string or a URL's query (quoted or not).
_KV_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)")
#: ``user:password@`` in a URL's authority.
_URL_PASSWORD = re.compile(r"^([a-z]+://[^/@?#:]*):[^@/?#]*@", re.IGNORECASE)


def is_postgres(url: str | None) -> bool:
    """``url`` names a PostgreSQL database (a URL, or libpq's key-value form with a service or host)."""
    if not url:
        return False
    return url.startswith(SCHEMES) or bool(re.match(r"\s*(service|host|dbname)\s*=", url))


def redact(url: str) -> str:
    """``url`` without its password (``postgresql://eps:***@db/eps``): what every message shows."""
    text = _URL_PASSWORD.sub(r"\1:***@", url)
    return _KV_PASSWORD.sub(r"\1***", text)


def check(url: str) -> str | None:
    """Why ``url`` cannot name the ledger's database (``None``: it can).  No connection is made."""
    if not is_postgres(url):
        return f"{redact(url)!r} is not a PostgreSQL URL (postgresql://HOST/DB, or service=NAME)"
    if any(c in url for c in "\n\r\x00"):
        return "the URL holds a control character"
    return None
