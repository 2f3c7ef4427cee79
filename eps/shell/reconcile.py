"""Reconcile the ledger with what the providers report; ``eps cancel`` and ``eps status``.

For every dispatch no live eps process owns: a cancelled or failed dispatch keeps no
resource; a dispatch whose walk died keeps at most its newest live resource (adopted
into the ledger); a finished machine is released; a preempted spot VM is reported.
"""

from __future__ import annotations

import os
import time
from typing import Any

from attrs import frozen
from returns.result import Failure, Success

from eps.core.model import JobError, LaneKind
from eps.core.outcome import Handle, LaneFailure
from eps.shell import ledger as L
from eps.shell.config import Settings
from eps.shell.lanes import Lanes, handle_dict
from eps.shell.progress import Reporter

#: Handle states of a machine whose job has finished but which may still hold (and bill) a disk.
_FINISHED = frozenset({"stopped", "exited", "error"})


@frozen
class Live:
    """A resource a provider reports that carries an eps dispatch id."""

    dispatch: str
    handle: Handle
    attempt_hint: str | None = None  # rung key or pod name, to match it to an attempt


class Reconciler:
    """Compare the ledger with what the providers report; adopt or clean up.

    For every dispatch no live eps process owns: a cancelled or failed dispatch
    keeps no resource; a dispatch whose walk died keeps at most its newest live
    resource (adopted into the ledger) and becomes ``started`` (if it runs) or
    ``interrupted`` (``eps execute --resume`` continues it); resources of rungs the
    walk already left are released.  Resources whose dispatch the ledger does not
    know are reported, never touched (they may be another ledger's).
    """

    def __init__(self, settings: Settings, ledger: L.Ledger, lanes: Lanes, reporter: Reporter) -> None:
        self.settings = settings
        self.ledger = ledger
        self.lanes = lanes
        self.reporter = reporter
        self.errors: list[str] = []
        self.unchecked: dict[str, str] = {}  # lane -> why its inventory could not be read

    def inventory(self, dispatch: str | None = None) -> list[Live]:
        found: list[Live] = []
        for cluster in self.settings.policy.clusters:
            if self.lanes.options.slurm_runner is None and not self.settings.cluster_access(cluster.name).login:
                import shutil

                if shutil.which("squeue") is None:
                    continue
            prefix = f"eps-{dispatch}" if dispatch else "eps-"
            match self.lanes.slurm(cluster.name).list_by_name(prefix):
                case Success(jobs):
                    for j in jobs:
                        d = (j.name or "")[4:]
                        if dispatch is None or d == dispatch:
                            state = "running" if j.state == "RUNNING" else j.state.lower()
                            h = Handle(
                                cluster.name,
                                LaneKind.SLURM,
                                j.job_id,
                                f"{cluster.name}/{j.qos or '-'}",
                                qos=j.qos,
                                state=state,
                            )
                            found.append(Live(d, h))
                case Failure(f):
                    self.unchecked[cluster.name] = f.message
        if self.lanes.gcp_down() is None:
            match self.lanes.gcp().list_by_label(dispatch):
                case Success(instances):
                    found.extend(Live(i.dispatch_id, i.handle, i.handle.rung) for i in instances)
                case Failure(f):
                    self.unchecked["gcp"] = f.message
        if self.lanes.runpod_down() is None:
            from eps.shell.runpod import POD_PREFIX, dispatch_prefix

            prefix = dispatch_prefix(dispatch) if dispatch else POD_PREFIX
            pods = self.lanes.with_runpod(lambda c: c.list_pods(prefix))
            if isinstance(pods, LaneFailure):
                self.unchecked["runpod"] = pods.message
            elif isinstance(pods, Failure):
                self.unchecked["runpod"] = pods.failure().message
            else:
                for pod in pods.unwrap():
                    if pod.status.value == "TERMINATED":
                        continue  # gone for good: nothing billed, nothing to release
                    d = pod.name[len(POD_PREFIX) :].rsplit("-", 1)[0]
                    h = Handle(
                        "runpod", LaneKind.RUNPOD, pod.id, pod.name, machine=pod.machine, state=pod.status.value.lower()
                    )
                    found.append(Live(d, h, pod.name))
        for d, pid in self.lanes.vm.find(dispatch):
            found.append(Live(d, Handle("vm", LaneKind.VM, str(pid), "vm/-/-/local", machine="local")))
        return found

    def release(self, live: Live) -> str | None:
        h = live.handle
        if h.kind is LaneKind.SLURM:
            client = self.lanes.slurm(h.lane)
            client.cancel(h.id)
            if not client.wait_gone(h.id, self.lanes.options.slurm_cancel_timeout_s):
                return f"SLURM job {h.id} did not leave the queue"
            return None
        if h.kind is LaneKind.GCP:
            res = self.lanes.gcp().delete(h)
            return res.failure().message if isinstance(res, Failure) else None
        if h.kind is LaneKind.RUNPOD:
            res = self.lanes.with_runpod(lambda c: c.terminate(h.id))
            if isinstance(res, LaneFailure):
                return res.message
            return res.failure().message if isinstance(res, Failure) else None
        self.lanes.vm.cancel(h, live.dispatch)
        return None

    def _new_report(self) -> dict[str, Any]:
        keys = ("adopted", "released", "foreign", "interrupted")
        return {**{k: [] for k in keys}, "errors": self.errors, "unchecked": self.unchecked}

    def reconcile(self, dispatch: str | None = None) -> dict[str, Any]:
        live = self.inventory(dispatch)
        by_dispatch: dict[str, list[Live]] = {}
        for item in live:
            by_dispatch.setdefault(item.dispatch, []).append(item)
        report = self._new_report()
        rows = [self.ledger.dispatch(dispatch)] if dispatch else self.ledger.dispatches()
        known = {r.id for r in rows if r is not None}
        for row in rows:
            if row is None or self.ledger.is_owned_elsewhere(row.id):
                continue
            self._settle(row, by_dispatch.get(row.id, []), report, resuming=False)
        for d, items in by_dispatch.items():
            if d not in known and (dispatch is None or d == dispatch) and self.ledger.dispatch(d) is None:
                report["foreign"].extend(f"{i.handle.lane}:{i.handle.id}" for i in items)
        return report

    def reconcile_dispatch(self, row: L.DispatchRow, *, resuming: bool) -> dict[str, Any]:
        report = self._new_report()
        self._settle(row, self.inventory(row.id), report, resuming=resuming)
        return report

    def _settle(self, row: L.DispatchRow, items: list[Live], report: dict[str, Any], *, resuming: bool) -> None:
        attempts = self.ledger.attempts(row.id)
        blind = sorted({a.lane for a in attempts if a.lane in self.unchecked and a.state not in (L.A_FAILED,)})
        if blind and row.state not in (L.ENDED,) and any(a.state in L.LIVE_ATTEMPT_STATES for a in attempts):
            # We cannot see a lane this dispatch may hold something on: change nothing, say why.
            for lane in blind:
                report["errors"].append(f"{row.id}: cannot check {lane}: {self.unchecked[lane]}")
            return
        if row.state in (L.CANCELLED, L.FAILED):
            for item in items:
                self._release(row.id, item, attempts, report)
            return
        if not items:
            self._settle_nothing_live(row, attempts, report, resuming=resuming)
            return
        if row.state in (L.STARTED, L.HELD) and all(i.handle.state in _FINISHED for i in items):
            # The job ran and its machine stopped (GCP VMs power off after the job; RunPod
            # pods exit): release what still holds a disk, and say the dispatch ended.
            note = "finished; machine released"
            for item in items:
                note = self._keep_output(row.id, item) or note
                self._release(row.id, item, attempts, report)
            self._ended(row, attempts, note)
            report.setdefault("ended", []).append(row.id)
            return
        if row.state == L.STARTED and all(i.handle.state == "preempted" for i in items):
            for item in items:  # a stopped spot VM still holds its disk: release it
                self._release(row.id, item, attempts, report)
            self._preempted(row, attempts, report)
            return
        # Keep the newest resource; release the rest (rungs the walk had already left).
        ranked = sorted(items, key=lambda i: self._seq(i, attempts), reverse=True)
        keep, extra = ranked[0], ranked[1:]
        for item in extra:
            self._release(row.id, item, attempts, report)
        a = self._attempt_for(keep, attempts)
        h = keep.handle
        if a is None:  # found, never recorded (crash between call and record): adopt it now
            rung = next((x for x in reversed(attempts)), None)
            if rung is not None:
                self.ledger.update_attempt(
                    rung.id, L.A_RUNNING if h.state == "running" else L.A_PENDING, handle=h.id, outcome="adopted"
                )
        else:
            state = L.A_RUNNING if h.state in ("running", "starting", "completing") else L.A_PENDING
            self.ledger.update_attempt(a.id, state, handle=h.id, outcome=a.outcome or "adopted")
        report["adopted"].append(f"{row.id}:{h.lane}:{h.id}")
        if row.state in (L.WALKING, L.INTERRUPTED) and not resuming:
            if h.state == "pending" and h.kind is LaneKind.SLURM and (row.job.get("pin") is None):
                self.ledger.set_dispatch(row.id, L.INTERRUPTED, message="parked job adopted; eps execute --resume")
                report["interrupted"].append(row.id)
            else:
                self.ledger.set_dispatch(row.id, L.STARTED, handle=handle_dict(h))

    def _keep_output(self, dispatch: str, item: Live) -> str | None:
        """Before a finished GCP VM is deleted, copy its serial console (the job's log tail
        and exit code) to ``<state_dir>/logs/<dispatch>.log``: deleting must lose no data."""
        if item.handle.kind is not LaneKind.GCP:
            return None
        got = self.lanes.gcp().job_output(item.handle)
        if isinstance(got, Failure):
            return None
        text, code = got.unwrap()
        path = os.path.join(self.settings.state_dir, "logs", f"{dispatch}.log")
        with open(path, "a") as fh:
            fh.write(text)
        where = f"; output in {path}"
        return (f"exit code {code}" if code is not None else "finished") + "; machine released" + where

    def _settle_nothing_live(
        self, row: L.DispatchRow, attempts: list[L.AttemptRow], report: dict[str, Any], *, resuming: bool
    ) -> None:
        if row.state == L.WALKING:
            for a in attempts:
                if a.state in L.LIVE_ATTEMPT_STATES:
                    outcome, why = self._vanished(row.id, a)
                    self.ledger.update_attempt(a.id, L.A_GONE, outcome=outcome, reason=why)
            if not resuming:
                self.ledger.set_dispatch(row.id, L.INTERRUPTED, message="the walk stopped; eps execute --resume")
                report["interrupted"].append(row.id)
        elif row.state == L.STARTED and row.handle and str(row.handle.get("rung", "")).endswith("/spot"):
            self._preempted(row, attempts, report)
        elif row.state in (L.STARTED, L.HELD) and row.handle:
            self._ended(row, attempts, self._how_it_ended(row))

    def _how_it_ended(self, row: L.DispatchRow) -> str:
        h = row.handle or {}
        if h.get("kind") == "vm":
            done = self.lanes.vm.state(Handle("vm", LaneKind.VM, h["id"], ""), row.id)
            return f"exit code {done.split(':', 1)[1]}" if done.startswith("done:") else "process gone"
        if h.get("kind") == "slurm":  # squeue forgot it; sacct knows how it ended
            final = self.lanes.slurm(h["lane"]).poll(h["id"])
            if isinstance(final, Success):
                return f"SLURM job {h['id']}: {final.unwrap().state}"
        return "no longer at the provider"

    def _ended(self, row: L.DispatchRow, attempts: list[L.AttemptRow], note: str) -> None:
        for a in attempts:
            if a.state in (L.A_RUNNING, L.A_PENDING):
                self.ledger.update_attempt(a.id, L.A_ENDED, outcome="ended", reason=note)
        self.ledger.set_dispatch(row.id, L.ENDED, message=note)

    def _vanished(self, dispatch: str, a: L.AttemptRow) -> tuple[str, str]:
        """Why a recorded attempt has nothing live.  ``not_submitted``: the call never
        happened (the walk died between record and call), so the rung may be tried again
        (P7: a dead walk must not demote a job past a tier it never reached)."""
        if a.state != L.A_INTENT:
            return "gone", "not found at the provider"
        if a.kind == LaneKind.SLURM.value:
            seen = self.lanes.slurm(a.lane).history_by_name(f"eps-{dispatch}", a.started_at - 60)
            if isinstance(seen, Failure):
                return "gone", f"not in squeue; sacct did not answer: {seen.failure().message}"
            if any(j.qos == a.qos for j in seen.unwrap()):
                return "gone", "submitted, and already left the queue"
        return "not_submitted", "the walk stopped before the provider call"

    def _preempted(self, row: L.DispatchRow, attempts: list[L.AttemptRow], report: dict[str, Any]) -> None:
        for a in attempts:
            if a.state in (L.A_RUNNING, L.A_PENDING, L.A_CANCELLED) and a.provisioning == "spot":
                self.ledger.update_attempt(a.id, L.A_GONE, outcome="preempted", reason="spot VM taken back")
        msg = f"spot VM preempted; `eps execute --resume {row.id}` plans again"
        self.ledger.set_dispatch(row.id, L.PREEMPTED, message=msg)
        report.setdefault("preempted", []).append(row.id)

    def _seq(self, item: Live, attempts: list[L.AttemptRow]) -> int:
        a = self._attempt_for(item, attempts)
        return a.seq if a is not None else 10**6  # unrecorded: the newest possible

    @staticmethod
    def _attempt_for(item: Live, attempts: list[L.AttemptRow]) -> L.AttemptRow | None:
        h = item.handle
        for a in reversed(attempts):
            if a.handle and a.handle == h.id:
                return a
        for a in reversed(attempts):
            if a.kind != h.kind.value:
                continue
            if h.kind is LaneKind.SLURM and a.qos == h.qos:
                return a
            if h.kind is LaneKind.GCP and a.name == h.id:
                return a
            if h.kind is LaneKind.RUNPOD and a.name == item.attempt_hint:
                return a
            if h.kind is LaneKind.VM:
                return a
        return None

    def _release(self, dispatch: str, item: Live, attempts: list[L.AttemptRow], report: dict[str, Any]) -> None:
        err = self.release(item)
        a = self._attempt_for(item, attempts)
        if err is None:
            if a is not None:
                self.ledger.update_attempt(a.id, L.A_CANCELLED, handle=item.handle.id, outcome="released")
            report["released"].append(f"{dispatch}:{item.handle.lane}:{item.handle.id}")
        else:
            report["errors"].append(f"{dispatch}: {err}")


