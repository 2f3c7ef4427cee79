"""One set of operations, three front doors.  The command line (:mod:`eps.shell.cli`), the
Python API (:mod:`eps.api`) and the MCP server (:mod:`eps.shell.mcp`) parse their input
and render what these functions return; the work is here.

Each operation takes typed inputs (a core :class:`~eps.core.model.Job`, records, numbers) and returns the ``--json``
document of its command as data: a dict with ``schema_version``, valid against the schema of the same name in
``eps/schemas`` (``check``, ``intents``, ``plan``, ``execute``, ``status``, ``wait``, ``logs``, ``pull``,
``cancel``).  Bad input raises :class:`~eps.core.model.JobError` (its ``code`` and text are the CLI's error object,
the did-you-mean included) or :class:`~eps.shell.config.settings.ConfigError`, before anything is changed.  A
dispatch named ``D/phase`` is that pipeline phase's own row at every door (:mod:`eps.shell.service.phase_address`).

Nothing here writes to stdout (the MCP server speaks its protocol there); the notes a
command has for people go to ``err`` (stderr by default).  Every operation that waits is
bounded: :meth:`Service.wait` by its ``timeout_s``, :meth:`Service.execute` returns as
soon as the supervisor owns the dispatch.  Cheap to import: the plan path loads only the
pure core; the ledger, the lanes and the walker load when an operation needs them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from eps.core.contract import LOGS_DEFAULT_BYTES, LOGS_MAX_BYTES, TOOLS, WAIT_DEFAULT_S, WAIT_MAX_S
from eps.core.events import Event
from eps.core.model import CapacitySnapshot, Job, JobError, ParkState, QosGrants
from eps.shell.service.context import LOOK_S, Ctx, doc
from eps.shell.service.errors import NotTaken
from eps.shell.service.phase_address import resolve  # D/phase, for every door
from eps.shell.service.planning import Planned, given, park_state, plan

if TYPE_CHECKING:
    from eps.shell.config.settings import Settings
    from eps.shell.lanes import LaneOptions, Lanes
    from eps.shell.lanes.jobs import JobFiles
    from eps.shell.request.job import JobRequest
    from eps.shell.state.events import Events
    from eps.shell.state.ledger import DispatchRow

__all__ = [
    "LOGS_DEFAULT_BYTES",
    "LOGS_MAX_BYTES",
    "LOOK_S",
    "TOOLS",
    "WAIT_DEFAULT_S",
    "WAIT_MAX_S",
    "Ctx",
    "NotTaken",
    "Planned",
    "Prepared",
    "Service",
    "doc",
    "given",
    "park_state",
    "plan",
]  # fmt: skip

class Prepared(NamedTuple):
    """A job checked for execute: the job (with its workdir, setup, ``--env`` names and
    time limit), the values of its ``--env`` names (never recorded) and its files; ``targets``:
    its own notification URLs (``--notify``, never recorded: :mod:`eps.shell.notify.own`)."""

    job: Job
    values: dict[str, str]
    files: JobFiles
    targets: tuple[str, ...] = ()
    inputs: tuple[dict[str, Any], ...] = ()  # each --input listed: url, dest, objects, bytes


def _stderr(line: str) -> object:
    return sys.stderr.write(line)  # sys.stderr as it is at the call (a test may have replaced it)


class Collect:
    """Events kept as their ``--json`` objects, not shown (the Python API's inline walk)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def emit(self, event: Event, **fields: Any) -> None:
        from eps.shell.state.events import record

        self.records.append(record(event, **fields))


# --- the operations ---------------------------------------------------------------------------


def prepare(ctx: Ctx, request: JobRequest, dispatch_id: str | None, snapshot: CapacitySnapshot,
            grants: QosGrants) -> Prepared:  # fmt: skip
    """Every input error of an execute, found before anything happens (no reconcile, no call,
    nothing recorded): the shipping options, the plan, the dispatch id, the files, the job's
    own notification targets (URLs or ``env:NAME``).  A refused value is named as the
    request's door gave it."""
    try:
        return _prepare(ctx, request, dispatch_id, snapshot, grants)
    except JobError as exc:
        raise request.named(exc) from None


def _prepare(ctx: Ctx, request: JobRequest, dispatch_id: str | None, snapshot: CapacitySnapshot,
             grants: QosGrants) -> Prepared:  # fmt: skip
    from eps.core.router import with_intent_duration
    from eps.shell.request.shipping import check_files, job_options
    from eps.shell.run.walker import Walker

    targets: tuple[str, ...] = ()
    if request.notify:
        from eps.shell.notify.own import resolve

        if ctx.settings.jobs.supervise != "detached":
            raise JobError("usage", f'{request.notify_where} needs a supervisor to send them ([jobs] supervise = '
                           '"detached")', None)  # fmt: skip
        targets = resolve(request.notify, ctx.lanes.env, request.notify_where)

    job = with_intent_duration(request.job, ctx.settings.policy)  # [intents.NAME] duration, as eps plan shows it
    job, values = job_options(job, request.shipping, ctx.lanes.env)
    if job.storage or job.inputs or ctx.settings.storage is not None:
        from eps.shell.run.storage import with_storage

        job, values = with_storage(job, values, ctx.settings.storage, ctx.lanes.env, ctx.settings.jobs.sync_every_s,
                                   ctx.settings.gcp.service_account)  # fmt: skip
    from eps.core.lifecycle import with_stall_watch

    job = with_stall_watch(job, ctx.settings.jobs.stall_after_s, ctx.settings.jobs.on_stall)
    Walker.check(job, dispatch_id, snapshot, grants, ctx.settings.policy)
    files = check_files(job, values, ctx.err)
    inputs: tuple[dict[str, Any], ...] = ()
    if job.inputs:  # each prefix listed before anything happens: one with nothing there is bad input
        from eps.shell.run.storage import measure_inputs

        inputs = measure_inputs(ctx.settings.state_dir, job, ctx.settings.storage, ctx.lanes.env)
    return Prepared(job, values, files, targets, inputs)


def new_dispatch_id() -> str:
    from eps.shell.run.walker import Walker

    return Walker.new_dispatch_id()


def hand_over(ctx: Ctx, ready: Prepared, dispatch: str, snapshot: CapacitySnapshot | None,
              grants: QosGrants | None) -> None:  # fmt: skip
    """Record the dispatch and hand it to the state directory's supervisor (started if none
    runs); return once it owns it.  ``snapshot``/``grants``: what the caller gave (handed
    over with it).  :class:`NotTaken` when no supervisor took it on (it stays recorded)."""
    from eps.core.tables import DEFAULT_GRANTS
    from eps.shell.lanes.jobs import write_env_values
    from eps.shell.run import ownership
    from eps.shell.run.walker import Walker

    settings, ledger, lanes = ctx.settings, ctx.ledger, ctx.lanes
    if ledger.shared and ready.job.storage and ready.files.workdir is not None:  # for a takeover before launch
        from eps.core.storage import StorageError
        from eps.shell.run.stored_workdir import put_workdir

        try:
            put_workdir(settings.state_dir, ready.job, dispatch, ready.files, settings.storage, lanes.env)
        except StorageError as exc:
            raise JobError("storage", str(exc), ready.job) from None
    ownership.write_inputs(settings.state_dir, dispatch, snapshot, grants, ctx.lanes.env)
    if ready.targets:  # mode 0600; dropped by the supervisor once no notice is owed
        from eps.shell.notify.own import keep

        keep(settings.state_dir, dispatch, ready.targets)
    write_env_values(settings.state_dir, dispatch, ready.values)  # mode 0600; dropped when the dispatch settles
    Walker(settings, ledger, lanes, ctx.events, grants=grants or DEFAULT_GRANTS,
           snapshot=snapshot or CapacitySnapshot(), files=ready.files).record(ready.job, dispatch)  # fmt: skip
    ownership.share_inputs(ledger, dispatch, settings)  # a shared ledger: for a host that takes it over
    if ready.inputs:  # what the machine will copy, and how big it is: the first line of the dispatch's events
        from eps.shell.state.events import EventLog

        EventLog(settings.state_dir, dispatch).emit(Event.INPUTS, dispatch=dispatch, inputs=list(ready.inputs))
    take_over(ctx, dispatch)


def submit(ctx: Ctx, request: JobRequest, dispatch_id: str | None, snapshot: CapacitySnapshot | None,
           grants: QosGrants | None) -> str:  # fmt: skip
    """``execute`` under a supervisor, for every door: every input error first (nothing
    recorded), then the dispatch recorded and handed over; its id.  ``snapshot``/``grants``:
    what the caller gave (``None``: none; the walk gathers them)."""
    from eps.core.tables import DEFAULT_GRANTS

    unused(ctx, dispatch_id)
    ready = prepare(ctx, request, dispatch_id, snapshot or CapacitySnapshot(), grants or DEFAULT_GRANTS)
    dispatch = dispatch_id or new_dispatch_id()
    hand_over(ctx, ready, dispatch, snapshot, grants)
    return dispatch


def take_over(ctx: Ctx, dispatch: str) -> None:
    """Make sure a supervisor owns the recorded ``dispatch`` (:class:`NotTaken` if none does)."""
    from eps.shell.run import ownership
    state_dir = ctx.settings.state_dir
    try:
        ownership.ensure(state_dir, ctx.lanes.env)
        taken = ownership.supervised(state_dir, dispatch, ctx.lanes.env)
    except ownership.SupervisorError as exc:
        raise NotTaken(dispatch, str(exc)) from None
    if not taken:
        raise NotTaken(dispatch, f"no supervisor took it on (see {ownership.log_file(state_dir)})")


def known(ctx: Ctx, dispatch: str) -> DispatchRow:
    """The ledger's row of ``dispatch``; ``unknown_dispatch`` when it has none."""
    row = ctx.ledger.dispatch(dispatch)
    if row is None:
        raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
    return row


def unused(ctx: Ctx, dispatch_id: str | None) -> None:
    """A ``--dispatch-id`` the caller chose is not taken yet (``dispatch_exists`` when it is)."""
    if dispatch_id is not None and ctx.ledger.dispatch(dispatch_id) is not None:
        raise JobError("dispatch_exists", f"dispatch {dispatch_id} already exists", None)


def resume(ctx: Ctx, dispatch: str) -> str | None:
    """``eps execute --resume D``: a supervised dispatch taken on again (an interrupted or
    preempted one walks again); ``None`` once a supervisor owns it, else why nothing resumes.
    :class:`NotTaken` when no supervisor took it."""
    from eps.core.states import DispatchState
    from eps.shell.run import ownership

    row = known(ctx, dispatch)  # checked by the front door; gone since?
    with ctx.ledger.owning(dispatch) as owned:
        if owned and row.state in (DispatchState.INTERRUPTED, DispatchState.PREEMPTED):
            ctx.ledger.set_dispatch(dispatch, DispatchState.WALKING, message="resumed")
    row = ctx.ledger.dispatch(dispatch) or row
    if row.state not in ownership.SUPERVISED:
        return f"dispatch {dispatch} is {row.state}; nothing to resume"
    take_over(ctx, dispatch)
    return None


def revive(ctx: Ctx) -> int | None:
    """A supervisor for every dispatch a dead one left (its pid; ``None`` when none is owed)."""
    from eps.shell.run import ownership

    return ownership.revive(ctx.ledger, ctx.lanes.env)


def supervised(ctx: Ctx) -> list[DispatchRow]:
    """The dispatches a supervisor owes a walk (``eps supervise``)."""
    from eps.shell.run import ownership

    return [r for r in ownership.unsettled_roots(ctx.ledger) if r.state in ownership.SUPERVISED]


def exit_of(rows: Sequence[DispatchRow], say: Callable[[str], object]) -> int:
    """The exit code of a followed dispatch's rows (the job's own, or eps's), its lines to ``say``."""
    from eps.shell.run.follow import exit_of as of

    return of(rows, say)


def notify_test(settings: Settings) -> tuple[dict[str, Any], str]:
    """``eps notify test``: one test message to each configured target; the document (which
    answered) and its text."""
    from eps.shell.notify.trial import notify_test as trial
    from eps.shell.notify.trial import text

    doc = trial(settings)
    return doc, text(doc)


def execute_doc(ctx: Ctx, dispatch: str) -> dict[str, Any]:
    """``eps execute --detach --json``: the dispatch and its state now."""
    from eps.shell.state.events import log_path, read_from

    row = ctx.ledger.dispatch(dispatch)
    told = [e for e in read_from(log_path(ctx.settings.state_dir, dispatch), 0)[0] if e.get("event") == "inputs"]
    inputs = {"inputs": told[0]["inputs"]} if told else {}
    return doc(dispatch=dispatch, state=row.state.value if row else None, **inputs)


def status(
    ctx: Ctx,
    dispatch: str | None = None,
    *,
    limit: int | None = 20,
    active: bool = False,
    since_s: float | None = None,
    intent: str | None = None,
    timeout_s: float = 5.0,
    host: str | None = None,
    mine: bool = False,
) -> dict[str, Any]:
    """``eps status --json``: reconcile (each provider within ``timeout_s``, only those of the
    lanes the unsettled dispatches are on; one without credentials is not asked), then the rows
    from the ledger and notes on what was not asked.
    ``host``: only the dispatches that team host owns (a shared ledger); ``mine``: only this
    host's (on SQLite every dispatch is this host's)."""
    from eps.shell.run import held
    from eps.shell.run.reconcile import Reconciler
    from eps.shell.service.status_rows import status as rows_now

    settings, ledger, lanes = ctx.settings, ctx.ledger, ctx.lanes
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= 100_000):
        raise JobError("status", f"limit must be a whole number 0..100000, got {limit!r}", None)
    if intent is not None and settings.policy.intent(intent) is None:
        from eps.core.router import unknown_intent

        raise unknown_intent(intent, settings.policy)
    if mine and host is not None:
        raise JobError("usage", "status: mine or host NAME, not both", None)
    if host is not None and (not isinstance(host, str) or not host.strip()):
        raise JobError("usage", f"status: host must be a host's name, got {host!r}", None)
    host = ledger.host if mine else host  # mine on SQLite (host None): every dispatch is this host's
    rec = Reconciler(ledger, lanes, ctx.events, workers=settings.fanout_concurrency, answer_within_s=float(timeout_s),
                     used_lanes_only=True)  # fmt: skip
    rec.reconcile({dispatch} if dispatch else None)
    since = None if since_s is None else time.time() - since_s
    rows = rows_now(ledger, dispatch, limit=limit, active=active, since=since, intent=intent, policy=settings.policy,
                    host=host)  # fmt: skip
    held.annotate(ledger.state_dir, rows)  # outputs held back for lack of disk
    for d, why in sorted(ledger.quarantined.items()):
        ctx.err(f"eps: warning: dispatch {d}: its ledger row cannot be read ({why}); left as it is\n")
    late = {lane: why for lane, why in rec.unchecked.items() if lane not in rec.down}
    return doc(dispatches=rows, notes=_status_notes(rows, lanes, late))


