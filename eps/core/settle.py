"""Reconcile's decisions: what to do with a dispatch no live eps process owns, given
what its ledger rows say and what the providers report under eps's names.

``settle(view, items, blind=..., resuming=...) -> Settlement`` is pure; the shell
gathers the inventory, asks, and carries the settlement out.  The rules:

- a cancelled, failed or ended dispatch keeps no resource: release everything
  found on the lanes that could be read (a lane that could not be read is
  reported, and the next reconcile releases what it holds), except a machine
  kept because the pull of its outputs failed (``kept_for_pull``): ``eps pull``
  releases that one once they came back;
- otherwise, a lane the dispatch may hold something on could not be read:
  change nothing (``blind``), and say so;
- a started (or held) dispatch whose machines all finished: keep what they left
  (the console log), release them, and the dispatch has ended;
- a started dispatch whose spot VMs were all taken back: release them; preempted;
- otherwise keep the newest resource (by attempt order; one the ledger never
  recorded is the newest: the walk died between call and record), adopt it into
  its attempt, release the rest (rungs the walk had already left); a dead walk
  (or a dispatch an earlier reconcile judged preempted while its machine ran)
  becomes ``started``, or ``interrupted`` when what it left is a queued job that
  ``eps execute --resume`` should park on (never for a pin: its queued job is the
  answer, P10);
- nothing live: a dead walk is ``interrupted`` and its live attempts are judged
  (never submitted, or gone); a started spot VM that vanished was preempted; any
  other started or held dispatch has ended.

What the job's own record on a machine says (:class:`JobSeen`, read by the shell for
the items :func:`to_probe` names) refines that, for the machines eps makes and then
launches the job on (GCP VMs, RunPod pods):

- one that runs with no job launched on it, while no walk owns the dispatch, is released
  at once (``not_launched``: nobody will launch it; a resume may try its rung again, P7),
  unless this is a resume (which launches the job on it instead);
- a dead walk's machine whose job cannot be seen (not up yet, not answering) is kept, but
  its dispatch is ``interrupted``, never ``started``;
- a started dispatch whose one machine still runs (the linger) while its job's record
  says it ended has finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import NamedTuple

from eps.core.model import LaneKind, Provisioning, evolve
from eps.core.outcome import AttemptRecord, Handle
from eps.core.states import (
    LIVE_ATTEMPT_STATES,
    STARTED_HANDLE_STATES,
    AttemptState,
    DispatchState,
    HandleState,
    Outcome,
)

#: Dispatch states that keep no resource: whatever is still live is released.
RELEASE_ONLY: frozenset[DispatchState] = frozenset(
    {DispatchState.CANCELLED, DispatchState.FAILED, DispatchState.ENDED, DispatchState.WAITING}
)
#: Lanes whose machines eps makes, then launches the job on over ssh (a gap in between).
MADE_MACHINES: frozenset[LaneKind] = frozenset({LaneKind.GCP, LaneKind.RUNPOD})
#: Dispatch states of a walk that died (no live walk, nothing recorded as started).
_WALK_DIED = (DispatchState.WALKING, DispatchState.INTERRUPTED, DispatchState.PREEMPTED)


class JobSeen(StrEnum):
    """What the job's own record on a running machine says."""

    UNKNOWN = "unknown"  # not asked, or the machine did not answer
    NONE = "none"  # the machine answered: no job was ever launched on it (at most half shipped)
    RUNNING = "running"  # launched, not ended
    ENDED = "ended"  # its record says it ended


class LiveItem(NamedTuple):
    """Something a provider reports under eps's names: whose it is and how to find it again.
    ``name`` is the provider-side name (instance, pod or job name) when it has one; ``job``
    what its job record said, when the shell asked (:func:`to_probe`)."""

    dispatch: str
    handle: Handle
    name: str | None = None
    job: JobSeen = JobSeen.UNKNOWN


class DispatchView(NamedTuple):
    id: str
    state: DispatchState
    pinned: bool = False
    handle: Handle | None = None
    attempts: tuple[AttemptRecord, ...] = ()
    #: The job's end is on record (its exit code, written before its machine is released): a
    #: machine gone since was released by the walk that ended it (killed, or its lease lost,
    #: before it wrote the dispatch's end), not taken back by the provider.
    job_ended: bool = False


class Verdict(StrEnum):
    BLIND = "blind"  # a lane it may hold something on could not be read: change nothing
    RELEASE = "release"  # cancelled or failed: release every item
    FINISHED = "finished"  # every machine finished: keep its output, release it, ended
    PREEMPTED = "preempted"  # the spot VM was taken back (released if it still holds a disk)
    KEEP = "keep"  # keep the newest item, release the rest
    WALK_DIED = "walk_died"  # walking, nothing live: judge the live attempts, interrupted
    ENDED = "ended"  # started or held, nothing live any more: it ended
    NOTHING = "nothing"


