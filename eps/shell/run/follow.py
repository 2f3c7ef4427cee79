"""Following a dispatch to its end: look at each started job's record until it has ended,
then bring its outputs back and release its machine (:class:`~eps.shell.run.finish.Finisher`).

The supervisor does this for every dispatch it owns; ``eps wait`` does it itself only
where no supervisor runs (``[jobs] supervise = "inline"``).

It looks every ``poll_s`` at first, then less and less often (x1.5 a round, up to 15 x
``poll_s`` and at most :data:`WAIT_POLL_MAX_S`): a job of hours is not asked over ssh
every two seconds.  Between looks it reads the ledger at least every second, so an
``eps cancel`` is seen at once.  The providers are asked (reconcile) when a job's record
could not be read, and otherwise at most every :data:`WAIT_RECONCILE_S`.  The started jobs
of one round are looked at side by side (``[fanout] concurrency`` at most): a sweep's tasks
that ended are pulled and released at once, not one after another.

Under the supervisor it also watches for wedged machines: a GCP VM or RunPod pod whose
job's record cannot be read over ssh while the provider says it is running, for
``[jobs] wedge_s`` (:func:`eps.core.healing.wedged`), is released and its dispatch
handled as an interruption (``preempted``; its attempt ``gone``, outcome ``wedged``): the
supervisor relaunches it when its retry policy says so.  A machine that answers again, or
that the provider reports as anything but running, starts the clock again; one the
provider says is gone or preempted is reconcile's.  A SLURM job is not watched: its
machine is the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING

from returns.result import Failure, Success

from eps.core.ends import JobEnd, result_word
from eps.core.events import Event
from eps.core.healing import policy_of, wedge_reason, wedged
from eps.core.jobscript import JobProgress
from eps.core.lifecycle import exit_status
from eps.core.model import Job
from eps.core.outcome import Handle
from eps.core.settle import MADE_MACHINES
from eps.core.states import AttemptState, DispatchState, HandleState, Outcome
from eps.core.tables import HEALING, Healing
from eps.shell.lanes import Lanes
from eps.shell.state import codec
from eps.shell.state.events import Events
from eps.shell.state.ledger import DispatchRow, Ledger

if TYPE_CHECKING:
    from eps.shell.run.finish import Finisher

#: The follow loop looks at most this far apart (it starts at ``[jobs] wait_poll_s``).
WAIT_POLL_MAX_S = 30.0
#: ... and asks the providers at least this often (sooner when a record cannot be read).
WAIT_RECONCILE_S = 60.0
#: Dispatch states in which something is still to come.
UNSETTLED = (DispatchState.STARTED, DispatchState.WALKING, DispatchState.HELD, DispatchState.INTERRUPTED)


def rows_of(ledger: Ledger, dispatch: str) -> list[DispatchRow]:
    """The dispatch, or the copies of a ``--count`` parent (an unknown one is one line)."""
    from eps.core.model import JobError

    row = ledger.dispatch(dispatch)
    if row is None:
        raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
    return ledger.children(dispatch) or [row]


def ids_of(ledger: Ledger, dispatch: str) -> list[str]:
    """The dispatch, or the copies of a ``--count`` parent."""
    children = ledger.children(dispatch)
    return [c.id for c in children] or [dispatch]


def follow_to_end(
    ledger: Ledger,
    lanes: Lanes,
    events: Events,
    ids: Sequence[str],
    *,
    poll_s: float = 2.0,
    follow: Callable[[DispatchRow], None] | None = None,
    until: float | None = None,
    stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    sync: bool = False,
) -> bool:
    """Follow every dispatch of ``ids`` until it has settled (True), or until the monotonic
    time ``until`` or ``stop()`` (False: some are still going).  ``sync`` (the supervisor):
    a running job's ``$EPS_OUTPUT_DIR`` is pulled every ``sync_every_s`` (its checkpoints:
    a relaunch after an interruption starts from them), and a wedged machine is released
    (see the module docstring)."""
    from eps.shell.run.finish import Finisher

    finisher = Finisher(ledger, lanes)
    pending = set(ids)
    followed: set[str] = set()
    synced: dict[str, float] = {d: clock() for d in ids}  # the last sync (or the start of following)
    wedges = WedgeWatch(ledger, lanes, events, clock, watching=sync)
    interval = poll_s
    reconciled_at = clock()

    look = partial(_look, ledger, lanes, events, finisher, wedges, synced, sync=sync, clock=clock)
    while pending:
        unread = False
        held: set[str] = set()
        started: dict[str, DispatchRow] = {}
        for d in sorted(pending):
            row = ledger.dispatch(d)
            if row is None:
                pending.discard(d)
            elif row.state is DispatchState.STARTED and row.handle is not None:
                if follow is not None and d not in followed:
                    followed.add(d)
                    follow(row)
                started[d] = row
            elif row.state is DispatchState.HELD:
                held.add(d)  # a pinned job's queue (P10): only its cluster says when it starts
            elif row.state not in (DispatchState.WALKING, DispatchState.INTERRUPTED):  # those: a walk still deciding
                pending.discard(d)
        for d, (done, not_read) in zip(started, _side_by_side(look, started, lanes.settings.fanout_concurrency),
                                       strict=True):  # fmt: skip
            unread = unread or not_read
            if done:
                pending.discard(d)
        if pending:
            reconciled_at = _ask_providers(ledger, lanes, events, pending, held, unread, reconciled_at, clock)
            pending = {d for d in pending if (r := ledger.dispatch(d)) is not None and r.state in UNSETTLED}
        if not pending:
            break
        if stop() or (until is not None and clock() >= until):
            return False
        _nap(ledger, pending, interval, until, stop, sleep, clock)
        interval = min(interval * 1.5, max(poll_s, min(WAIT_POLL_MAX_S, poll_s * 15)))
    return True


def _look(ledger: Ledger, lanes: Lanes, events: Events, finisher: Finisher, wedges: WedgeWatch,
          synced: dict[str, float], d: str, row: DispatchRow, *, sync: bool,
          clock: Callable[[], float]) -> tuple[bool, bool]:  # fmt: skip
    """One look at the started job ``d``: its record read (a wedge watched), its outputs
    synced when due, and once it ended its end finished (pulled, released, told); (it is no
    longer to be followed, its record could not be read)."""
    progress = wedges.read(finisher, row)  # a wedged machine released: the dispatch is preempted
    every = sync_every(row.job, lanes.settings.jobs.healing())
    if sync and every and progress is not None and not progress.ended and clock() - synced[d] >= every:
        synced[d] = clock()
        failed = finisher.sync(row)
        if failed is not None:  # failed, or skipped for lack of disk: next round; the job keeps its machine
            events.emit(Event.SYNC_FAILED, dispatch=d, message=failed)
    if progress is not None and progress.ended:
        with ledger.owning(d) as owned:
            if owned:
                note = finisher.finish(row, wake=True)
                now = ledger.dispatch(d)
                gone = now is not None and now.state is DispatchState.PREEMPTED
                events.emit(Event.INTERRUPTED if gone else Event.ENDED, dispatch=d, message=note)
    fresh = ledger.dispatch(d)
    return fresh is not None and fresh.state is not DispatchState.STARTED, progress is None


def _side_by_side(look: Callable[[str, DispatchRow], tuple[bool, bool]], started: dict[str, DispatchRow],
                  most: int) -> list[tuple[bool, bool]]:  # fmt: skip
    """``look`` at each started job, side by side (``most`` at once: ``[fanout] concurrency``),
    so the tasks of a sweep or the copies of a fan-out that ended are pulled and released at
    once, not one after another."""
    width = max(1, min(len(started), most))
    if width == 1:
        return [look(d, r) for d, r in started.items()]
    with ThreadPoolExecutor(max_workers=width) as pool:
        return list(pool.map(look, started, started.values()))


def _ask_providers(ledger: Ledger, lanes: Lanes, events: Events, pending: set[str], held: set[str], unread: bool,
                   reconciled_at: float, clock: Callable[[], float]) -> float:  # fmt: skip
    """Reconcile what a round of looks could not settle; when it last asked for all of them."""
    from eps.shell.run.reconcile import Reconciler

    if unread or clock() - reconciled_at >= WAIT_RECONCILE_S:
        # a machine that vanished, a job that left, a walk that settled
        Reconciler(ledger, lanes, events, wake=True).reconcile(set(pending))
        return clock()
    if held:  # a pinned job's queue, asked at the poll's pace (one squeue), not only every WAIT_RECONCILE_S
        Reconciler(ledger, lanes, events, wake=True).reconcile(held)
    return reconciled_at


class WedgeWatch:
    """Reads each started job's record, and under the supervisor (``watching``) watches its
    machine for a wedge: since when a GCP VM or RunPod pod the provider says is running has
    not answered ssh (:attr:`unreachable`, by dispatch, in ``clock`` time)."""

    def __init__(
        self, ledger: Ledger, lanes: Lanes, events: Events, clock: Callable[[], float], *, watching: bool
    ) -> None:
        self.ledger, self.lanes, self.events, self.clock = ledger, lanes, events, clock
        self.watching = watching
        self.unreachable: dict[str, float] = {}
        from eps.shell.run.stalls import StallNews

        self.stalls = StallNews(ledger, events)  # the wrapper's stall watch, heard: once per silent spell

    def read(self, finisher: Finisher, row: DispatchRow) -> JobProgress | None:
        """What the job's record says (``None``: ssh did not answer); a machine found wedged
        is released and its dispatch handled as an interruption (``preempted``); a silent spell
        the job's stall watch recorded becomes a ``stalled`` event (:mod:`eps.shell.run.stalls`)."""
        asked_at = self.clock()
        progress = finisher.progress(row).value_or(None)
        if self.watching:
            self.watch(row, progress, asked_at)
        if progress is not None and (not progress.ended or progress.status is JobEnd.STALLED):
            self.stalls.saw(row, progress.stalled)  # a job its watch stopped: its spell told before its end
        return progress

    def watch(self, row: DispatchRow, progress: JobProgress | None, asked_at: float) -> bool:
        """One look at ``row``'s machine (``progress``: its job's record as read from
        ``asked_at``); whether it was wedged and is released now."""
        handle = row.handle
        if progress is not None or handle is None or handle.kind not in MADE_MACHINES:
            self.unreachable.pop(row.id, None)  # it answered: the clock starts again
            return False
        match self.lanes.get(handle.lane).poll(handle):
            case Success(polled) if polled.state is HandleState.RUNNING:
                since = self.unreachable.setdefault(row.id, asked_at)
            case Success(_):  # not running: gone or preempted (reconcile's), stopped (the finisher's)
                self.unreachable.pop(row.id, None)
                return False
            case _:  # the provider did not answer either: nothing is known, nothing is done
                return False
        now = self.clock()
        if not wedged(since, now, True, self.lanes.settings.jobs.healing()):
            return False
        if self.release(row, handle, wedge_reason(now - since)):
            self.unreachable.pop(row.id, None)
            return True
        return False

    def release(self, row: DispatchRow, handle: Handle, reason: str) -> bool:
        """Release a wedged machine; its attempt is lost (``gone``, outcome ``wedged``), its
        dispatch ``preempted``.  ``False`` when the dispatch moved on meanwhile or the
        release failed (said in an event; tried again next round)."""
        with self.ledger.owning(row.id) as owned:
            fresh = self.ledger.dispatch(row.id) if owned else None
            same = fresh is not None and fresh.handle is not None and fresh.handle.id == handle.id
            if fresh is None or fresh.state is not DispatchState.STARTED or not same:
                return False  # cancelled, ended or moved on meanwhile
            released = self.lanes.get(handle.lane).release(handle)
            if isinstance(released, Failure):
                message = f"its machine {handle.id} was {reason}; releasing it failed (tried again next round): "
                self.events.emit(Event.WEDGED, dispatch=row.id, message=message + released.failure().message)
                return False
            for a in self.ledger.attempts(row.id):
                if a.state in (AttemptState.RUNNING, AttemptState.PENDING):
                    self.ledger.update_attempt(a.id, AttemptState.GONE, outcome=Outcome.WEDGED, reason=reason)
            message = f"wedged: its machine {handle.id} was {reason}; released, handled as an interruption"
            self.ledger.set_dispatch(row.id, DispatchState.PREEMPTED, message=message)
        self.events.emit(Event.WEDGED, dispatch=row.id, handle=codec.to_data(handle), message=message)
        return True


