"""``[state]``: where eps keeps what it knows.

``url``: a PostgreSQL database for the ledger (``postgresql://USER@HOST:PORT/DB``, or a
libpq ``service=NAME``); unset, the ledger is SQLite in the state directory, as ever.
``EPS_STATE_URL`` overrides it.  The password comes from libpq's own sources (``~/.pgpass``,
``PGPASSWORD``, a service file); one in the URL works, and eps never shows it.  The state
directory still holds the logs, the locks and eps's key.  The URL is checked and shown by
:mod:`eps.shell.config.state_url`."""

from __future__ import annotations

from attrs import frozen

from eps.shell.config.state_url import checked_url


@frozen
class StateDoc:
    """The ``[state]`` section as written (structured strictly by :mod:`eps.shell.config.convert`)."""

    url: str | None = None


def state_url(base: str | None, doc: StateDoc, source: str) -> str | None:
    """``[state] url`` over ``base``; one :class:`ConfigError` line (the URL redacted) if it is no database's."""
    if doc.url is None:
        return base
    return checked_url(doc.url, f"{source}: ", " @ $.state.url")