def _status_notes(rows: list[dict[str, Any]], lanes: Lanes, unchecked: dict[str, str]) -> list[dict[str, Any]]:
    """Why the providers of the rows shown were not asked (no credentials, not configured) or
    did not answer in time: those rows are as the ledger has them."""
    from eps.shell.run.reconcile import ACTIVE_STATES

    notes = []
    live = [r for r in rows if r["state"] in {s.value for s in ACTIVE_STATES}]
    used = {r["handle"]["lane"] for r in live if r["handle"]} | {
        a["rung"].split("/", 1)[0] for r in live for a in r["attempts"]
    }
    for lane in sorted(used):
        if lanes.policy.lane_kind(lane) is None:
            continue
        down = lanes.down(lane)
        if down is not None:
            notes.append({"lane": lane, "code": down.code.value, "text": f"not checked: {down.reason}"})
    for lane, why in sorted(unchecked.items()):
        notes.append({"lane": lane, "code": "unchecked", "text": why})
    return notes


def cancel(ctx: Ctx, dispatches: Sequence[str] | None, *, force: bool = False) -> dict[str, Any]:
    """``eps cancel --json``: stop ``dispatches`` (``None``: every live one) and release what
    they hold.  On a ledger hosts share, a dispatch another user started is cancelled only
    with ``force`` (without it: ``not_yours``, before anything is changed or asked), and each
    cancel records who made it, from which host (``cancelled_by``, in the ledger)."""
    from eps.shell.run.reconcile import cancel as stop

    ledger = ctx.ledger
    if ledger.shared and not force:
        from eps.shell.state.team import others_of

        if theirs := others_of(ledger, dispatches, ctx.lanes.env):
            (d, o), more = theirs[0], f" (and {len(theirs) - 1} more of other users)" if len(theirs) > 1 else ""
            user, host = o.starter()
            raise JobError("not_yours", f"dispatch {d} was started by {user} on {host}{more}; to cancel it "
                           "anyway: eps cancel --force (recorded as your cancel)", None)  # fmt: skip
    rep = stop(ledger, ctx.lanes, ctx.events, dispatches, workers=ctx.settings.fanout_concurrency)
    if ledger.shared and rep["cancelled"]:
        from eps.shell.state.team import record_cancel, user_name

        user = user_name(ctx.lanes.env)
        record_cancel(ledger, rep["cancelled"], user)
        rep["cancelled_by"] = {"user": user, "host": ledger.host}
    return doc(**rep)


