"""Every exit status of ``eps``, in one table (README's "Exit codes" repeats it, and a test
keeps the two equal), and the one JSON shape of an error under ``--json``.

``eps wait`` and ``eps execute --wait`` are the exception by design: they leave with the
job's own exit code (0-255), so a script can treat eps like the job itself.
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import Any, TextIO

from eps.shell.events import SCHEMA_VERSION

__all__ = ["EXIT_TABLE", "SCHEMA_VERSION", "WAIT_CODES", "Exit", "error_doc", "write_error"]


class Exit(IntEnum):
    OK = 0
    NOTHING_STARTS = 1
    BAD_INPUT = 2
    INTERNAL = 70
    STILL_RUNNING = 75
    INTERRUPTED = 130


#: (code, name, meaning): the table README shows.
EXIT_TABLE: tuple[tuple[int, str, str], ...] = (
    (Exit.OK, "ok", "done: a plan with rungs (whether this machine can run them is its `here` column and "
     "`can_start`), a dispatch started, a check with a usable lane per resource kind"),
    (Exit.NOTHING_STARTS, "nothing can start", "a plan whose only outcome is a terminal (the policy leaves no "
     "rung), a dispatch that started nothing, `eps check` with a resource kind no lane here can "
     "run, a cancel or reconcile that could not release something"),
    (Exit.BAD_INPUT, "bad input", "usage, unknown intent/lane/dispatch, bad duration, impossible pin, malformed "
     "job file, snapshot, grants or config: one line on stderr (one JSON object with --json), nothing changed"),
    (Exit.INTERNAL, "internal error", "a bug in eps: one line on stderr, the traceback in a file it names"),
    (Exit.STILL_RUNNING, "still running", "`eps wait` / `eps attach --timeout` passed, SIGTERM/SIGHUP stopped the "
     "caller, or `eps execute` left a dispatch waiting for capacity (`--retry no-capacity`): the dispatch goes on "
     "under its supervisor (`eps attach D` follows it again, `eps cancel D` stops it)"),
    (Exit.INTERRUPTED, "interrupted", "Ctrl-C: this eps stopped (a supervised dispatch goes on: `eps attach D`); "
     "`eps wait` of a cancelled job"),
)  # fmt: skip

#: ``eps wait`` / ``execute --wait``: the job's own code; these are eps's own words for the rest.
WAIT_CODES: tuple[tuple[int, str], ...] = (
    (124, "the job's time limit stopped it"),
    (130, "the job was cancelled (by eps cancel)"),
    (1, "nothing started, the job's exit code is unknown, or its outputs could not be pulled"),
)


def error_doc(code: str, text: str, exit_code: int) -> dict[str, Any]:
    """What ``--json`` puts on stderr for an error: one object, one line."""
    return {"schema_version": SCHEMA_VERSION, "error": {"code": code, "text": text}, "exit_code": exit_code}


def write_error(stream: TextIO, *, as_json: bool, code: str, text: str, exit_code: int, prefix: str) -> None:
    if as_json:
        stream.write(json.dumps(error_doc(code, text, exit_code)) + "\n")
    else:
        stream.write(f"{prefix}{text}\n")
