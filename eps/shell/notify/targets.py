"""The one place apprise is used: a target parsed from its URL (:func:`parse`) and one
notice sent to it (:func:`send`).  Imported only by the supervisor, ``eps execute``'s
hand-over and ``eps notify test``, never by ``eps plan`` (apprise takes about 0.2 s to
import and 0.4 s more to load its plugins).

A URL carries tokens: it is held in memory only, in the apprise object.  Every message
names a target by :func:`~eps.shell.config.notify.safe_name`; apprise's own log (which
may print a URL) goes nowhere; an exception is reported by its type, never its text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from eps.core.records import NamedTuple
from eps.shell.config.errors import ConfigError
from eps.shell.config.notify import TIMEOUT_S, safe_name

if TYPE_CHECKING:
    from typing import Protocol

    class _Plugin(Protocol):
        """An apprise plugin as :func:`_bound` sets it (its socket timeouts are looked up by name)."""

        request_rate_per_sec: float

#: The least time between two sends to one target (apprise's own throttle is 5.5 s for
#: e-mail: eps sends a handful per dispatch, each wanted now).
MIN_GAP_S = 1.0


class Target(NamedTuple):
    """A parsed target.  ``key``: its name, numbered among targets of the same name (what the
    ledger's cursor is kept under: never the URL)."""

    key: str
    name: str
    plugin: Any


def quiet() -> None:
    """apprise logs its targets' URLs at debug and warning levels: its records go nowhere."""
    log = logging.getLogger("apprise")
    log.propagate = False
    log.setLevel(logging.CRITICAL + 1)
    if not log.handlers:
        log.addHandler(logging.NullHandler())


def parse(urls: Sequence[str], source: str, *, timeout_s: float = TIMEOUT_S) -> list[Target]:
    """Each URL as apprise reads it; one :class:`ConfigError` line for the first it cannot
    (an unknown scheme, a part missing), naming its place and safe name only."""
    found, bad = parse_each(urls, timeout_s)
    if bad:
        raise ConfigError(f"{source}: {bad[0]}")
    return found


def parse_each(urls: Sequence[str], timeout_s: float = TIMEOUT_S) -> tuple[list[Target], list[str]]:
    """The targets apprise can read, and a line for each URL it cannot.  A target's key counts
    every URL of its name before it, read or not, so it stays put when another goes bad."""
    quiet()
    import apprise

    found: list[Target] = []
    bad: list[str] = []
    seen: dict[str, int] = {}
    for i, url in enumerate(urls):
        name = safe_name(url)
        n = seen.get(name, 0)
        seen[name] = n + 1
        try:
            plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
        except Exception:  # apprise raises for some malformed URLs (its text may hold the URL: not shown)
            plugin = None
        if plugin is None:
            bad.append(f"[notify] urls[{i}] ({name}): apprise cannot read this URL (an unknown scheme, or a part "
                       f"it needs is missing) @ $.notify.urls[{i}]")  # fmt: skip
            continue
        _bound(plugin, timeout_s)
        found.append(Target(f"{name}#{n}", name, plugin))
    return found, bad


def _bound(plugin: _Plugin, timeout_s: float) -> None:
    """No send takes longer than ``timeout_s`` per socket wait, nor waits long between sends."""
    for attr in ("socket_connect_timeout", "socket_read_timeout"):
        now = getattr(plugin, attr, None)
        if isinstance(now, (int, float)):
            setattr(plugin, attr, min(float(now), float(timeout_s)))
    rate = getattr(plugin, "request_rate_per_sec", None)
    if isinstance(rate, (int, float)):
        plugin.request_rate_per_sec = min(float(rate), MIN_GAP_S)


def send(target: Target, title: str, body: str) -> str | None:
    """Send one notice; ``None`` when the target took it, else why not (one line, no URL)."""
    try:
        ok = target.plugin.notify(body=body, title=title)
    except Exception as exc:  # a plugin's failure is the target's, never eps's (its text may hold the URL)
        return f"{target.name}: {type(exc).__name__}"
    return None if ok else f"{target.name} did not take it (refused, unreachable or no answer in time)"