def pull(ctx: Ctx, dispatch: str, to: str | None = None,
         each: Callable[[str, str], object] | None = None, *, task: int | None = None) -> dict[str, Any]:  # fmt: skip
    """``eps pull --json``: each copy's outputs back (``<state>/outputs/<dispatch>`` or
    ``to``); ``each`` hears of each copy as it comes back.  ``task``: only that task of a
    sweep (into ``<state>/outputs/<its row>``, or ``to``)."""
    from eps.shell.run.pull import pull_each

    if task is not None:
        from eps.shell.run.logs_read import task_row

        dispatch = task_row(ctx.ledger, dispatch, task).id
    pulled: list[dict[str, str]] = []

    def back(d: str, note: str) -> None:
        pulled.append({"dispatch": d, "note": note})
        if each is not None:
            each(d, note)

    pull_each(ctx.ledger, ctx.lanes, dispatch, to, back)
    return doc(dispatch=dispatch, pulled=pulled)


def reconcile(ctx: Ctx) -> dict[str, Any]:
    """``eps reconcile --json``: the ledger against the providers; what was adopted, ended,
    released or could not be checked."""
    from eps.shell.run.reconcile import Reconciler

    return doc(**Reconciler(ctx.ledger, ctx.lanes, ctx.events, workers=ctx.settings.fanout_concurrency).reconcile())


