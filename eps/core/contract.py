"""What every front door of eps promises, as tables: the exit statuses (the CLI's, and the
``exit_code`` of every error object, whichever door gave it), the operations as the MCP
server names them (``eps mcp``'s tools), and the bounds of the calls that wait or read.

README, CLAUDE.md and the agent guide (``eps guide``) state these; ``workflow_lint``
renders the guide's blocks from them, so the documents cannot drift.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["EXIT_TABLE", "LOGS_DEFAULT_BYTES", "LOGS_MAX_BYTES", "NEXT_DEFAULT_EVENTS", "NEXT_DEFAULT_S",
           "NEXT_MAX_EVENTS", "NEXT_MAX_S", "PHASE_FAILED", "SCHEMA_VERSION", "TOOLS", "WAIT_CODES", "WAIT_DEFAULT_S",
           "WAIT_MAX_S", "Exit"]  # fmt: skip

#: The version of every ``--json`` document (and of the schemas in ``eps/schemas``).
#: Raised only when a field changes meaning or goes away; new fields do not raise it.
SCHEMA_VERSION = 1


class Exit(IntEnum):
    OK = 0
    NOTHING_STARTS = 1
    BAD_INPUT = 2
    INTERNAL = 70
    STILL_RUNNING = 75
    MISCONFIGURED = 78
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
    (Exit.MISCONFIGURED, "cluster misconfigured", "a free cluster said a tier eps would use is set up wrong (its "
     "partition, account or QoS): `eps execute` stopped there and started nothing on a paid lane (`--fall-through` "
     "skips the cluster instead); `eps check` names the setting and the fix"),
    (Exit.INTERRUPTED, "interrupted", "Ctrl-C: this eps stopped (a supervised dispatch goes on: `eps attach D`); "
     "`eps wait` of a cancelled job"),
)  # fmt: skip

#: ``eps wait`` / ``execute --wait``: the job's own code; these are eps's own words for the rest.
#: ``eps wait`` of a pipeline one of whose phases failed (named on stderr, with the phases it
#: ended ``dependency_failed``): never a job's own code, which the phases' rows keep.
PHASE_FAILED = 3

WAIT_CODES: tuple[tuple[int, str], ...] = (
    (124, "the job's time limit stopped it"),
    (125, "the job's stall watch stopped it (--on-stall stop)"),
    (130, "the job was cancelled (by eps cancel)"),
    (PHASE_FAILED, "a pipeline's phase failed: its dependents ended dependency_failed (each named on stderr)"),
    (1, "nothing started, the job's exit code is unknown, or its outputs could not be pulled "
        "(eps notify test: a target did not answer)"),
)


#: The operations as the MCP server's tools name them (``eps mcp --tools``), in its order,
#: each with what it does and when it returns (every call is bounded).
TOOLS: tuple[tuple[str, str], ...] = (
    ("check", "which lanes this machine can use, and the fix for each other one; each lane within `timeout` (10 s)"),
    ("intents", "the intent table"),
    ("plan", "dry run: the route plan and what this machine can run of it; creates nothing"),
    ("execute", "start a job, always detached: the dispatch id and its state, at once"),
    ("execute_pipeline", "start a pipeline (a job file's `[[phases]]` as a document, or its path) as one dispatch, "
     "always detached: the dispatch id and its state, at once"),
    ("status", "what is running where, from the ledger; each provider within `timeout` (5 s)"),
    ("wait", "wait at most `timeout` (50 s, at most 600 s): ended, state, and once ended the exit code and outputs"),
    ("logs", "at most `max_bytes` (64 KiB, at most 1 MiB) of the log from `offset`, or its last `lines`"),
    ("next_events", "the next events of your dispatches (all, or those named) after `cursor`: at most `max_events` "
     "(100), waiting at most `timeout` (30 s, at most 600 s) for one; pass `next_cursor` back"),
    ("pull", "copy the job's $EPS_OUTPUT_DIR back"),
    ("cancel", "stop a dispatch (or all) and release every resource"),
)
#: ``wait``: how long one call waits when no timeout is given, and the most it ever waits.
WAIT_DEFAULT_S = 50.0
WAIT_MAX_S = 600.0
#: ``logs``: the default piece, and the most bytes one call returns.
LOGS_DEFAULT_BYTES = 64 << 10
LOGS_MAX_BYTES = 1 << 20
#: ``next_events``: how long one call waits for an event by default and at most, and the
#: events one call returns by default and at most.
NEXT_DEFAULT_S = 30.0
NEXT_MAX_S = 600.0
NEXT_DEFAULT_EVENTS = 100
NEXT_MAX_EVENTS = 1000
