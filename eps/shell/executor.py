"""``eps execute``: walk the plan for real; and the command glue for ``status``, ``cancel``
and ``reconcile`` (whose logic is in ``reconcile.py``; progress output in ``progress.py``).

The loop: gather what is known (grants, lanes available here, a snapshot file),
ask the core ``plan()``, carry out the first rung through its lane, feed the
outcome back (``absorb``), plan again, until a rung starts or the plan is
terminal.  Every attempt is written to the ledger before its provider call.
The shell never decides: which rung, whether to wait, advance or stop all
come from ``plan()``; what a provider answer means comes from the adapters'
classification.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from attrs import frozen
from returns.result import Failure, Result, Success

from eps.core.model import CapacitySnapshot, Job, JobError, LaneKind, Provisioning, QosGrants, Rung, evolve
from eps.core.outcome import FailureKind, Handle, LaneFailure, absorb, stops_dispatch
from eps.core.router import plan
from eps.shell import ledger as L
from eps.shell.config import Settings
from eps.shell.lanes import LaneOptions, Lanes, handle_dict
from eps.shell.progress import Reporter
from eps.shell.reconcile import Live, Reconciler, cancel, status

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

#: Dispatch ids travel in SLURM job names, GCE labels and pod names: keep them plain.
_DISPATCH_ID = re.compile(r"[a-z][a-z0-9]{2,39}")


class Cancelled(Exception):
    """The dispatch was cancelled (``eps cancel``) while it was being walked."""


# --- the walk -------------------------------------------------------------------------------


@frozen
class WalkResult:
    dispatch: str
    handle: Handle | None
    failure: str | None = None
    terminal: str | None = None


class Executor:
    def __init__(
        self,
        settings: Settings,
        ledger: L.Ledger,
        lanes: Lanes,
        reporter: Reporter,
        *,
        grants: QosGrants,
        snapshot: CapacitySnapshot,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.lanes = lanes
        self.reporter = reporter
        self.grants = grants
        self.snapshot = snapshot
        self.clock = clock
        self.sleep = sleep

    def new_dispatch_id(self) -> str:
        return "e" + secrets.token_hex(5)

    def execute(self, job: Job, dispatch: str | None = None) -> list[WalkResult]:
        """Validate, record and walk ``job``; N independent dispatches for a CPU --count N."""
        first = plan(job, self.snapshot, self.grants, None, policy=self.settings.policy)  # JobError here: nothing done
        if not job.command:
            raise JobError("no_command", "no command to run: eps execute INTENT [options] -- COMMAND...", job)
        if dispatch is not None and not _DISPATCH_ID.fullmatch(dispatch):
            raise JobError("bad_dispatch_id", f"dispatch id {dispatch!r}: use 3-40 lowercase letters and digits", job)
        parent = dispatch or self.new_dispatch_id()
        self.ledger.new_dispatch(parent, job)
        self.ledger.acquire(parent)
        if first.count <= 1:
            return [self._walk_guarded(parent, job, self.snapshot)]
        children = [f"{parent}n{i}" for i in range(1, first.count + 1)]
        one = evolve(job, count=1)
        for child in children:
            self.ledger.new_dispatch(child, one, parent=parent)
        self.reporter.emit("fanout", dispatch=parent, children=children)
        workers = max(1, min(len(children), self.settings.runpod.concurrency))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda c: self._walk_guarded(c, one, self.snapshot), children))
        ok = all(r.handle is not None for r in results)
        started = sum(r.handle is not None for r in results)
        self.ledger.set_dispatch(parent, L.STARTED if ok else L.FAILED, message=f"{started}/{len(results)} started")
        self.ledger.release(parent)
        return results

    def resume(self, dispatch: str) -> WalkResult:
        row = self.ledger.dispatch(dispatch)
        if row is None:
            raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
        self.ledger.acquire(dispatch)
        row = self.ledger.dispatch(dispatch) or row  # re-read under the lock: a walker may have just finished
        if row.state in (L.STARTED, L.HELD) and row.handle:
            # Reconcile (at the start of this command) adopted what the dead walk had started.
            self.ledger.release(dispatch)
            self.reporter.emit("held" if row.state == L.HELD else "started", dispatch=dispatch, handle=row.handle)
            return WalkResult(dispatch, _row_handle(row.handle))
        if row.state in (L.STARTED, L.HELD, L.CANCELLED):
            self.ledger.release(dispatch)
            return WalkResult(dispatch, None, failure=f"dispatch {dispatch} is {row.state}; nothing to resume")
        job = L.job_from_dict(row.job)
        Reconciler(self.settings, self.ledger, self.lanes, self.reporter).reconcile_dispatch(row, resuming=True)
        attempts = self.ledger.attempts(dispatch)
        live = [a for a in attempts if a.state in (L.A_RUNNING, L.A_PENDING, L.A_SUBMITTED)]
        if live and live[-1].state == L.A_RUNNING:
            handle = _attempt_handle(live[-1], "running")
            self.ledger.set_dispatch(dispatch, L.STARTED, handle=handle_dict(handle))
            self.reporter.emit("started", dispatch=dispatch, handle=handle_dict(handle))
            return WalkResult(dispatch, handle)
        left = (L.A_FAILED, L.A_ADVANCED, L.A_CANCELLED, L.A_GONE)
        tried = tuple(a.rung for a in attempts if a.state in left and a.outcome != "not_submitted")
        snap = evolve(self.snapshot, attempted=(*self.snapshot.attempted, *tried))
        for a in attempts:  # what a preemption taught us (P11: no spot again unless restartable)
            if a.outcome == "preempted":
                rung = Rung(a.lane, LaneKind(a.kind), Provisioning(a.provisioning), "", machine=a.target, zone=a.zone)
                gone = LaneFailure(FailureKind.PREEMPTED, "preempted")
                snap = absorb(snap, rung, gone, restartable=job.restartable)
        self.ledger.set_dispatch(dispatch, L.WALKING)
        pending = live[-1] if live else None
        return self._walk_guarded(dispatch, job, snap, resume_pending=pending)

    def _walk_guarded(
        self, dispatch: str, job: Job, snap: CapacitySnapshot, resume_pending: L.AttemptRow | None = None
    ) -> WalkResult:
        self.ledger.acquire(dispatch)
        try:
            return self._walk(dispatch, job, snap, resume_pending)
        except Cancelled:
            self.reporter.emit("stopped", dispatch=dispatch, message="cancelled")
            return WalkResult(dispatch, None, failure="cancelled")
        finally:
            self.ledger.release(dispatch)

    def _check_cancel(self, dispatch: str) -> None:
        row = self.ledger.dispatch(dispatch)
        if row is not None and row.state == L.CANCELLED:
            raise Cancelled(dispatch)

    def _walk(self, dispatch: str, job: Job, snap: CapacitySnapshot, resume_pending: L.AttemptRow | None) -> WalkResult:
        policy = self.settings.policy
        announced = False
        while True:
            self._check_cancel(dispatch)
            p = plan(job, snap, self.grants, None, policy=policy)
            if not announced:
                self.reporter.emit(
                    "dispatch",
                    dispatch=dispatch,
                    intent=job.intent,
                    resolved_intent=p.resolved_intent,
                    rungs=len(p.rungs),
                    worst_case_wait_s=p.worst_case_wait_s,
                    plan=[r.key for r in p.rungs],
                )
                announced = True
            if p.terminal is not None:
                msg = f"nothing left to try ({p.terminal.value})"
                self.ledger.set_dispatch(dispatch, L.FAILED, terminal=p.terminal.value, message=msg)
                skipped = [f"{s.lane} {s.target or ''}: {s.detail}".replace(" :", ":") for s in p.skipped]
                self.reporter.emit("terminal", dispatch=dispatch, terminal=p.terminal.value, skipped=skipped)
                return WalkResult(dispatch, None, failure=msg, terminal=p.terminal.value)
            rung = p.rungs[0]
            if rung.kind is LaneKind.SLURM:
                outcome = self._slurm(dispatch, job, rung, snap, resume_pending)
                resume_pending = None
                if isinstance(outcome, WalkResult):
                    return outcome
                snap = outcome
                continue
            self.reporter.emit(
                "attempt", dispatch=dispatch, rung=rung.key, reason=rung.reason, price_per_hour=rung.price_per_hour
            )
            result, attempt = self._start(dispatch, job, rung)
            match result:
                case Success(handle):
                    self.ledger.update_attempt(attempt.id, L.A_RUNNING, handle=handle.id, outcome="started")
                    self._release_if_cancelled(dispatch, handle, attempt)
                    self.ledger.set_dispatch(dispatch, L.STARTED, handle=handle_dict(handle))
                    self.reporter.emit("started", dispatch=dispatch, handle=handle_dict(handle))
                    return WalkResult(dispatch, handle)
                case Failure(failure):
                    leftover = self._maybe_made(dispatch, rung, attempt, failure)
                    self.ledger.update_attempt(
                        attempt.id,
                        L.A_SUBMITTED if leftover else L.A_FAILED,
                        handle=leftover,
                        outcome=failure.kind.value,
                        reason=failure.message,
                    )
                    self.reporter.emit(
                        "failed",
                        dispatch=dispatch,
                        rung=rung.key,
                        kind=failure.kind.value,
                        code=failure.code,
                        message=failure.message,
                    )
                    if stops_dispatch(failure):
                        self.ledger.set_dispatch(dispatch, L.FAILED, message=failure.message)
                        self.reporter.emit("stopped", dispatch=dispatch, message=failure.message)
                        return WalkResult(dispatch, None, failure=failure.message)
                    snap = absorb(snap, rung, failure)

    def _slurm_output(self, cluster: str, dispatch: str) -> str | None:
        """The job's output file: beside the ledger's logs when the cluster is this machine;
        SLURM's default (``slurm-<id>.out`` in the login directory) behind a login prefix."""
        if self.settings.cluster_access(cluster).login:
            return None
        return os.path.join(os.path.abspath(self.settings.state_dir), "logs", f"{dispatch}-%j.out")

    def _release_if_cancelled(self, dispatch: str, handle: Handle, attempt: L.AttemptRow) -> None:
        """``eps cancel`` arrived while the create was in flight: release what it made, stop."""
        row = self.ledger.dispatch(dispatch)
        if row is None or row.state != L.CANCELLED:
            return
        err = Reconciler(self.settings, self.ledger, self.lanes, self.reporter).release(Live(dispatch, handle))
        if err is None:
            self.ledger.update_attempt(attempt.id, L.A_CANCELLED, outcome="released", reason="cancelled while starting")
        raise Cancelled(dispatch)

    def _maybe_made(self, dispatch: str, rung: Rung, attempt: L.AttemptRow, failure: LaneFailure) -> str | None:
        """A create that failed TRANSIENT (answers lost, operation timed out) may have made the
        machine or pod anyway: release it by its deterministic name before the walk moves on.
        Returns the name when that delete failed too (the attempt stays live for reconcile)."""
        if failure.kind is not FailureKind.TRANSIENT:
            return None
        if rung.kind is LaneKind.GCP:
            h = Handle(rung.lane, LaneKind.GCP, attempt.name, rung.key, zone=rung.zone, machine=rung.machine)
            return attempt.name if isinstance(self.lanes.gcp().delete(h), Failure) else None
        if rung.kind is LaneKind.RUNPOD:  # the same for a pod: find it by its name, terminate it
            name = attempt.name

            async def withdraw(client: Any) -> bool:
                listed = await client.list_pods(name)
                if isinstance(listed, Failure):
                    return False
                done = [await client.terminate(p.id) for p in listed.unwrap() if p.name == name]
                return all(isinstance(d, Success) for d in done)

            ok = self.lanes.with_runpod(withdraw)
            return None if ok is True else name
        return None

    def _start(self, dispatch: str, job: Job, rung: Rung) -> tuple[Result[Handle, LaneFailure], L.AttemptRow]:
        if rung.kind is LaneKind.VM:
            attempt = self.ledger.begin_attempt(dispatch, rung, f"pid:{dispatch}")
            return self.lanes.vm.start(job.command, rung, dispatch), attempt
        if rung.kind is LaneKind.GCP:
            from eps.shell.gcp import instance_name

            attempt = self.ledger.begin_attempt(dispatch, rung, instance_name(dispatch, rung))
            # attempt=0: the request id is fixed per (dispatch, rung), so a retried create is a no-op
            return self.lanes.gcp().create(job, rung, dispatch, 0), attempt
        if rung.kind is LaneKind.RUNPOD:
            from eps.shell.runpod import pod_name

            seq = len(self.ledger.attempts(dispatch)) + 1
            attempt = self.ledger.begin_attempt(dispatch, rung, pod_name(dispatch, seq))
            started = self.lanes.with_runpod(lambda c: c.start(rung, attempt.name, job=job, dispatch_id=dispatch))
            if isinstance(started, LaneFailure):
                return Failure(started), attempt
            if started.leftover is not None:  # exists but could not be released: record it for reconcile
                self.ledger.update_attempt(attempt.id, L.A_SUBMITTED, handle=started.leftover.id)
            return started.result, attempt
        raise AssertionError(f"no adapter for {rung.kind}")  # pragma: no cover

    def _slurm(
        self, dispatch: str, job: Job, rung: Rung, snap: CapacitySnapshot, resume_pending: L.AttemptRow | None
    ) -> WalkResult | CapacitySnapshot:
        from eps.shell.ladder import CancelNotConfirmed, EventKind, HandOver, LadderEvent, Landed, walk_ladder

        current: dict[str, L.AttemptRow] = {}
        upcoming = [r.key for r in plan(job, snap, self.grants, None, policy=self.settings.policy).rungs]

        def after(key: str) -> str | None:
            return upcoming[upcoming.index(key) + 1] if key in upcoming[:-1] else None

        if resume_pending is not None:
            current[resume_pending.rung] = resume_pending

        def on_event(ev: LadderEvent) -> None:
            kind = ev.kind
            if kind is EventKind.SUBMITTING:
                current[ev.rung] = self.ledger.begin_attempt(dispatch, _rung_of(ev, rung), f"eps-{dispatch}")
                self.reporter.emit(
                    "attempt", dispatch=dispatch, rung=ev.rung, reason=f"submit under {ev.qos}", price_per_hour=0.0
                )
                return
            if kind is EventKind.HANDOVER:  # names the next lane's rung: no attempt on this cluster
                return
            a = current.get(ev.rung)
            if a is None:
                a = current[ev.rung] = self.ledger.begin_attempt(dispatch, _rung_of(ev, rung), f"eps-{dispatch}")
            if kind is EventKind.SUBMITTED:
                self.ledger.update_attempt(a.id, L.A_PENDING, handle=ev.job_id)
                self.reporter.emit("submitted", dispatch=dispatch, rung=ev.rung, id=ev.job_id)
            elif kind is EventKind.REFUSED:
                self.ledger.update_attempt(a.id, L.A_FAILED, outcome="refused", reason=ev.detail)
                self.reporter.emit(
                    "failed", dispatch=dispatch, rung=ev.rung, kind="refused", code=None, message=ev.detail
                )
            elif kind is EventKind.PARKED:
                self.reporter.emit(
                    "parked",
                    dispatch=dispatch,
                    rung=ev.rung,
                    id=ev.job_id,
                    elapsed_s=ev.elapsed_s,
                    cap_s=_cap(ev.rung, rung, self.settings),
                    pending_reason=ev.pending_reason,
                    next=after(ev.rung),
                    reason=ev.detail,
                )
                self._check_cancel(dispatch)
            elif kind is EventKind.ADVANCED:
                self.ledger.update_attempt(a.id, L.A_ADVANCED, outcome="park_timeout", reason=ev.detail)
                self.reporter.emit(
                    "advanced", dispatch=dispatch, rung=ev.rung, id=ev.job_id, elapsed_s=ev.elapsed_s, reason=ev.detail
                )
            elif kind is EventKind.STARTED:
                self.ledger.update_attempt(a.id, L.A_RUNNING, handle=ev.job_id, outcome="started")
            elif kind is EventKind.HELD:
                self.ledger.update_attempt(a.id, L.A_PENDING, handle=ev.job_id, outcome="held")

        client = self.lanes.slurm(rung.lane)
        opts = self.lanes.options
        try:
            out = walk_ladder(
                job,
                dispatch_id=dispatch,
                rung=rung,
                snapshot=snap,
                grants=self.grants,
                client=client,
                policy=self.settings.policy,
                poll_interval_s=opts.slurm_poll_interval_s,
                cancel_timeout_s=opts.slurm_cancel_timeout_s,
                clock=self.clock,
                sleep=self.sleep,
                on_event=on_event,
                output=self._slurm_output(rung.lane, dispatch),
                resume_job_id=resume_pending.handle if resume_pending is not None else None,
                resume_elapsed_s=(time.time() - resume_pending.started_at) if resume_pending is not None else 0.0,
            )
        except CancelNotConfirmed as exc:
            self.ledger.set_dispatch(dispatch, L.FAILED, message=str(exc))
            self.reporter.emit("stopped", dispatch=dispatch, message=str(exc))
            return WalkResult(dispatch, None, failure=str(exc))
        if isinstance(out, Landed):
            h = out.handle
            if (landed := current.get(h.rung)) is not None:
                self._release_if_cancelled(dispatch, h, landed)
            held = h.state == "pending"
            self.ledger.set_dispatch(dispatch, L.HELD if held else L.STARTED, handle=handle_dict(h))
            self.reporter.emit("held" if held else "started", dispatch=dispatch, handle=handle_dict(h))
            return WalkResult(dispatch, h)
        if not isinstance(out, HandOver):  # pragma: no cover - walk_ladder returns one of the two
            raise TypeError(out)
        return out.snapshot