def logs(ctx: Ctx, dispatch: str, *, offset: int = 0, max_bytes: int = LOGS_DEFAULT_BYTES,
         tail_lines: int | None = None, task: int | None = None) -> dict[str, Any]:  # fmt: skip
    """A bounded piece of each job's log: ``max_bytes`` (at most :data:`LOGS_MAX_BYTES`) from
    byte ``offset``, or with ``tail_lines`` the last lines within ``max_bytes``.  Each entry
    says the log's ``size`` now and ``next_offset`` to continue from.  A sweep: task ``task``'s
    log (none given: task 0's, and ``note`` says so)."""
    from eps.shell.run.logs_read import log_rows, read_piece

    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise JobError("logs", f"offset must be a whole number >= 0, got {offset!r}", None)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not 1 <= max_bytes <= LOGS_MAX_BYTES:
        raise JobError("logs", f"max_bytes must be 1..{LOGS_MAX_BYTES}, got {max_bytes!r}", None)
    if tail_lines is not None and (isinstance(tail_lines, bool) or not isinstance(tail_lines, int) or tail_lines < 1):
        raise JobError("logs", f"tail_lines must be a whole number >= 1, got {tail_lines!r}", None)
    rows, note = log_rows(ctx.ledger, dispatch, task)
    pieces = [read_piece(ctx.ledger, ctx.lanes, row, offset, max_bytes, tail_lines) for row in rows]
    return doc(dispatch=dispatch, logs=pieces, **({"task": rows[0].job.task_index} if task is not None or note else {}),
               **({"note": note} if note else {}))  # fmt: skip


