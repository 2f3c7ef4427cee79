"""The states of a dispatch, of an attempt and of a handle, and the moves between them.

Everything that affects these state machines lives in this file (h11's
``_state.py`` is the model): each machine is a table ``state -> states it may
move to``; :func:`move` looks the move up and raises :class:`IllegalMove`,
naming the machine, the thing and both states, when the table has no such
move.  The ledger applies every state change through :func:`move`, so a state
written out of order is a bug found at once, not a row that lies.

A *dispatch* is one ``eps execute`` (or one copy of a ``--count`` fan-out):

- ``walking``: an executor is walking the plan (or was, if it died: reconcile
  turns a dead walk into ``interrupted``, or ``started`` when it finds what the
  walk had started);
- ``started``: something runs; ``held``: a pinned job is queued (P10);
- ``interrupted``: the walk died with nothing running; ``eps execute --resume`` continues it;
- ``preempted``: a spot VM was taken back; ``--resume`` plans again (P11);
- ``waiting``: every rung ended exhausted and the job retries ``no-capacity``: nothing
  runs; its supervisor plans again at the row's ``next_try_at``;
- ``ended``: what started has finished; ``failed``: nothing could start;
- ``cancelled``: final; nothing of it may stay alive.  Moves out of a final state
  are not errors but lost races (``eps cancel`` won): :func:`move` returns ``None``.

An *attempt* is one rung tried, written before its provider call:
``intent`` (the call may or may not have happened) -> ``submitted`` (the provider
may hold something under the attempt's name) -> ``pending`` / ``running`` ->
``advanced`` (parked out and cancelled), ``ended``, ``cancelled`` (released by
eps), ``gone`` (the provider no longer has it), or ``failed`` (nothing made).
Reconcile may correct what it judged earlier: a ``gone`` attempt found alive
again is ``running`` or ``pending`` once more.

A *handle* state is what a provider says about the machine or job now, folded
into one vocabulary for every lane.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class DispatchState(StrEnum):
    WALKING = "walking"
    STARTED = "started"
    HELD = "held"
    INTERRUPTED = "interrupted"
    PREEMPTED = "preempted"
    WAITING = "waiting"
    ENDED = "ended"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptState(StrEnum):
    INTENT = "intent"
    SUBMITTED = "submitted"
    PENDING = "pending"
    RUNNING = "running"
    ADVANCED = "advanced"
    ENDED = "ended"
    CANCELLED = "cancelled"
    GONE = "gone"
    FAILED = "failed"


class HandleState(StrEnum):
    """What a provider reports about a job or machine, the same words for every lane."""

    PENDING = "pending"  # queued (SLURM PENDING)
    STARTING = "starting"  # being created or booted
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"  # the job ended; the machine may still hold (and bill) a disk
    PREEMPTED = "preempted"  # a spot VM taken back
    GONE = "gone"  # the provider no longer knows it
    RELEASED = "released"  # eps deleted / terminated / cancelled it
    UNRELEASED = "unreleased"  # it exists, and eps could not release it


class Outcome(StrEnum):
    """How an attempt turned out, besides the failure kinds of ``eps.core.outcome``."""

    STARTED = "started"
    HELD = "held"
    ADOPTED = "adopted"  # found by reconcile, not recorded by the walk
    RELEASED = "released"
    REFUSED = "refused"
    PARK_TIMEOUT = "park_timeout"
    NOT_SUBMITTED = "not_submitted"  # the walk died between the record and the call
    NOT_LAUNCHED = "not_launched"  # the machine came up, the walk died before the job was launched on it
    GONE = "gone"
    PREEMPTED = "preempted"
    #: the provider said running, eps could not reach it over ssh for ``wedge_s``: released
    WEDGED = "wedged"
    ENDED = "ended"
    #: the job ended but its outputs could not be pulled: its machine is kept (not released)
    #: until ``eps pull`` brings them back
    KEPT = "kept_for_pull"


_D = DispatchState
_A = AttemptState

#: Dispatch moves (a move to the same state is always allowed: a new message or handle).
DISPATCH_MOVES: Mapping[DispatchState, frozenset[DispatchState]] = {
    _D.WALKING: frozenset({_D.STARTED, _D.HELD, _D.INTERRUPTED, _D.FAILED, _D.CANCELLED, _D.ENDED, _D.WAITING}),
    _D.WAITING: frozenset({_D.WALKING, _D.FAILED, _D.CANCELLED}),
    _D.INTERRUPTED: frozenset({_D.WALKING, _D.STARTED, _D.HELD, _D.FAILED, _D.CANCELLED, _D.ENDED}),
    _D.STARTED: frozenset({_D.ENDED, _D.PREEMPTED, _D.CANCELLED, _D.FAILED}),
    _D.HELD: frozenset({_D.STARTED, _D.ENDED, _D.CANCELLED, _D.FAILED}),
    _D.PREEMPTED: frozenset({_D.WALKING, _D.STARTED, _D.CANCELLED, _D.ENDED}),
    _D.FAILED: frozenset({_D.CANCELLED, _D.STARTED}),
    _D.ENDED: frozenset({_D.CANCELLED, _D.WALKING}),  # walking again: a failed job its retry policy relaunches
    _D.CANCELLED: frozenset(),
}

#: States whose later moves are lost races, not errors: cancel is final.
FINAL_DISPATCH_STATES: frozenset[DispatchState] = frozenset({_D.CANCELLED})

#: Dispatch states in which no walk is under way and nothing may be running.
SETTLED_DISPATCH_STATES: frozenset[DispatchState] = frozenset({_D.ENDED, _D.FAILED, _D.CANCELLED})

#: Attempt moves.  An attempt is created in ``intent``; nothing moves back into it.
ATTEMPT_MOVES: Mapping[AttemptState, frozenset[AttemptState]] = {
    _A.INTENT: frozenset({_A.SUBMITTED, _A.PENDING, _A.RUNNING, _A.FAILED, _A.GONE, _A.CANCELLED, _A.ENDED}),
    _A.SUBMITTED: frozenset({_A.PENDING, _A.RUNNING, _A.FAILED, _A.GONE, _A.CANCELLED, _A.ENDED}),
    _A.PENDING: frozenset({_A.RUNNING, _A.ADVANCED, _A.ENDED, _A.CANCELLED, _A.GONE}),
    _A.RUNNING: frozenset({_A.PENDING, _A.ENDED, _A.CANCELLED, _A.GONE}),
    _A.ADVANCED: frozenset({_A.RUNNING, _A.CANCELLED, _A.GONE}),
    _A.ENDED: frozenset({_A.CANCELLED}),
    _A.CANCELLED: frozenset({_A.GONE}),
    _A.GONE: frozenset({_A.PENDING, _A.RUNNING, _A.CANCELLED, _A.ENDED}),
    _A.FAILED: frozenset({_A.SUBMITTED, _A.PENDING, _A.RUNNING, _A.CANCELLED}),
}

#: Attempts that may hold something at a provider (or whose call may have happened).
LIVE_ATTEMPT_STATES: frozenset[AttemptState] = frozenset({_A.INTENT, _A.SUBMITTED, _A.PENDING, _A.RUNNING})

#: Outcomes of attempts a dead walk left through no fault of the rung: a resume tries
#: those rungs again (P7: never demoted past a tier it never really used).
RETRYABLE_OUTCOMES: frozenset[str] = frozenset({Outcome.NOT_SUBMITTED.value, Outcome.NOT_LAUNCHED.value})

#: Attempts the walk has left behind: their rungs are not tried again in this dispatch.
LEFT_ATTEMPT_STATES: frozenset[AttemptState] = frozenset({_A.FAILED, _A.ADVANCED, _A.CANCELLED, _A.GONE})

#: Handle states of a job that has started (or already run) rather than still queued.
STARTED_HANDLE_STATES: frozenset[HandleState] = frozenset(
    {HandleState.STARTING, HandleState.RUNNING, HandleState.STOPPING, HandleState.FINISHED}
)


class IllegalMove(ValueError):
    """A state change the tables do not allow.  Names the machine, the thing and both states."""

    def __init__(self, machine: str, subject: str, frm: str, to: str) -> None:
        super().__init__(f"illegal {machine} move for {subject}: {frm} -> {to}")
        self.machine = machine
        self.subject = subject
        self.frm = frm
        self.to = to


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeVar

    S = TypeVar("S", DispatchState, AttemptState)


def _move(table: Mapping[S, frozenset[S]], machine: str, subject: str, frm: S, to: S) -> S:
    if to == frm or to in table[frm]:
        return to
    raise IllegalMove(machine, subject, frm.value, to.value)


def move_dispatch(subject: str, frm: DispatchState, to: DispatchState) -> DispatchState | None:
    """The state after moving dispatch ``subject`` from ``frm`` to ``to``.

    ``None`` when ``frm`` is final (the move lost a race with ``eps cancel`` and is
    dropped); :class:`IllegalMove` when the table has no such move."""
    if frm in FINAL_DISPATCH_STATES and to != frm:
        return None
    return _move(DISPATCH_MOVES, "dispatch", subject, frm, to)


def move_attempt(subject: str, frm: AttemptState, to: AttemptState) -> AttemptState:
    """The state after moving attempt ``subject``; :class:`IllegalMove` when not allowed."""
    return _move(ATTEMPT_MOVES, "attempt", subject, frm, to)