def _rung_of(ev: Any, first: Rung) -> Rung:
    """The rung an event names (same cluster as ``first``; only the QoS and key differ)."""
    if ev.rung == first.key:
        return first
    return evolve(first, qos=ev.qos)


def _cap(rung_key: str, first: Rung, settings: Settings) -> int | None:
    cluster = settings.policy.cluster(first.lane)
    if cluster is None:
        return None
    return cluster.first_park_cap_s if rung_key == first.key else cluster.next_park_cap_s


def _row_handle(h: dict[str, Any]) -> Handle:
    return Handle(
        h["lane"], LaneKind(h["kind"]), h["id"], h["rung"], zone=h.get("zone"), qos=h.get("qos"),
        machine=h.get("machine"), state=h.get("state") or "running",
    )  # fmt: skip


def _attempt_handle(a: L.AttemptRow, state: str) -> Handle:
    return Handle(
        a.lane, LaneKind(a.kind), a.handle or "", a.rung, zone=a.zone, qos=a.qos, machine=a.target, state=state
    )


# --- the commands ---------------------------------------------------------------------------


def run_command(
    ns: argparse.Namespace,
    settings: Settings,
    command: Sequence[str],
    make_job: Callable[[argparse.Namespace, Sequence[str]], Job],
    *,
    options: LaneOptions | None = None,
) -> int:
    """``execute``, ``status``, ``cancel``, ``reconcile``; errors map to exit codes in cli.main."""
    import logging

    # Retry libraries log each retry at WARNING; the reporter already says what failed.
    logging.getLogger().addHandler(logging.NullHandler())
    try:
        ledger = L.Ledger(settings.state_dir)
    except L.LedgerError as exc:
        raise JobError("ledger", str(exc), None) from None
    lanes = Lanes(settings, options)
    reporter = Reporter(json_lines=bool(getattr(ns, "json", False)))
    try:
        return _dispatch_command(ns, settings, command, make_job, ledger, lanes, reporter)
    except L.LedgerError as exc:
        raise JobError("ledger", str(exc), None) from None
    except L.DispatchBusy as exc:
        raise JobError("busy", str(exc), None) from None
    finally:
        reporter.stop_live()
        lanes.close()
        ledger.close()


