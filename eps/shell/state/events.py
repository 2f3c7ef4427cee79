"""Events are data: what a walk, a reconcile or a supervisor has to say goes to an
:class:`Events` sink as ``(event, fields)``; nothing below the CLI renders anything.

A supervisor appends every event of a dispatch, as the ``--json`` event object of
``eps schema events``, to that dispatch's event log, ``<state>/events/<dispatch>.jsonl``
(one object per line, appended whole under ``O_APPEND``); ``eps execute``, ``eps attach``
and ``eps wait`` read it back (:func:`read_from`) and render it, and the supervisor's
notifications (:mod:`eps.shell.notify`) read it with each line's place
(:func:`read_placed`), keeping how far each target was told in the ledger.  The events of a
``--count`` fan-out's copies go to the parent's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from eps.core.contract import SCHEMA_VERSION
from eps.core.events import Event

__all__ = ["SCHEMA_VERSION", "EventLog", "Events", "Silent", "events_dir", "log_path", "read_from", "read_placed",
           "record"]  # fmt: skip


class Events(Protocol):
    """Where events go."""

    def emit(self, event: Event, **fields: Any) -> None: ...


def record(event: Event, **fields: Any) -> dict[str, Any]:
    """One event as its ``--json`` object."""
    return {"schema_version": SCHEMA_VERSION, "event": event, "ts": round(time.time(), 3), **fields}


class Silent:
    """Events nobody reads (a reconcile inside a command that reports its own result)."""

    def emit(self, event: Event, **fields: Any) -> None:
        return None


def events_dir(state_dir: str) -> str:
    return os.path.join(state_dir, "events")


def log_path(state_dir: str, dispatch: str) -> str:
    return os.path.join(events_dir(state_dir), f"{dispatch}.jsonl")


#: What a writer adds to an event before it is written (the supervisor: an end's exit code,
#: lane and outputs, read from the ledger when the end is written; see :mod:`eps.shell.run.supervisor`).
Facts = Callable[[Event, dict[str, Any]], dict[str, Any]]


class EventLog:
    """Appends every event to the event log of ``dispatch`` (a fan-out's copies: the
    parent's), with what ``facts`` adds to it, and passes it on to ``also`` (the caller's
    renderer in inline mode)."""

    def __init__(self, state_dir: str, dispatch: str, also: Callable[[dict[str, Any]], None] | None = None,
                 *, facts: Facts | None = None) -> None:  # fmt: skip
        os.makedirs(events_dir(state_dir), mode=0o700, exist_ok=True)
        self.path = log_path(state_dir, dispatch)
        self.also = also
        self.facts = facts
        import threading  # here, not at the top: a plan that is not walked logs nothing

        self._lock = threading.Lock()

    def emit(self, event: Event, **fields: Any) -> None:
        if self.facts is not None:
            fields = {**fields, **self.facts(event, fields)}
        self.write(record(event, **fields))

    def write(self, rec: dict[str, Any]) -> None:
        line = (json.dumps(rec) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        if self.also is not None:
            self.also(rec)


def read_from(path: str, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The whole events written after byte ``offset``, and the offset after the last whole
    line (a line being written is read next time)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a torn line (a crash mid-write): skipped, never fatal
    return out, offset + end


def read_placed(path: str, offset: int = 0) -> list[tuple[int, int, dict[str, Any]]]:
    """The whole events written after byte ``offset``, each with the byte offsets where its
    line starts and ends (a reader's cursor moves to the end of the last one it handled)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return []
    out = []
    at = 0
    while (nl := data.find(b"\n", at)) >= 0:
        line = data[at:nl]
        if line.strip():
            with contextlib.suppress(ValueError):  # a torn line (a crash mid-write): skipped, never fatal
                out.append((offset + at, offset + nl + 1, json.loads(line)))
        at = nl + 1
    return out