# --- the front doors' one object --------------------------------------------------------------


class Service:
    """The operations with their context: the settings (read once, from ``env``: by default
    ``os.environ``), a ledger and the lanes opened per call.  ``lane_options`` (an
    ``eps.shell.lanes.LaneOptions``) lets tests point the lanes at local servers."""

    def __init__(self, env: Mapping[str, str] | None = None, *, settings: Settings | None = None,
                 lane_options: LaneOptions | None = None,
                 err: Callable[[str], object] | None = None) -> None:  # fmt: skip
        self.env: dict[str, str] = dict(os.environ if env is None else env)
        self._settings = settings
        self.lane_options = lane_options
        self.err = err or _stderr

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from eps.shell.config.load import load_settings

            self._settings = load_settings(self.env)
        return self._settings

    def intents(self) -> dict[str, Any]:
        from eps.shell.render.documents import intents_doc

        return intents_doc(self.settings.policy)

    def check(self, *, timeout_s: float = 10.0) -> dict[str, Any]:
        from eps.shell.service.check import gather

        return gather(self.settings, self.env, self.lane_options, float(timeout_s))

    def plan(self, job: JobRequest | Job, *, snapshot: CapacitySnapshot | None = None,
             grants: QosGrants | None = None, park: ParkState | None = None) -> Planned:  # fmt: skip
        return plan(self.settings, self.env, job, snapshot, grants, park)

    @contextmanager
    def opened(self, events: Events | None = None, *, revive: bool = False) -> Iterator[Ctx]:
        """A ledger and the lanes for one operation (closed after it); ``revive``: a dispatch
        left by a dead supervisor is taken on again first (as ``eps status`` does)."""
        from eps.core.model import evolve
        from eps.shell.lanes import LaneOptions, Lanes
        from eps.shell.state.events import Silent
        from eps.shell.state.ledger import DispatchBusy, Ledger, LedgerError, StateUnreachable

        opts = self.lane_options
        opts = LaneOptions(env=self.env) if opts is None else evolve(opts, env=opts.env or self.env)
        try:
            ledger = Ledger(self.settings.state_dir, url=self.settings.state_url, host=self.settings.state_host)
        except StateUnreachable:
            raise  # not bad input: the state's database is down (eps.shell.service.errors)
        except LedgerError as exc:
            raise JobError("ledger", str(exc), None) from None
        lanes = Lanes(self.settings, opts)
        try:
            if revive and self.settings.jobs.supervise == "detached":
                from eps.shell.run import ownership
                ownership.revive(ledger, lanes.env)
            yield Ctx(self.settings, ledger, lanes, events or Silent(), self.err)
        except StateUnreachable:
            raise
        except LedgerError as exc:
            raise JobError("ledger", str(exc), None) from None
        except DispatchBusy as exc:
            raise JobError("busy", str(exc), None) from None
        finally:
            lanes.close()
            ledger.close()

    def execute(self, request: JobRequest, *, dispatch_id: str | None = None, snapshot: CapacitySnapshot | None = None,
                grants: QosGrants | None = None) -> dict[str, Any]:  # fmt: skip
        """Record the job and hand it to the supervisor; return at once (detached) with the
        dispatch id and its state.  Needs ``[jobs] supervise = "detached"`` (the default)."""
        if self.settings.jobs.supervise != "detached":
            raise JobError("usage", 'a detached execute needs a supervisor ([jobs] supervise = "detached")', None)
        with self.opened() as ctx:
            return execute_doc(ctx, submit(ctx, request, dispatch_id, snapshot, grants))

    def status(self, dispatch: str | None = None, **filters: Any) -> dict[str, Any]:
        """:func:`status`: ``limit``, ``active``, ``since_s``, ``intent``, ``timeout_s``,
        ``mine``, ``host``."""
        with self.opened(revive=True) as ctx:
            return status(ctx, dispatch and resolve(ctx, dispatch), **filters)

    def wait(self, dispatch: str, *, timeout_s: float = WAIT_DEFAULT_S, landed: bool = False) -> dict[str, Any]:
        from eps.shell.service.waits import wait

        with self.opened(revive=True) as ctx:
            return wait(ctx, resolve(ctx, dispatch), timeout_s=timeout_s, landed=landed)

    def wait_until(self, dispatch: str, bound_s: float | None, *, landed: bool = False, slice_s: float = WAIT_MAX_S,
                   between: Callable[[float, dict[str, Any]], object] | None = None) -> dict[str, Any]:  # fmt: skip
        """:func:`~eps.shell.service.waits.wait_until`, in one context."""
        from eps.shell.service.waits import wait_until

        with self.opened(revive=True) as ctx:
            return wait_until(ctx, resolve(ctx, dispatch), bound_s, landed=landed, slice_s=slice_s, between=between)

    def logs(self, dispatch: str, *, offset: int = 0, max_bytes: int = LOGS_DEFAULT_BYTES,
             tail_lines: int | None = None, task: int | None = None) -> dict[str, Any]:  # fmt: skip
        with self.opened(revive=True) as ctx:
            return logs(ctx, resolve(ctx, dispatch), offset=offset, max_bytes=max_bytes, tail_lines=tail_lines,
                        task=task)

    def pull(self, dispatch: str, *, to: str | None = None, task: int | None = None) -> dict[str, Any]:
        with self.opened() as ctx:
            return pull(ctx, resolve(ctx, dispatch), to, task=task)

    def cancel(self, dispatch: str | None = None, *, every: bool = False, force: bool = False) -> dict[str, Any]:
        """``eps cancel DISPATCH`` (or ``--all``: ``every``; ``force``: another user's too)."""
        if not dispatch and not every:
            raise JobError("usage", "eps cancel: name a dispatch or --all", None)
        with self.opened() as ctx:
            return cancel(ctx, [resolve(ctx, dispatch)] if dispatch else None, force=force)

    def next_events(self, dispatches: Sequence[str] | None = None, cursor: Mapping[str, int] | None = None, *,
                    timeout_s: float | None = None, max_events: int | None = None) -> dict[str, Any]:  # fmt: skip
        """The next events of ``dispatches`` (``None``: every one of this state directory) after
        ``cursor`` (the ``next_cursor`` of the last call), waiting at most ``timeout_s`` (default
        30 s) for one, at most ``max_events`` (100): :func:`eps.shell.service.feed.next_events` (the MCP
        tool ``next_events``)."""
        from eps.shell.service.feed import next_events

        with self.opened(revive=True) as ctx:
            return next_events(ctx.ledger, dispatches, cursor, timeout_s=timeout_s, max_events=max_events)

    def events(self, dispatch: str, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """The dispatch's events after byte ``offset`` of its event log, and the next offset."""
        from eps.shell.state.events import log_path, read_from

        return read_from(log_path(self.settings.state_dir, dispatch), offset)
