"""``[state]``: where eps keeps what it knows.

``url``: a PostgreSQL database for the ledger (``postgresql://USER@HOST:PORT/DB``, or a
libpq ``service=NAME``); unset, the ledger is SQLite in the state directory, as ever.
``EPS_STATE_URL`` overrides it.  The password comes from libpq's own sources (``~/.pgpass``,
``PGPASSWORD``, a service file); one in the URL works, and eps never shows it.  The state
directory still holds the logs, the locks and eps's key.  The URL is checked and shown by
:mod:`eps.shell.config.state_url`.

A team on one database (:mod:`eps.shell.state.team`): ``host`` names this host there
(``EPS_STATE_HOST``; default: its hostname and a tag of its state directory; one name
per state directory), ``lease`` is how long a host's hold on a
dispatch lasts without a renewal (``EPS_STATE_LEASE``; a duration, default 60 s): another
host's supervisor takes a dispatch over once its lease has run out."""

from __future__ import annotations

import re

from attrs import frozen

from eps.shell.config.errors import ConfigError, duration_setting
from eps.shell.config.state_url import checked_url

#: A host's name in the team's database: what ``eps status`` shows (no spaces, no quotes).
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: The lease period unless ``[state] lease`` or ``EPS_STATE_LEASE`` says.
LEASE_S = 60.0


@frozen
class StateDoc:
    """The ``[state]`` section as written (structured strictly by :mod:`eps.shell.config.convert`)."""

    url: str | None = None
    host: str | None = None
    lease: str | int | None = None


def state_url(base: str | None, doc: StateDoc, source: str) -> str | None:
    """``[state] url`` over ``base``; one :class:`ConfigError` line (the URL redacted) if it is no database's."""
    if doc.url is None:
        return base
    return checked_url(doc.url, f"{source}: ", " @ $.state.url")


def host_name(value: str, where: str) -> str:
    """``value`` if it can name a host; one :class:`ConfigError` line otherwise."""
    if not HOST_NAME.match(value):
        raise ConfigError(f"{where}: {value!r} cannot name a host (letters, digits, '.', '_', '-'; at most 64)")
    return value


def team(host: str | None, lease_s: float, doc: StateDoc, source: str) -> tuple[str | None, float]:
    """``[state] host`` and ``lease`` over ``host`` and ``lease_s``."""
    if doc.host is not None:
        host = host_name(doc.host, f"{source} @ $.state.host")
    lease = duration_setting(source, "state.lease", doc.lease)
    return host, float(lease) if lease is not None else lease_s
