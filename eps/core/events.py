"""The events of a dispatch: a closed set, and the fields each one carries.

A walk, a supervisor, the follow of a started job and a caller that stops following say
what happens as events (``eps execute --json``, ``eps attach``, the event log of each
dispatch, the notifications).  :class:`Event` is every kind there is, in the order
``eps schema events`` lists them; :data:`FIELDS` is what each kind may carry besides
``schema_version``, ``event`` and ``ts``, and :data:`REQUIRED` what it always carries.  The
shell emits an :class:`Event` (never a free string), its progress renders one with
``match``, and tests hold the shipped schema (``eps/schemas/events.json``) and every emit
in the shell to these tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

__all__ = ["FIELDS", "REQUIRED", "Event"]


class Event(StrEnum):
    """Every kind of event, in the schema's order."""

    DISPATCH = "dispatch"
    INPUTS = "inputs"
    FANOUT = "fanout"
    ATTEMPT = "attempt"
    SUBMITTED = "submitted"
    PARKED = "parked"
    ADVANCED = "advanced"
    WITHDRAWN = "withdrawn"
    FAILED = "failed"
    STARTED = "started"
    HELD = "held"
    TERMINAL = "terminal"
    STOPPED = "stopped"
    ENDED = "ended"
    SUPERVISED = "supervised"
    STILL_RUNNING = "still_running"
    RELAUNCHED = "relaunched"
    SYNC_FAILED = "sync_failed"
    WEDGED = "wedged"
    WAITING = "waiting"
    TRYING_AGAIN = "trying_again"
    INTERRUPTED = "interrupted"
    STALLED = "stalled"
    STALL_OVER = "stall_over"


#: What each kind tells, one line each (the agent guide's list of events).
SAYS: Mapping[Event, str] = {
    Event.DISPATCH: "a walk starts: the intent, how many rungs it planned, the worst-case queue wait",
    Event.INPUTS: "each --input prefix, listed and sized when the dispatch was submitted",
    Event.FANOUT: "a --count parent and the ids of its copies",
    Event.ATTEMPT: "a rung is tried: its key, QoS, price and why it is next",
    Event.SUBMITTED: "a SLURM job was queued: its id",
    Event.PARKED: "the SLURM job waits in the queue, against its park cap (one a minute while nothing changes)",
    Event.ADVANCED: "a tier's park cap passed: its job cancelled, the next rung tried",
    Event.WITHDRAWN: "a queued job taken back, and why",
    Event.FAILED: "a rung's start failed: the failure's kind, code and message",
    Event.STARTED: "the job runs: its handle (lane, where, machine, id)",
    Event.HELD: "a pinned job is held pending where it is (P10): its handle",
    Event.TERMINAL: "every rung ended and nothing started: the terminal and the skipped rungs",
    Event.STOPPED: "the walk stopped (a cancel, a workdir that cannot ship, a failure)",
    Event.ENDED: "the job ended: its exit code, job status, result, lane, whether it was pulled, where its outputs are",
    Event.SUPERVISED: "a supervisor owns the dispatch",
    Event.STILL_RUNNING: "the caller stopped following; the dispatch goes on",
    Event.RELAUNCHED: "an interrupted or failed job walks again under its retry policy (restart N)",
    Event.SYNC_FAILED: "a sync of a running job's outputs failed or would have filled this disk: tried next round",
    Event.WEDGED: "the machine ran but ssh went unanswered for [jobs] wedge_s: released, an interruption",
    Event.WAITING: "every rung ended exhausted and the job retries no-capacity: next_try_at is when it plans again",
    Event.TRYING_AGAIN: "that time came: the dispatch walks again from the top",
    Event.INTERRUPTED: "the provider or the cluster took the run back (a preemption, a lost node): its lane",
    Event.STALLED: "the stall watch heard nothing for its stall_after: since when, whether its wrapper stops it",
    Event.STALL_OVER: "that silent spell ended: the job is busy again",
}

_REASON = ("reason",)  # {"code": ..., "text": ...}: why, as a code word and a line