def _dispatch_command(
    ns: argparse.Namespace,
    settings: Settings,
    command: Sequence[str],
    make_job: Callable[[argparse.Namespace, Sequence[str]], Job],
    ledger: L.Ledger,
    lanes: Lanes,
    reporter: Reporter,
) -> int:
    if ns.cmd == "status":
        Reconciler(settings, ledger, lanes, reporter).reconcile(ns.dispatch)
        rows = status(ledger, ns.dispatch)
        if ns.json:
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        else:
            _print_status(rows)
        return EXIT_OK
    if ns.cmd == "cancel":
        if not ns.dispatch and not ns.all:
            raise JobError("usage", "eps cancel: name a dispatch or --all", None)
        ids = (
            [ns.dispatch]
            if ns.dispatch
            else [
                r.id
                for r in ledger.dispatches(states=(L.WALKING, L.STARTED, L.HELD, L.INTERRUPTED))
                if r.parent is None
            ]
        )
        reports = [cancel(settings, ledger, lanes, reporter, d) for d in ids]
        if ns.json:
            sys.stdout.write(json.dumps(reports, indent=2) + "\n")
        else:
            for rep in reports:
                sys.stdout.write(f"cancelled {', '.join(rep['cancelled'])}; released {len(rep['released'])}\n")
                for e in rep["errors"]:
                    sys.stdout.write(f"  error: {e}\n")
        return EXIT_FAILED if any(r["errors"] for r in reports) else EXIT_OK
    if ns.cmd == "reconcile":
        report = Reconciler(settings, ledger, lanes, reporter).reconcile()
        sys.stdout.write(json.dumps(report, indent=2) + "\n" if ns.json else _reconcile_text(report))
        return EXIT_FAILED if report["errors"] else EXIT_OK
    # execute
    if ns.resume and (ns.intent or command):
        raise JobError("usage", "eps execute --resume DISPATCH takes no intent or command", None)
    Reconciler(settings, ledger, lanes, reporter).reconcile()
    snapshot, grants = _gather(ns, settings, lanes)
    ex = Executor(settings, ledger, lanes, reporter, grants=grants, snapshot=snapshot)
    reporter.start_live()
    if ns.resume:
        results = [ex.resume(ns.resume)]
    else:
        job = make_job(ns, command)
        results = ex.execute(job, ns.dispatch_id)
    reporter.stop_live()
    for r in results:
        if r.handle is not None:
            h = r.handle
            if reporter.json_lines:
                continue
            where = h.qos or h.zone or ""
            sys.stdout.write(f"{r.dispatch} {h.lane} {where} {h.machine or ''} {h.id} {h.state}\n".replace("  ", " "))
        elif not reporter.json_lines:
            sys.stdout.write(f"{r.dispatch} failed: {r.failure}\n")
    return EXIT_OK if all(r.handle is not None for r in results) else EXIT_FAILED