def _nap(
    ledger: Ledger,
    pending: set[str],
    seconds: float,
    until: float | None,
    stop: Callable[[], bool],
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> None:
    """Sleep ``seconds`` in slices of at most one second, ending early when a pending
    dispatch leaves ``started`` (a cancel, a walk that landed) or the time is up."""
    end = clock() + seconds
    before = {d: (r.state if (r := ledger.dispatch(d)) else None) for d in pending}
    while (left := end - clock()) > 0:
        if until is not None:
            left = min(left, until - clock())
            if left <= 0:
                return
        sleep(min(1.0, left))
        if stop() or any((r.state if (r := ledger.dispatch(d)) else None) != s for d, s in before.items()):
            return


def sync_every(job: Job, table: Healing = HEALING) -> int:
    """How often a running job's outputs are synced (0: never): the job's own, else
    ``[jobs] sync_every_s`` (in ``table``), else the table's."""
    return policy_of(job, table).sync_every_s


def exit_of(rows: Sequence[DispatchRow], err: Callable[[str], object] | None = None) -> int:
    """The exit status of a waited-for dispatch: the job's own code (one job), else 0 only
    when every copy succeeded (the others named through ``err``).  A job whose outputs did
    not come back (the pull failed; its machine is kept for ``eps pull``) did not succeed."""
    say = err or (lambda _line: None)
    unpulled = [r for r in rows if _not_pulled(r)]
    for r in unpulled:
        say(f"eps: {r.id}: {r.message}\n")
    if len(rows) == 1:
        r = rows[0]
        code = exit_status(r.state, r.job_status, r.exit_code)
        return code if code != 0 or not unpulled else 1
    failed = [r for r in rows if exit_status(r.state, r.job_status, r.exit_code) != 0]
    for r in failed:  # a copy of --count or a task of a sweep: named by its index too
        who = f"{r.parent} task {r.job.task_index} ({r.id})" if r.parent else r.id
        say(f"eps: {who}: {result_word(r.state, r.job_status, r.exit_code)}\n")
    return 1 if failed or unpulled else 0


def _not_pulled(row: DispatchRow) -> bool:
    """The job ended and its end was read, but its outputs did not come back."""
    return (row.state is DispatchState.ENDED and row.job_status is not None and row.pulled_at is None
            and row.stored_at is None)  # fmt: skip