class Settlement(NamedTuple):
    verdict: Verdict
    release: tuple[LiveItem, ...] = ()
    keep: LiveItem | None = None
    keep_attempt: AttemptRecord | None = None
    keep_state: AttemptState | None = None
    dispatch_state: DispatchState | None = None
    message: str | None = None
    vanished: tuple[AttemptRecord, ...] = ()
    blind: tuple[str, ...] = ()
    #: Machines with no job on them, to release first, each with the attempt that made it
    #: (which becomes cancelled, outcome ``not_launched``).
    not_launched: tuple[tuple[LiveItem, AttemptRecord | None], ...] = ()


def to_probe(view: DispatchView, items: Sequence[LiveItem], *, resuming: bool) -> tuple[LiveItem, ...]:
    """The running machines whose job record :func:`settle` wants read: a made machine of a
    dispatch that may hold it (not on a resume, which launches the job itself), or the one
    machine of a started dispatch (its job may have ended while it lingers)."""
    if view.state in RELEASE_ONLY:
        return ()
    running = [i for i in items if i.handle.state is HandleState.RUNNING]
    if view.state is DispatchState.STARTED and len(items) == 1:
        return tuple(running)
    if resuming:
        return ()
    return tuple(i for i in running if i.handle.kind in MADE_MACHINES)


def settle(view: DispatchView, items: Sequence[LiveItem], *, blind: frozenset[str], resuming: bool) -> Settlement:
    """The settlement of one dispatch (see the module docstring for the rules)."""
    if view.state in RELEASE_ONLY or resuming:
        return _settle(view, items, blind=blind, resuming=resuming)
    gone = tuple(i for i in items if i.handle.kind in MADE_MACHINES and i.job is JobSeen.NONE)
    if not gone:
        return _settle(view, items, blind=blind, resuming=resuming)
    owners = tuple((i, _owner(i, view.attempts)) for i in gone)
    left = {a.id for _, a in owners if a is not None}
    attempts = tuple(
        a._replace(state=AttemptState.CANCELLED, outcome=Outcome.NOT_LAUNCHED) if a.id in left else a
        for a in view.attempts
    )
    rest = [i for i in items if i not in gone]
    s = _settle(view._replace(attempts=attempts), rest, blind=blind, resuming=resuming)
    return s._replace(not_launched=owners)


def kept_for_pull(view: DispatchView) -> bool:
    """The job ended (or was cancelled) but its outputs could not be pulled: its machine is
    kept until ``eps pull`` brings them back (an attempt of outcome ``kept_for_pull``)."""
    return any(a.state is AttemptState.ENDED and a.outcome == Outcome.KEPT for a in view.attempts)


def _owner(item: LiveItem, attempts: Sequence[AttemptRecord]) -> AttemptRecord | None:
    """The live attempt that made ``item`` (the newest on its lane when none names it)."""
    owner = attempt_for(item, attempts) or next(
        (a for a in reversed(attempts) if a.rung.lane == item.handle.lane), None
    )
    return owner if owner is not None and owner.state in LIVE_ATTEMPT_STATES else None


def _settle(view: DispatchView, items: Sequence[LiveItem], *, blind: frozenset[str], resuming: bool) -> Settlement:
    attempts = view.attempts
    # Lanes that could not be read and may hold something of this dispatch (a live attempt there).
    unseen = tuple(sorted({a.rung.lane for a in attempts if a.rung.lane in blind and a.state in LIVE_ATTEMPT_STATES}))
    if view.state in RELEASE_ONLY:
        if kept_for_pull(view):
            return Settlement(Verdict.NOTHING)  # its outputs are still on it: eps pull releases it
        # Keeps nothing: release what can be seen; a lane that could not be read is
        # reported, and what it may hold is released by the next reconcile.
        if items:
            return Settlement(Verdict.RELEASE, release=tuple(items), blind=unseen)
        return Settlement(Verdict.NOTHING, blind=unseen)
    if unseen:
        return Settlement(Verdict.BLIND, blind=unseen)
    if not items:
        return _nothing_live(view, resuming=resuming)
    if view.state is DispatchState.STARTED and len(items) == 1 and items[0].job is JobSeen.ENDED:
        # the job ended; its machine lingers for the pull: the machine has finished
        items = [items[0]._replace(handle=evolve(items[0].handle, state=HandleState.FINISHED))]
    states = {i.handle.state for i in items}
    if view.state in (DispatchState.STARTED, DispatchState.HELD) and states <= {HandleState.FINISHED}:
        return Settlement(
            Verdict.FINISHED,
            release=tuple(items),
            dispatch_state=DispatchState.ENDED,
            message="finished; machine released",
        )
    if view.state is DispatchState.STARTED and states <= {HandleState.PREEMPTED}:
        return _preempted(view, release=tuple(items))
    ranked = sorted(items, key=lambda i: _seq(i, attempts), reverse=True)
    keep, extra = ranked[0], tuple(ranked[1:])
    owner = attempt_for(keep, attempts)
    if owner is None and attempts:
        owner = attempts[-1]  # found, never recorded (crash between call and record): the newest attempt
    running = keep.handle.state in STARTED_HANDLE_STATES
    dispatch_state = None
    message = None
    if view.state is DispatchState.HELD and running:
        # the pinned job left its queue: followed from now on as any started job (its record
        # read, its end seen by its exit code, not when the cluster forgets it: a job SLURM
        # lists COMPLETING for a minute would be seen ended a minute late)
        dispatch_state = DispatchState.STARTED
    if view.state in _WALK_DIED and not resuming:
        if keep.handle.kind is LaneKind.SLURM and not running and not view.pinned:
            dispatch_state, message = DispatchState.INTERRUPTED, "parked job adopted; eps execute --resume"
        elif keep.handle.kind in MADE_MACHINES and keep.job is not JobSeen.RUNNING and keep.job is not JobSeen.ENDED:
            # a dead walk's machine whose job was never seen on it: not "started"
            dispatch_state = DispatchState.INTERRUPTED
            message = (
                f"{keep.handle.id} is up (or coming up) but eps stopped before the job was seen on it: "
                f"eps execute --resume {view.id} launches it there; left alone, the next reconcile "
                "releases it once it answers, and its own watcher stops it"
            )
        else:
            dispatch_state = DispatchState.STARTED
    return Settlement(
        Verdict.KEEP,
        release=extra,
        keep=keep,
        keep_attempt=owner,
        keep_state=AttemptState.RUNNING if running else AttemptState.PENDING,
        dispatch_state=dispatch_state,
        message=message,
    )