def _gather(ns: argparse.Namespace, settings: Settings, lanes: Lanes) -> tuple[CapacitySnapshot, QosGrants]:
    from eps.core.tables import DEFAULT_GRANTS

    snapshot = CapacitySnapshot()
    grants = DEFAULT_GRANTS
    if getattr(ns, "snapshot", None) or getattr(ns, "grants", None):
        from eps.shell import inputs

        if ns.snapshot:
            snapshot = inputs.load_snapshot(ns.snapshot)
        if ns.grants:
            grants = inputs.load_grants(ns.grants)
    down: tuple[Any, ...] = lanes.unavailable()
    if not getattr(ns, "grants", None):
        grants, cluster_down = lanes.discover_grants(grants)
        down = (*down, *cluster_down)
    return evolve(snapshot, unavailable=(*snapshot.unavailable, *down)), grants


def _print_status(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("dispatch", "intent", "state", "lane", "where", "id", "attempts", "note"):
        table.add_column(col)
    for r in rows:
        h = r["handle"] or {}
        where = h.get("qos") or h.get("zone") or ""
        table.add_row(
            r["dispatch"],
            r["intent"],
            r["state"],
            h.get("lane", ""),
            where,
            h.get("id", ""),
            str(len(r["attempts"])),
            r["terminal"] or r["message"] or "",
        )
    Console(width=140).print(table)


def _reconcile_text(report: dict[str, Any]) -> str:
    lines = []
    for k, v in report.items():
        items = [f"{lane} ({why})" for lane, why in v.items()] if isinstance(v, dict) else v
        lines.append(f"{k}: {', '.join(items) if items else '-'}")
    return "\n".join(lines) + "\n"
