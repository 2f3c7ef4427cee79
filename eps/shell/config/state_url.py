"""The ledger's database URL (``[state] url`` / ``EPS_STATE_URL``): checked, and shown.

Every message names the database by :func:`redact`: the user, host, port and database,
never the password, wherever libpq's syntax puts it (``user:PASSWORD@``, ``password=``).
Light (``EPS_STATE_URL`` is read on every command, ``eps plan``'s too): no driver, no
urllib, no attrs."""

from __future__ import annotations

import re

from eps.shell.config.errors import ConfigError

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


def checked_url(url: str, prefix: str = "", suffix: str = "") -> str | None:
    """``url`` if it names a PostgreSQL database (an empty one: ``None``, SQLite); else ConfigError."""
    if not url.strip():
        return None
    why = check(url)
    if why is not None:
        raise ConfigError(f"{prefix}{why}{suffix}")
    return url
