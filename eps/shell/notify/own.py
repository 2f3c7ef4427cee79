"""A job's own notification targets (``eps execute --notify URL``, ``notify = [...]`` in a job
file, ``notify=`` of the MCP ``execute`` tool and of :class:`eps.Job`), sent the same events as
the config's ``[notify] urls`` (the dispatch's ``[notify] events``), by the supervisor, each
with a cursor of its own in the ledger.

A value is an apprise URL, or ``env:NAME``: the URL is the value of the variable ``NAME``
(of the caller's environment; the MCP server's for its tool).  ``env:NAME`` and the config
file are the token-safe forms: a URL written on the command line is visible to anyone who
runs ``ps`` while eps starts.

The URLs carry tokens.  They are read once, when the dispatch is handed over (the supervisor
runs detached, and may be revived later by a command run from another environment), and kept
only in ``<state>/notify/<dispatch>.json``, mode 0600 in a 0700 directory, written before
the hand-over and removed by the supervisor's sender once the dispatch owes no more notices
(its last one sent or given up, :mod:`eps.shell.notify.pump`).  Never in the ledger (a target's
cursor is keyed by ``job:<safe name>#<n>``), the events, the logs, argv or output.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping, Sequence

from eps.core.model import JobError
from eps.shell.config.notify import safe_name

#: The prefix of the cursor key of a job's own target (a config target of the same name
#: keeps its own cursor).
KEY_PREFIX = "job:"
#: ``env:NAME`` names that are eps's own settings: kept with the dispatch at hand-over
#: (:func:`eps.shell.config.load.settings_env`), so a URL in one would rest in the state directory.
_SETTINGS_NAMES = ("EPS_",)


def resolve(items: Sequence[str], env: Mapping[str, str], where: str = "--notify") -> tuple[str, ...]:
    """The URLs of ``items`` (``env:NAME`` read from ``env``), each checked with apprise.
    :class:`JobError` ``notify`` (one line, never the URL: its safe name or its place) for a
    blank value, an unset or empty ``NAME``, or a URL apprise cannot read."""
    from eps.shell.config.load import SETTINGS_ENV

    urls: list[str] = []
    shown: list[str] = []
    for given in items:
        if not isinstance(given, str) or not given.strip():
            raise JobError("notify", f"{where}: a target may not be blank (an apprise URL, or env:NAME)", None)
        item = given.strip()
        if item.startswith("env:"):
            name = item[4:]
            if not name.isidentifier() or not name.isascii():
                raise JobError("notify", f"{where} env:{name}: not a variable name", None)
            if name.startswith(_SETTINGS_NAMES) or name in SETTINGS_ENV:
                raise JobError("notify", f"{where} env:{name}: eps keeps its settings' variables ({name}) with "
                               "the dispatch; put the URL in a variable of another name", None)  # fmt: skip
            value = (env.get(name) or "").strip()
            if not value:
                raise JobError("notify", f"{where} env:{name}: {name} is not set (or empty) in the environment", None)
            urls.append(value)
            shown.append(f"env:{name} ({safe_name(value)})")
        else:
            urls.append(item)
            shown.append(safe_name(item) if "://" in item else "not scheme://...")
    from eps.shell.notify.targets import parse_each

    for url, name in zip(urls, shown, strict=True):
        if parse_each([url])[1]:
            raise JobError("notify", f"{where} {name}: apprise cannot read this URL (an unknown scheme, or a part "
                           "it needs is missing)", None)  # fmt: skip
    return tuple(dict.fromkeys(urls))


def folder(state_dir: str) -> str:
    return os.path.join(state_dir, "notify")


def path(state_dir: str, dispatch: str) -> str:
    return os.path.join(folder(state_dir), f"{dispatch}.json")


def keep(state_dir: str, dispatch: str, urls: Sequence[str]) -> None:
    """Keep ``urls`` for ``dispatch``'s supervisor: mode 0600 from its first byte (written to a
    temporary name, then renamed), in a 0700 directory.  Nothing when there are none."""
    if not urls:
        return
    os.makedirs(folder(state_dir), mode=0o700, exist_ok=True)
    os.chmod(folder(state_dir), stat.S_IRWXU)
    tmp = path(state_dir, dispatch) + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"urls": list(urls)}, fh)
    os.replace(tmp, path(state_dir, dispatch))


def kept(state_dir: str, dispatch: str) -> tuple[str, ...]:
    """The URLs kept for ``dispatch`` (none: no file, or one that cannot be read)."""
    try:
        with open(path(state_dir, dispatch), encoding="utf-8") as fh:
            urls = json.load(fh).get("urls")
    except (OSError, ValueError, AttributeError):
        return ()
    return tuple(u for u in urls if isinstance(u, str)) if isinstance(urls, list) else ()


def drop(state_dir: str, dispatch: str) -> None:
    """The dispatch owes no more notices: its URLs go."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path(state_dir, dispatch))
