"""The supervisor: the one process that owns the dispatches of a state directory.

``eps execute`` checks the job, records the dispatch and hands it over; the supervisor
does everything else in one loop per dispatch (a thread each): walk the plan (park,
withdraw, fail over), launch, follow the job, pull, release, finish.  Every event goes to
the dispatch's event log (:mod:`eps.shell.state.events`); callers attach to it and detach
from it at will, and nothing they do (Ctrl-C, SIGTERM, SIGKILL, a closed laptop)
interrupts the dispatch: ``eps cancel`` is the one way to stop one.

One supervisor per state directory, started on demand and gone when it has had nothing
to do for ``[jobs] supervisor_idle_s``: it holds ``<state>/supervisor.lock`` (flock) for
its life, and each dispatch's own lock while it owns it, so a dispatch is walked by
exactly one process at a time.  Its death loses nothing: the ledger is the single source
of truth, and the next eps command that reads it (status, execute, wait, attach, logs,
reconcile, supervise) starts a new supervisor, which resumes every dispatch that is not
settled with the walk's guarantees (elapsed park kept, never a second submission, never
a second machine, a made machine reused).

It also sends the dispatches' notifications (``[notify]``, :mod:`eps.shell.notify.pump`):
from their event logs, in a thread of their own, never in a dispatch's way.  An end is
written to the event log with its exit code, lane and outputs (:meth:`Supervisor.facts`),
and a run the providers took back without an ``interrupted`` event (a spot VM preempted,
found by reconcile) gets one, so the log alone says what happened.  It stays while a
notification is still owed.
"""


from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from eps.core.events import RUN_BEGINS, WITH_FACTS, Event
from eps.core.model import CapacitySnapshot, Job, LaneDown, QosGrants, evolve
from eps.core.states import DispatchState
from eps.shell.run.ownership import SUPERVISED, lock_path, pid_path, read_inputs, unsettled_roots
from eps.shell.state.errors import LedgerError, StateUnreachable
from eps.shell.state.events import EventLog

if TYPE_CHECKING:
    from eps.shell.config.settings import Settings
    from eps.shell.lanes import Lanes
    from eps.shell.notify.pump import Pump
    from eps.shell.state.ledger import DispatchRow, Ledger
    from eps.shell.state.team import Team

#: How often the supervisor looks for dispatches to take on.
TICK_S = 0.2
#: A dispatch whose loop ended while it was still unsettled (an error) is taken on again after this.
RETRY_S = 30.0


def gather(
    lanes: Lanes, ledger: Ledger, job: Job | None, snapshot: CapacitySnapshot, grants: QosGrants, *, grants_given: bool
) -> tuple[CapacitySnapshot, QosGrants]:
    """What is known before the walk besides the files: the grants, the lanes that are down
    here, and the machines the ledger remembers (boot loops).  The clusters' grants are asked
    for (sacctmgr: about half a second) only when the job could use a cluster at all: a CPU
    job never does (P1)."""
    from eps.core.router import plan
    from eps.shell.run import cluster_faults
    snapshot = cluster_faults.known(ledger.remember(snapshot), ledger.state_dir, lanes.policy)
    down: tuple[LaneDown, ...] = lanes.unavailable()
    wants_cluster = job is None or any(
        lanes.policy.cluster(r.lane) is not None for r in plan(job, snapshot, grants, None, policy=lanes.policy).rungs
    )
    if not grants_given and wants_cluster:
        grants, cluster_down = lanes.discover_grants(grants)
        down = (*down, *cluster_down)
    if wants_cluster:  # what the user's jobs hold under each capped QoS, every host's (eps.core.holdings)
        from eps.shell.state.team import with_holdings

        snapshot = with_holdings(snapshot, ledger, lanes.policy, grants)
    return evolve(snapshot, unavailable=(*snapshot.unavailable, *down)), grants


# --- the supervisor itself -----------------------------------------------------------------------


