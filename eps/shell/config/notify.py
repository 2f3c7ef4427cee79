"""``[notify]``: where eps sends notifications, and which events.

This is the section's hook into the config reader, read on every config read: stdlib only
(``eps plan`` never imports apprise or :mod:`eps.shell.notify`).  :func:`notify_settings`
reads the section strictly, one line per mistake:

- ``urls``: the targets, as apprise URLs (``json://host:port/path``, ``mailto://...``,
  ``slack://...``, ``tgram://...``).  Here each must look like a URL (``scheme://...``, no
  blanks); whether apprise can parse it (a known scheme, its parts all there) is asked where
  apprise is loaded anyway: ``eps execute`` (before anything is recorded), ``eps notify
  test``, and the supervisor.  A URL carries tokens, so no message ever shows one: a target
  is named by :func:`safe_name` (its scheme and host, e.g. ``json://127.0.0.1:8080``, or
  ``tgram://***`` when the host itself is a token) or by its place, ``urls[1]``.
- ``events``: which events are sent (default: every one of :data:`NOTIFY_EVENTS`).
- ``retry_for``: how long a target that does not answer is tried again (default ``1h``).
- ``timeout``: how long one send may take (default ``10s``).
"""

import re

from attrs import frozen

from eps.core.records import NamedTuple


class NotifyEvent(NamedTuple):
    name: str
    default: bool
    when: str


#: The events a notification is sent for (the names ``[notify] events`` takes), in the order
#: a dispatch meets them.  The supervisor reads them off the dispatch's event log
#: (:mod:`eps.shell.notify.notices`).
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = (
    NotifyEvent("started", True, "the job started after a park, or on a paid lane (gcp, runpod)"),
    NotifyEvent("parked", True, "parked past its first cap: the ladder moved on to the next rung"),
    NotifyEvent("preempted", True, "its run was taken back: spot preemption, lost or wedged machine, SLURM preemption"),
    NotifyEvent("relaunched", True, "its retry policy relaunched it"),
    NotifyEvent("stalled", True, "its job is alive but doing nothing"),
    NotifyEvent("failed", True, "the job ended non-zero (its code, where its outputs are), or nothing could run it"),
    NotifyEvent("ended", True, "the job ended 0: its code and where its outputs are"),
    NotifyEvent("unpulled", True, "its outputs still wait for `eps pull` after the linger (`[jobs] linger_s`)"),
)
EVENT_NAMES: tuple[str, ...] = tuple(e.name for e in NOTIFY_EVENTS)
DEFAULT_EVENTS: tuple[str, ...] = tuple(e.name for e in NOTIFY_EVENTS if e.default)
#: How long a target that does not answer is tried again, and how long one send may take.
RETRY_FOR_S = 3600
TIMEOUT_S = 10

#: What every target looks like (compiled on first use: most config reads name none).
_URL = r"[A-Za-z][A-Za-z0-9+.-]*://\S+"


@frozen
class NotifyDoc:
    """The ``[notify]`` section as written (structured strictly by :mod:`eps.shell.config.convert`)."""

    urls: list[str] | None = None
    events: list[str] | None = None
    retry_for: str | int | None = None
    timeout: str | int | None = None


class NotifySettings(NamedTuple):
    urls: tuple[str, ...] = ()
    events: tuple[str, ...] | None = None  # None: the default set
    retry_for_s: int = RETRY_FOR_S
    timeout_s: int = TIMEOUT_S

    def wanted(self) -> frozenset[str]:
        """The events sent."""
        return frozenset(DEFAULT_EVENTS if self.events is None else self.events)


def safe_name(url: str) -> str:
    """How a target is named in every message: its scheme and host (and port), never its
    user, password, path or query.  A host that is neither an address, ``localhost`` nor
    a DNS name (``tgram://BOTTOKEN/...``, ``slack://TOKEN/...``) is a token: ``scheme://***``."""
    scheme, _, rest = url.strip().partition("://")
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2]
    host = netloc[1:].partition("]")[0] if netloc.startswith("[") else netloc.partition(":")[0]
    import ipaddress  # only here: every config read imports this module, few name a target

    try:
        ipaddress.ip_address(host)
        shown = True
    except ValueError:
        shown = host == "localhost" or re.fullmatch(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+", host) is not None
    return f"{scheme.lower()}://{netloc if shown else '***'}"


def notify_settings(base: NotifySettings, doc: NotifyDoc, source: str) -> NotifySettings:
    """``[notify]`` over ``base``; one :class:`ConfigError` line for the first thing wrong
    (never the URL itself: its place and :func:`safe_name`)."""
    # here, not at the top: eps.shell.config.settings names this module's NotifySettings (no cycle)
    from eps.shell.config.errors import ConfigError, duration_setting

    if doc.urls is not None:
        for i, url in enumerate(doc.urls):
            if not url.strip():
                raise ConfigError(f"{source}: a notification URL may not be blank @ $.notify.urls[{i}]")
            if not re.fullmatch(_URL, url.strip()):
                shown = safe_name(url) if "://" in url else "not scheme://..."
                raise ConfigError(f"{source}: [notify] urls[{i}] ({shown}) is not an apprise URL "
                                  f"(scheme://..., no blanks) @ $.notify.urls[{i}]")  # fmt: skip
    if doc.events is not None:
        for i, name in enumerate(doc.events):
            if name not in EVENT_NAMES:
                from eps.core.router import did_you_mean

                raise ConfigError(f"{source}: [notify] events: no event {name!r}{did_you_mean(name, list(EVENT_NAMES))}"
                                  f" (known: {', '.join(EVENT_NAMES)}) @ $.notify.events[{i}]")  # fmt: skip
    urls = base.urls if doc.urls is None else tuple(u.strip() for u in doc.urls)
    events = base.events if doc.events is None else tuple(dict.fromkeys(doc.events))
    retry_for = duration_setting(source, "notify.retry_for", doc.retry_for)
    timeout = duration_setting(source, "notify.timeout", doc.timeout)
    return NotifySettings(urls, events, retry_for or base.retry_for_s, timeout or base.timeout_s)