def _nothing_live(view: DispatchView, *, resuming: bool) -> Settlement:
    if view.state is DispatchState.WALKING:
        vanished = tuple(a for a in view.attempts if a.state in LIVE_ATTEMPT_STATES)
        if resuming:
            return Settlement(Verdict.WALK_DIED, vanished=vanished)
        return Settlement(
            Verdict.WALK_DIED,
            vanished=vanished,
            dispatch_state=DispatchState.INTERRUPTED,
            message="the walk stopped; eps execute --resume",
        )
    if view.state is DispatchState.STARTED and view.handle is not None and _on_spot(view) and not view.job_ended:
        return _preempted(view, release=())
    if view.state in (DispatchState.STARTED, DispatchState.HELD) and view.handle is not None:
        return Settlement(Verdict.ENDED, dispatch_state=DispatchState.ENDED)
    return Settlement(Verdict.NOTHING)


def _preempted(view: DispatchView, release: tuple[LiveItem, ...]) -> Settlement:
    msg = f"spot VM preempted; `eps execute --resume {view.id}` plans again"
    return Settlement(Verdict.PREEMPTED, release=release, dispatch_state=DispatchState.PREEMPTED, message=msg)


def _on_spot(view: DispatchView) -> bool:
    """Whether what the dispatch started ran on a spot rung (by the rung's own record)."""
    key = view.handle.rung if view.handle is not None else None
    return any(a.rung.key == key and a.rung.provisioning is Provisioning.SPOT for a in view.attempts)


def preempted_attempts(view: DispatchView) -> tuple[AttemptRecord, ...]:
    """The spot attempts a preemption ends (they become ``gone``, outcome ``preempted``)."""
    states = (AttemptState.RUNNING, AttemptState.PENDING, AttemptState.CANCELLED)
    return tuple(a for a in view.attempts if a.state in states and a.rung.provisioning is Provisioning.SPOT)


def needs_history(attempt: AttemptRecord) -> bool:
    """Whether judging a vanished attempt needs the provider's history: a SLURM submit
    that may or may not have happened (sacct tells "never submitted" from "already gone")."""
    return attempt.state is AttemptState.INTENT and attempt.rung.kind is LaneKind.SLURM


def vanished(attempt: AttemptRecord, seen: bool | None, history_error: str | None = None) -> tuple[Outcome, str]:
    """Why a recorded attempt has nothing live.  ``seen``: the provider's history shows the
    call happened (``None``: not asked, or it did not answer, see ``history_error``).

    ``not_submitted`` means the call never happened (the walk died between record and
    call), so the rung may be tried again (P7: a dead walk must not demote a job past a
    tier it never reached)."""
    if attempt.state is not AttemptState.INTENT:
        return Outcome.GONE, "not found at the provider"
    if history_error is not None:
        return Outcome.GONE, f"not in squeue; sacct did not answer: {history_error}"
    if seen:
        return Outcome.GONE, "submitted, and already left the queue"
    return Outcome.NOT_SUBMITTED, "the walk stopped before the provider call"


def attempt_for(item: LiveItem, attempts: Sequence[AttemptRecord]) -> AttemptRecord | None:
    """The attempt that made ``item``: by provider id, else by the name or rung it carries."""
    h = item.handle
    for a in reversed(attempts):
        if a.handle and a.handle == h.id:
            return a
    for a in reversed(attempts):
        if a.rung.kind is not h.kind:
            continue
        if h.kind is LaneKind.SLURM and a.rung.qos == h.qos:
            return a
        if h.kind in (LaneKind.GCP, LaneKind.RUNPOD) and item.name is not None and a.name == item.name:
            return a
        if h.kind is LaneKind.VM:
            return a
    return None


def _seq(item: LiveItem, attempts: Sequence[AttemptRecord]) -> int:
    a = attempt_for(item, attempts)
    return a.seq if a is not None else 10**9  # unrecorded: the newest possible