class Supervisor:
    def __init__(self, settings: Settings, ledger: Ledger, lanes: Lanes, *, idle_s: float, tick_s: float = TICK_S,
                 notifier: Pump | None = None, team: Team | None = None) -> None:  # fmt: skip
        self.settings = settings
        self.team = team  # a shared ledger: this host's leases (eps.shell.state.team); None: one host, no leases
        self.ledger = ledger
        self.lanes = lanes
        self.idle_s = idle_s
        self.tick_s = tick_s
        self.notifier = notifier  # eps.shell.notify.pump.Pump, or None: no notifications
        self.told_interrupted: set[str] = set()  # dispatches whose interruption this run is in their log
        self.threads: dict[str, threading.Thread] = {}
        self.retry_at: dict[str, float] = {}
        self.stopping = threading.Event()

    def serve(self) -> int:
        idle_since = time.monotonic()
        said: str | None = None  # the database's error last said (None: it answers)
        out_s = 0.0  # how long to wait before asking it again
        if self.notifier is not None:
            self.notifier.start()
        while not self.stopping.is_set():
            wait_s = self.tick_s
            # a dispatch whose thread ended (a lease lost, the database out of reach) is taken on again
            # this round, once the database answers: the first round after an outage is busy, not idle
            self.threads = {d: t for d, t in self.threads.items() if t.is_alive()}
            try:
                self.take_on()
                busy = bool(self.threads) or (self.notifier is not None and self.notifier.owes())
                said, out_s = None, 0.0
            except StateUnreachable as exc:
                # The database out of reach: nothing is taken on, nothing let go, and the supervisor
                # stays (it is not idle: what it owned is to be taken on again once the database answers),
                # asking again less and less often (up to 5 s).
                if str(exc) != said:  # once, not every round
                    _say(f"not taking dispatches on now: {exc}")
                said, busy = str(exc), True
                out_s = min(5.0, max(self.tick_s, out_s * 2))
                wait_s = out_s
            if busy:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= self.idle_s:
                break
            self.stopping.wait(wait_s)
        for t in self.threads.values():
            t.join()
        if self.notifier is not None:
            self.notifier.stop()
        return 0

    def take_on(self) -> None:
        """Own every unsettled dispatch that no process owns (a new one, or a dead supervisor's)."""
        from eps.shell.state.ledger import DispatchBusy

        now = time.monotonic()
        for row in unsettled_roots(self.ledger):
            d = row.id
            if row.parent is not None or d in self.threads or self.retry_at.get(d, 0.0) > now:
                continue
            try:
                self.ledger.acquire(d)
            except DispatchBusy:
                continue
            if self.team is not None and not self.team.take(d, [c.id for c in self.ledger.children(d)]):
                self.ledger.release(d)  # another host's lease runs: its supervisor's
                continue
            t = threading.Thread(target=self._run, args=(d,), name=f"dispatch-{d}", daemon=True)
            self.threads[d] = t
            t.start()

    def _run(self, dispatch: str) -> None:
        from eps.shell.state.team import LeaseLost

        retry_s = RETRY_S
        try:
            if self.notifier is not None:
                self.notifier.watch(dispatch)
            self.drive(dispatch)
            if not self.acting(dispatch):
                raise LeaseLost(f"dispatch {dispatch}: its lease was not renewed in time")
        except (LeaseLost, StateUnreachable) as exc:  # its lease lost, or the database out of reach: it stops, as it is
            _say(f"dispatch {dispatch}: stopped acting on it: {exc}")
            retry_s = 1.0 if self.team is None else self.team.terms.renew_every_s
        except Exception:  # a bug or an unreadable row: logged; the dispatch is taken on again later
            sys.stderr.write(f"dispatch {dispatch}:\n{traceback.format_exc()}")
            sys.stderr.flush()
        finally:
            self.ledger.release(dispatch)
            if self.team is not None:
                self.team.drop(dispatch)
            try:
                row = self.ledger.dispatch(dispatch)
            except LedgerError:
                row = None
                self.retry_at[dispatch] = time.monotonic() + retry_s
            if row is not None and row.state in SUPERVISED:
                self.retry_at[dispatch] = time.monotonic() + retry_s

    def acting(self, dispatch: str) -> bool:
        """This supervisor may act on ``dispatch`` (always, on a ledger no other host shares)."""
        return self.team is None or self.team.acting(dispatch)

    def drive(self, dispatch: str) -> None:
        """One dispatch, from wherever the ledger has it to its end, relaunched as often as
        its retry policy says (an interruption of a restartable job)."""
        while True:
            if not self.wait_for_capacity(dispatch):
                return
            self.drive_once(dispatch)
            if self.stopping.is_set() or not self.acting(dispatch):
                return
            self.tell_interrupted(dispatch)
            row = self.ledger.dispatch(dispatch)
            if row is not None and row.state is DispatchState.WAITING:
                continue
            if not self.relaunch(dispatch):
                return

    def wait_for_capacity(self, dispatch: str) -> bool:
        """A dispatch waiting for capacity: sleep until its next try (a cancel ends the wait),
        then walk it again from the top.  ``False`` when it is not to be driven now."""
        row = self.ledger.dispatch(dispatch)
        while row is not None and row.state is DispatchState.WAITING:
            left = (row.next_try_at or 0.0) - time.time()
            if left <= 0:
                if self.ledger.set_dispatch(dispatch, DispatchState.WALKING, message="planning again") is None:
                    return False
                self.log(dispatch).emit(Event.TRYING_AGAIN, dispatch=dispatch, round=row.capacity_waits)
                return True
            if self.stopping.wait(min(left, 1.0)):
                return False
            row = self.ledger.dispatch(dispatch)
        return row is not None and row.state is not DispatchState.CANCELLED

    def relaunch(self, dispatch: str) -> bool:
        """An interrupted dispatch, or one whose job failed, that its policy relaunches:
        walking again, its restart count raised (the walk plans again from what the run
        taught, and ships the outputs synced so far back into the new run)."""
        from eps.core.healing import Relaunch
        from eps.shell.run.ownership import relaunch_of

        row = self.ledger.dispatch(dispatch)
        if row is None or self.ledger.children(dispatch):
            return False
        got = relaunch_of(row)
        if not isinstance(got, Relaunch):
            return False
        if self.ledger.relaunch(dispatch, evolve(row.job, restart=got.restart), f"relaunching: {got.reason}") is None:
            return False  # cancelled meanwhile
        self.log(dispatch).emit(Event.RELAUNCHED, dispatch=dispatch, restart=got.restart, message=got.reason)
        return True

    def log(self, dispatch: str) -> EventLog:
        """The event log of ``dispatch``, each event with :meth:`facts` added."""
        return EventLog(self.ledger.state_dir, dispatch, facts=self.facts)

    def facts(self, event: Event, fields: dict[str, Any]) -> dict[str, Any]:
        """What the ledger says when an event is written, for whoever reads the log later
        (the notifications): an end's exit code (what ``eps wait`` leaves with), how it ended,
        its lane, whether its outputs came back and where they are; an interruption's lane."""
        d = fields.get("dispatch")
        if event in RUN_BEGINS and d:
            self.told_interrupted.discard(str(d))
        if event not in WITH_FACTS or not d:
            return {}
        row = self.ledger.dispatch(str(d))
        if row is None:
            return {}
        lane = {"lane": row.handle.lane} if row.handle is not None and "lane" not in fields else {}
        if event != Event.ENDED:
            if event == Event.INTERRUPTED or fields.get("handle"):
                self.told_interrupted.add(row.id)
            return lane
        from eps.core.ends import result_word
        from eps.core.lifecycle import exit_status

        return {**lane, "exit_code": exit_status(row.state, row.job_status, row.exit_code),
                "job_status": row.job_status, "result": result_word(row.state, row.job_status, row.exit_code),
                "pulled": row.pulled_at is not None or row.stored_at is not None,
                "outputs": _outputs(self.ledger.state_dir, row)}  # fmt: skip

    def tell_interrupted(self, dispatch: str) -> None:
        """A run the providers took back that no ``interrupted`` event told of (reconcile found
        its spot VM preempted, or its machine gone): say so now, once per run."""
        own = self.ledger.dispatch(dispatch)
        for r in self.ledger.children(dispatch) or ([] if own is None else [own]):
            if r.state is DispatchState.PREEMPTED and r.id not in self.told_interrupted:
                self.log(dispatch).emit(Event.INTERRUPTED, dispatch=r.id, message=r.message or "preempted")

    def drive_once(self, dispatch: str) -> None:
        """One run of a dispatch: walk (when it walks), follow it to its end."""
        from eps.core.tables import DEFAULT_GRANTS
        from eps.shell.run.follow import follow_to_end, ids_of
        from eps.shell.run.walker import Walker

        log = self.log(dispatch)
        row = self.ledger.dispatch(dispatch)
        if row is None:
            return
        children = self.ledger.children(dispatch)
        rows = children or [row]
        revived = row.state is not DispatchState.WALKING or any(self.ledger.attempts(r.id) for r in rows)
        log.emit(Event.SUPERVISED, dispatch=dispatch, pid=os.getpid(), state=row.state.value, revived=revived)
        from eps.shell.run import pipelines

        if pipelines.drive(self, dispatch, gather):  # a pipeline: its phases, each walked and followed as one job
            return
        walking = [r.id for r in rows if r.state is DispatchState.WALKING]
        settings, lanes = self.own_settings(dispatch)

        def stop() -> bool:
            return self.stopping.is_set() or not self.acting(dispatch)

        try:
            if walking:
                snap, grants = read_inputs(self.ledger.state_dir, dispatch, self.ledger)
                given = grants is not None
                snapshot, grants_now = gather(lanes, self.ledger, row.job, snap or CapacitySnapshot(),
                                              grants or DEFAULT_GRANTS, grants_given=given)  # fmt: skip
                walker = Walker(settings, self.ledger, lanes, log, grants=grants_now, snapshot=snapshot,
                                keep_locks=frozenset({dispatch}), supervised=not children, stop=stop)  # fmt: skip
                if children:
                    if not revived:
                        log.emit(Event.FANOUT, dispatch=dispatch, children=walking)
                    walker.walk_copies(dispatch, walking)
                else:
                    walker.walk_recorded(dispatch)
            follow_to_end(self.ledger, lanes, log, ids_of(self.ledger, dispatch),
                          poll_s=settings.jobs.wait_poll_s, stop=stop, sync=True)  # fmt: skip
            if children:  # the parent has ended when every copy has
                from eps.shell.run.reconcile import Reconciler

                Reconciler(self.ledger, lanes, log, wake=True).reconcile({dispatch})
        finally:
            if lanes is not self.lanes:
                lanes.close()

    def own_settings(self, dispatch: str) -> tuple[Any, Any]:
        """The settings ``dispatch`` was handed over with, and lanes built from them (this
        supervisor's own when they are the same): a dispatch is walked as the ``eps plan`` of its
        caller said, whatever config this supervisor started under or the file says now."""
        from eps.shell.run.ownership import read_settings

        kept = read_settings(self.ledger.state_dir, dispatch, self.lanes.env, self.ledger)
        if kept is None or kept[0] == self.settings:
            return self.settings, self.lanes
        from eps.core.model import evolve as with_
        from eps.shell.lanes import Lanes

        settings, env = kept
        return settings, Lanes(settings, with_(self.lanes.options, env=env), overrides=self.lanes.stand_ins(),
                               clock=self.lanes.clock, sleep=self.lanes.sleep)  # fmt: skip