#: What each kind may carry (besides ``schema_version``, ``event``, ``ts``).  The end's and an
#: interruption's lane, exit code, result and outputs are added by the supervisor from the
#: ledger when it writes them.
FIELDS: Mapping[Event, frozenset[str]] = {
    Event.DISPATCH: frozenset({"dispatch", "intent", "resolved_intent", "rungs", "worst_case_wait_s", "plan"}),
    Event.INPUTS: frozenset({"dispatch", "inputs"}),
    Event.FANOUT: frozenset({"dispatch", "children"}),
    Event.ATTEMPT: frozenset({"dispatch", "rung", "qos", "price_per_hour", *_REASON}),
    Event.SUBMITTED: frozenset({"dispatch", "rung", "qos", "id"}),
    Event.PARKED: frozenset({"dispatch", "rung", "qos", "id", "elapsed_s", "cap_s", "pending_reason", "next",
                             *_REASON}),
    Event.ADVANCED: frozenset({"dispatch", "rung", "qos", "id", "elapsed_s", "pending_reason", *_REASON}),
    Event.WITHDRAWN: frozenset({"dispatch", "rung", "id", *_REASON}),
    Event.FAILED: frozenset({"dispatch", "rung", "kind", "code", "message", *_REASON}),
    Event.STARTED: frozenset({"dispatch", "handle"}),
    Event.HELD: frozenset({"dispatch", "handle"}),
    Event.TERMINAL: frozenset({"dispatch", "terminal", "skipped", "message", *_REASON}),
    Event.STOPPED: frozenset({"dispatch", "message", *_REASON}),
    Event.ENDED: frozenset({"dispatch", "message", "lane", "exit_code", "job_status", "result", "pulled", "outputs"}),
    Event.SUPERVISED: frozenset({"dispatch", "pid", "state", "revived"}),
    Event.STILL_RUNNING: frozenset({"dispatch", "state", "why"}),
    Event.RELAUNCHED: frozenset({"dispatch", "restart", "message"}),
    Event.SYNC_FAILED: frozenset({"dispatch", "message"}),
    Event.WEDGED: frozenset({"dispatch", "handle", "message", "lane"}),
    Event.WAITING: frozenset({"dispatch", "terminal", "next_try_at", "seconds", "skipped", "message", "lane",
                              *_REASON}),
    Event.TRYING_AGAIN: frozenset({"dispatch", "round"}),
    Event.INTERRUPTED: frozenset({"dispatch", "message", "lane"}),
    Event.STALLED: frozenset({"dispatch", "since", "silent_s", "on_stall", "lane", "message"}),
    Event.STALL_OVER: frozenset({"dispatch", "since", "message"}),
}  # fmt: skip

#: What each kind always carries (the schema's ``required`` for it).
REQUIRED: Mapping[Event, frozenset[str]] = {
    **{e: frozenset({"dispatch", "reason"}) for e in (Event.ATTEMPT, Event.PARKED, Event.ADVANCED,
                                                    Event.WITHDRAWN, Event.FAILED, Event.TERMINAL,
                                                    Event.STOPPED)},
    Event.STARTED: frozenset({"dispatch", "handle"}),
    Event.HELD: frozenset({"dispatch", "handle"}),
    Event.WAITING: frozenset({"dispatch", "reason", "next_try_at", "seconds", "terminal"}),
}  # fmt: skip

#: The kinds that say how a dispatch's walk or job ended (what a wait that came after shows).
ENDS: frozenset[Event] = frozenset({Event.ENDED, Event.TERMINAL, Event.STOPPED})
#: The kinds that begin a run (so an interruption of the run before is told already, or never).
RUN_BEGINS: frozenset[Event] = frozenset({Event.STARTED, Event.RELAUNCHED, Event.DISPATCH})
#: The kinds the supervisor adds the ledger's facts to when it writes them: an end's exit code,
#: result and outputs; an interruption's or a wedge's lane (:data:`FIELDS` lists them).
WITH_FACTS: frozenset[Event] = frozenset({Event.ENDED, Event.INTERRUPTED, Event.WEDGED})