def cancel(
    settings: Settings, ledger: L.Ledger, lanes: Lanes, reporter: Reporter, dispatch: str, *, wait_s: float = 60.0
) -> dict[str, Any]:
    """Mark the dispatch (and its children) cancelled, wait for a live walker to stop, release everything."""
    row = ledger.dispatch(dispatch)
    if row is None:
        raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
    targets = [row, *ledger.children(dispatch)]
    for r in targets:
        ledger.set_dispatch(r.id, L.CANCELLED, message="cancelled by eps cancel")
    deadline = time.monotonic() + wait_s
    for r in targets:
        while ledger.is_owned_elsewhere(r.id) and time.monotonic() < deadline:
            time.sleep(0.2)
    rec = Reconciler(settings, ledger, lanes, reporter)
    report: dict[str, Any] = {"cancelled": [r.id for r in targets], "released": [], "errors": []}
    for r in targets:
        fresh = ledger.dispatch(r.id)
        if fresh is None:
            continue
        part = rec.reconcile_dispatch(fresh, resuming=False)
        report["released"].extend(part["released"])
        report["errors"].extend(part["errors"])
    return report


def status(ledger: L.Ledger, dispatch: str | None) -> list[dict[str, Any]]:
    rows = [ledger.dispatch(dispatch)] if dispatch else ledger.dispatches()
    out = []
    for r in rows:
        if r is None:
            raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
        attempts = ledger.attempts(r.id)
        out.append(
            {
                "dispatch": r.id,
                "parent": r.parent,
                "intent": r.intent,
                "state": r.state,
                "terminal": r.terminal,
                "message": r.message,
                "handle": r.handle,
                "created_at": r.created_at,
                "attempts": [
                    {
                        "seq": a.seq,
                        "rung": a.rung,
                        "state": a.state,
                        "handle": a.handle,
                        "outcome": a.outcome,
                        "reason": a.reason,
                    }
                    for a in attempts
                ],
            }
        )
    return out