def _outputs(state_dir: str, row: DispatchRow) -> str:
    """Where its outputs are: in storage when its machine put them there, else the state dir's."""
    if row.stored_at is not None and row.pulled_at is None:
        from eps.shell.run.stored import where

        place = where(row)
        if place is not None:
            return place.outputs_url
    return os.path.join(state_dir, "outputs", row.id)


def _say(line: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")
    sys.stderr.flush()


def _team(ledger: Ledger, settings: Settings) -> Team | None:
    """This host's leases on a ledger other hosts share (registered, renewing); ``None`` on
    SQLite: one host, no lease work."""
    if not ledger.shared:
        return None
    from eps.core.lease import LeaseTerms
    from eps.shell.run.ownership import public_key
    from eps.shell.state.ledger import Ledger
    from eps.shell.state.team import Team, register

    key = public_key(ledger.state_dir)
    register(ledger, key)
    renew_on = Ledger(ledger.state_dir, url=settings.state_url, host=ledger.host)  # its own connection
    team = Team(ledger, LeaseTerms(settings.state_lease_s), key=key, renew_on=renew_on)
    ledger.guard = team.check
    team.start()
    return team


def _team_keys(ledger: Ledger) -> tuple[str, ...]:
    """The team's other hosts' public keys, let into every VM this supervisor makes (none on SQLite)."""
    if not ledger.shared:
        return ()
    from eps.shell.state.team import team_keys

    return team_keys(ledger)


def main() -> None:
    """``python -c 'from eps.shell.run.supervisor import main; main()' STATE_DIR``: serve the
    state directory until there is nothing to do.  A second one leaves at once."""
    import logging

    from eps.shell.config.load import load_settings
    from eps.shell.lanes import LaneOptions, Lanes
    from eps.shell.state.ledger import Ledger

    state_dir = sys.argv[1]
    env = dict(os.environ)
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    lock = open(lock_path(state_dir), "a+")  # noqa: SIM115  (held for the process's life)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another supervisor owns this state directory
    tmp = pid_path(state_dir) + f".{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(tmp, pid_path(state_dir))
    logging.getLogger().addHandler(logging.NullHandler())
    settings = load_settings(env)
    ledger = Ledger(state_dir, url=settings.state_url, host=settings.state_host)
    team = _team(ledger, settings)
    lanes = Lanes(settings, LaneOptions(env=env, team_keys=_team_keys(ledger)))
    from eps.shell.notify.pump import Pump  # apprise itself loads only when a target is read

    sup = Supervisor(settings, ledger, lanes, idle_s=settings.jobs.supervisor_idle_s,
                     notifier=Pump(ledger, settings, env), team=team)  # fmt: skip
    # SIGTERM, SIGKILL, a reboot: it dies where it stands; the next eps command revives what it owned.
    sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor {os.getpid()} serving {state_dir}\n")
    sys.stderr.flush()
    try:
        sup.serve()
    finally:
        if team is not None:
            team.stop()
        with contextlib.suppress(OSError), open(pid_path(state_dir)) as fh:
            if fh.read().strip() == str(os.getpid()):
                os.unlink(pid_path(state_dir))
        lanes.close()
        ledger.close()
        sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor {os.getpid()} leaves\n")
