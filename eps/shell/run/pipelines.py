"""A pipeline run by the supervisor (docs/design/pipelines.md): one dispatch D, a child row
per phase, each phase walked and followed to its end as a single job is, started when the
core's :func:`eps.core.pipeline_run.schedule` says (everything it needs succeeded), its
needs' outputs staged as its inputs first; the phases whose need failed are ended
``dependency_failed`` with nothing created for them.

The pipeline's own record, in the ledger (:mod:`eps.shell.state.phases`), names each phase's
child row and what it needs; it is written by ``eps execute`` with the rows, in one
transaction, so any host sharing the ledger reads it.  A phase's staged workdir (no storage)
is ``<state>/pipelines/D/<phase>/`` on the executing host.  The ledger says the rest (which
phases ended, which were started), so a revived supervisor, or another host's, carries on
where the dead one stopped.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from eps.core.ends import result_word
from eps.core.events import Event
from eps.core.jobscript import INPUTS_DIR
from eps.core.pipeline import Phase, Pipeline
from eps.core.pipeline_run import DEPENDENCY_FAILED, PhaseState, schedule, together
from eps.core.pipeline_run import phase_state as state_of
from eps.core.states import DispatchState
from eps.shell.state.phases import PhaseRecord

if TYPE_CHECKING:
    import threading as _threading
    from typing import Protocol

    from eps.core.model import CapacitySnapshot, Job, QosGrants
    from eps.shell.config.settings import Settings
    from eps.shell.lanes import Lanes
    from eps.shell.state.events import EventLog
    from eps.shell.state.ledger import DispatchRow, Ledger

    class Supervisor(Protocol):
        """What a pipeline's loop uses of :class:`eps.shell.run.supervisor.Supervisor`."""

        ledger: Ledger
        lanes: Lanes
        stopping: _threading.Event

        def acting(self, dispatch: str) -> bool: ...
        def log(self, dispatch: str) -> EventLog: ...
        def own_settings(self, dispatch: str) -> tuple[Any, Any]: ...

    class Gather(Protocol):
        def __call__(self, lanes: Lanes, ledger: Ledger, job: Job | None, snapshot: CapacitySnapshot,
                     grants: QosGrants, *, grants_given: bool) -> tuple[CapacitySnapshot, QosGrants]: ...  # fmt: skip


__all__ = ["PhaseRecord", "after_sources", "after_state", "drive", "exit_of", "finals", "phase_state", "phases_line",
           "read_record", "stage_dir", "status_of"]

#: A phase whose thread ended with its row still unsettled (an error) is tried again after this.
RETRY_S = 5.0


def stage_dir(state_dir: str, dispatch: str, phase: str) -> str:
    """The workdir a phase with needs is shipped from: its own files, then its inputs."""
    return os.path.join(state_dir, "pipelines", dispatch, phase)


def read_record(ledger: Ledger, dispatch: str) -> tuple[PhaseRecord, ...] | None:
    """The phases of pipeline ``dispatch`` (its record in the ledger); ``None`` when it is no pipeline."""
    from eps.shell.state import phases

    return phases.read(ledger, dispatch)


def phase_state(row: DispatchRow | None, started: bool) -> PhaseState:
    """A phase's state for the core, from its row (the pure :func:`eps.core.pipeline_run.phase_state`);
    ``started``: this supervisor started it."""
    if row is None:
        return state_of(None)
    return state_of(row.state, result=result_word(row.state, row.job_status, row.exit_code), back=_back(row),
                    message=row.message, handle=row.handle is not None, started=started)  # fmt: skip


def after_state(ledger: Ledger, dispatch: str) -> PhaseState:
    """The state of dispatch ``dispatch`` that ``--after`` waits for: its row's, or, for a
    fan-out, sweep or pipeline, its tasks' (phases') together: succeeded once every one
    succeeded, failed as soon as one did not."""
    tasks = ledger.children(dispatch)
    if not tasks:
        return phase_state(ledger.dispatch(dispatch), True)
    return together(phase_state(t, True) for t in tasks)


def _back(row: DispatchRow) -> bool:
    """Its outputs came back (here, or in storage): what a phase that needs it is given."""
    return row.pulled_at is not None or row.stored_at is not None


# --- the supervisor's loop --------------------------------------------------------------------


def drive(sup: Supervisor, dispatch: str, gather: Gather) -> bool:
    """Drive pipeline ``dispatch`` to its end under ``sup`` (``gather``: the supervisor's, what
    a walk knows before it starts); ``False`` when it is no pipeline."""
    record = read_record(sup.ledger, dispatch)
    if record is None:
        return False
    _Run(sup, dispatch, record, gather).run()
    return True


class _Run:
    def __init__(self, sup: Supervisor, dispatch: str, record: tuple[PhaseRecord, ...], gather: Gather) -> None:
        from eps.core.model import Job

        self.gather = gather
        self.sup = sup
        self.ledger: Ledger = sup.ledger
        self.dispatch = dispatch
        self.record = {p.name: p for p in record}
        self.pipeline = Pipeline(tuple(Phase(p.name, Job("cpu-small"), p.needs) for p in record))
        self.log = sup.log(dispatch)
        self.threads: dict[str, threading.Thread] = {}
        self.retry_at: dict[str, float] = {}

    def stop(self) -> bool:
        return self.sup.stopping.is_set() or not self.sup.acting(self.dispatch)

    def states(self) -> dict[str, PhaseState]:
        rows = {r.id: r for r in self.ledger.children(self.dispatch)}
        out = {}
        for name, p in self.record.items():
            if p.after:
                out[name] = after_state(self.ledger, p.id)
                continue
            row = rows.get(p.id)
            started = name in self.threads or bool(row is not None and self.ledger.attempts(p.id))
            out[name] = phase_state(row, started)
        return out

    def run(self) -> None:
        got_settings: tuple[Settings, Lanes] = self.sup.own_settings(self.dispatch)
        settings, lanes = got_settings
        try:
            while not self.stop():
                parent = self.ledger.dispatch(self.dispatch)
                if parent is None or parent.state is DispatchState.CANCELLED:
                    return
                states = self.states()
                got = schedule(self.pipeline, states)
                for name in got.doomed:
                    self.doom(name, got.because[name])
                if got.over:
                    self.end(got.failed, got.dependency_failed)
                    return
                now = time.monotonic()
                for name, state in states.items():
                    if self.record[name].after:  # another dispatch's: its own supervisor's to run
                        continue
                    if (name in got.ready or state is PhaseState.RUNNING) and self.free(name, now):
                        t = threading.Thread(target=self.phase, args=(name, settings, lanes),
                                             name=f"phase-{self.dispatch}-{name}", daemon=True)  # fmt: skip
                        self.threads[name] = t
                        t.start()
                self.sup.stopping.wait(settings.jobs.wait_poll_s)
        finally:
            for t in self.threads.values():
                t.join()
            if lanes is not self.sup.lanes:
                lanes.close()

    def free(self, name: str, now: float) -> bool:
        """No thread runs phase ``name`` now (one that died lets it be taken on again, later)."""
        t = self.threads.get(name)
        if t is not None and t.is_alive():
            return False
        if t is not None:
            del self.threads[name]
            self.retry_at.setdefault(name, now + RETRY_S)
        return self.retry_at.get(name, 0.0) <= now

    def doom(self, name: str, need: str) -> None:
        p = self.record[name]
        why = f"{DEPENDENCY_FAILED}: needs {need!r}, which did not succeed; nothing was started for it"
        self.ledger.set_dispatch(p.id, DispatchState.FAILED, message=why)
        self.log.emit(Event.STOPPED, dispatch=p.id, message=why, reason={"code": DEPENDENCY_FAILED, "text": why})

    def end(self, failed: Sequence[str], doomed: Sequence[str]) -> None:
        """The pipeline has ended: its row says so, with the code ``eps wait`` leaves with (0,
        or PHASE_FAILED) as its exit code, and which phases failed."""
        from eps.core.contract import PHASE_FAILED

        n = sum(not p.after for p in self.record.values())
        said = f"{n}/{n} phases succeeded"
        if failed or doomed:
            said = f"phase {', '.join(failed)} failed" if failed else "a phase failed"
            if doomed:
                said += f"; {', '.join(doomed)}: {DEPENDENCY_FAILED}"
        self.ledger.record_end(self.dispatch, PHASE_FAILED if failed or doomed else 0, "exited", time.time())
        self.ledger.set_dispatch(self.dispatch, DispatchState.ENDED, message=said)

    def phase(self, name: str, settings: Settings, lanes: Lanes) -> None:
        """One phase: its inputs staged (a first start), then walked and followed to its end."""
        import sys
        import traceback

        from eps.core.tables import DEFAULT_GRANTS
        from eps.shell.run.follow import follow_to_end
        from eps.shell.run.ownership import read_inputs
        from eps.shell.run.walker import Walker

        p = self.record[name]
        try:
            row = self.ledger.dispatch(p.id)
            if row is None:
                return
            if row.state is DispatchState.WALKING:
                if not self.ledger.attempts(p.id) and p.needs:
                    why = self.stage(p, settings)
                    if why is not None:
                        self.ledger.set_dispatch(p.id, DispatchState.FAILED, message=why)
                        self.log.emit(Event.STOPPED, dispatch=p.id, message=why,
                                      reason={"code": "inputs", "text": why})  # fmt: skip
                        return
                why = self.conf_here(p.id, row.job, settings, lanes)
                if why is not None:
                    self.ledger.set_dispatch(p.id, DispatchState.FAILED, message=why)
                    self.log.emit(Event.STOPPED, dispatch=p.id, message=why, reason={"code": "storage", "text": why})
                    return
                snap, grants = read_inputs(self.ledger.state_dir, self.dispatch, self.ledger)
                from eps.core.model import CapacitySnapshot

                snapshot, grants_now = self.gather(lanes, self.ledger, row.job, snap or CapacitySnapshot(),
                                              grants or DEFAULT_GRANTS, grants_given=grants is not None)  # fmt: skip
                walker = Walker(settings, self.ledger, lanes, self.log, grants=grants_now, snapshot=snapshot,
                                supervised=True)  # fmt: skip
                walker.walk_recorded(p.id)
            follow_to_end(self.ledger, lanes, self.log, [p.id], poll_s=settings.jobs.wait_poll_s,
                          stop=self.stop, sync=True)  # fmt: skip
        except Exception:  # logged; the phase is taken on again after RETRY_S
            sys.stderr.write(f"dispatch {self.dispatch} phase {name}:\n{traceback.format_exc()}")
            sys.stderr.flush()

    def conf_here(self, child: str, job: Job, settings: Settings, lanes: Lanes) -> str | None:
        """A phase walked by a host that took the pipeline over (a team's ledger): the
        executing host kept its machine's rclone.conf with the phase's values in its own
        state dir, so this host makes it from its own credentials (its environment, the
        dispatch's ``[storage]`` settings); ``None``, or why it cannot (one line)."""
        from eps.core.storage import CONF_VALUE, StorageError, rclone_config
        from eps.shell.config.storage import StorageSettings
        from eps.shell.lanes.jobs import read_env_values, write_env_values
        from eps.shell.run.storage import remotes, schemes_of

        values = read_env_values(self.ledger.state_dir, child) or {}
        schemes = schemes_of(job)
        if CONF_VALUE in values or not schemes:
            return None
        try:
            conf = rclone_config(remotes(schemes, settings.storage or StorageSettings(), lanes.env, machine=True))
        except StorageError as exc:
            return f"storage: {exc}"
        write_env_values(self.ledger.state_dir, child, {**values, CONF_VALUE: conf})
        return None

    def stage(self, p: PhaseRecord, settings: Settings) -> str | None:
        """Put each need's outputs under ``.eps-inputs/<need>/`` of the phase's staged workdir
        (its job ships it); ``None``, or why it could not (the disk's margin, a need's
        outputs not here).  A job with storage is given them by its own machine (its job's
        ``inputs``, set at execute), so nothing is staged here."""
        from eps.core.room import margin_bytes

        row = self.ledger.dispatch(p.id)
        staged = stage_dir(self.ledger.state_dir, self.dispatch, p.name)
        if row is None or row.job.workdir != staged:  # storage: its machine copies them (its job's inputs)
            return None
        root = os.path.join(staged, INPUTS_DIR)
        sources = {}
        for need in p.needs:
            for dest, of in self.sources(need):
                src = os.path.join(self.ledger.state_dir, "outputs", of)
                if not os.path.isdir(src):
                    return f"inputs: the outputs of {need!r} are not on this host ({src})"
                sources[dest] = src
        size = sum(_size(s) for s in sources.values())
        margin = margin_bytes(settings.policy.thresholds.vm_disk_margin_gb)
        os.makedirs(root, mode=0o700, exist_ok=True)
        free = shutil.disk_usage(root).free
        if free - size < margin:
            return (f"inputs: staging {size} bytes would leave {free - size} bytes free on this host, "
                    f"below its margin of {margin} (vm_disk_margin_gb)")  # fmt: skip
        for need, src in sources.items():
            dst = os.path.join(root, need)
            shutil.rmtree(dst, ignore_errors=True)
            os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
            shutil.copytree(src, dst, symlinks=True)
        self.log.emit(Event.INPUTS, dispatch=p.id, inputs=[
            {"url": s, "dest": f"{INPUTS_DIR}/{n}", "objects": _count(s), "bytes": _size(s)}
            for n, s in sources.items()])  # fmt: skip
        return None


    def sources(self, need: str) -> list[tuple[str, str]]:
        """Where need ``need``'s outputs go under the inputs, and the row whose outputs they
        are (:func:`after_sources`)."""
        p = self.record[need]
        return after_sources(self.ledger, p.id, need) if p.after else [(need, p.id)]


def after_sources(ledger: Ledger, dispatch: str, name: str) -> list[tuple[str, str]]:
    """Where the outputs of ``dispatch``, which ``--after`` waits for (as ``name``), go under
    the inputs, and the rows whose outputs they are: its own (``<name>``); each task's of a
    fan-out or sweep (``<name>/<i>``, i its task index); each final phase's of a pipeline,
    those no other phase needs (``<name>/<phase>``)."""
    record = read_record(ledger, dispatch)
    if record is not None:
        return [(f"{name}/{p.name}", p.id) for p in finals(record)]
    tasks = ledger.children(dispatch)
    if not tasks:
        return [(name, dispatch)]
    return [(f"{name}/{t.job.task_index}", t.id) for t in tasks]


def finals(record: Sequence[PhaseRecord]) -> list[PhaseRecord]:
    """A pipeline's final phases: those no other phase needs (a dispatch it waits for is none)."""
    needed = {n for p in record for n in p.needs}
    return [p for p in record if not p.after and p.name not in needed]


def _count(path: str) -> int:
    return sum(len(files) for _base, _dirs, files in os.walk(path))


def _size(path: str) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for f in files:
            full = os.path.join(base, f)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total


# --- eps status and eps wait ---------------------------------------------------------------------------------


def status_of(ledger: Ledger, dispatch: str, record: Sequence[PhaseRecord]) -> list[dict[str, Any]]:
    """``eps status``'s ``phases`` of pipeline ``dispatch`` (its ``record``): each phase's name,
    row, needs, state (:class:`PhaseState`), result and lane."""
    rows = {r.id: r for r in ledger.children(dispatch)}
    out = []
    for p in record:
        row = ledger.dispatch(p.id) if p.after else rows.get(p.id)
        started = bool(row is not None and ledger.attempts(p.id))
        state = after_state(ledger, p.id) if p.after else phase_state(row, started)
        out.append({"phase": p.name, "dispatch": p.id, "needs": list(p.needs), "state": state.value,
                    "result": None if row is None else result_word(row.state, row.job_status, row.exit_code),
                    "lane": None if row is None or row.handle is None else row.handle.lane})  # fmt: skip
    return out


def phases_line(phases: Sequence[dict[str, Any]]) -> str:
    """``eps status``'s note of a pipeline: ``prep succeeded, train running, report waiting``."""
    return ", ".join(f"{p['phase']} {p['state']}" for p in phases)


def exit_of(ledger: Ledger, rows: Sequence[DispatchRow], say: Callable[[str], object]) -> int | None:
    """The exit code of waiting for a pipeline's phases (``rows``), each failed phase named
    through ``say``, each phase ended dependency_failed too; ``None`` when they are no
    pipeline's.  0: every phase succeeded; :data:`PHASE_FAILED` otherwise."""
    from eps.core.contract import PHASE_FAILED

    parent = rows[0].parent if rows else None
    record = read_record(ledger, parent) if parent is not None else None
    if record is None or parent is None or {r.id for r in rows} != {p.id for p in record if not p.after}:
        return None  # no pipeline, or one phase of it (D/phase: its own code)
    by_id = {r.id: r for r in rows}
    if any(p.after for p in record) and len(rows) == 1:  # execute --after D: the job's own code once it ran
        if phase_state(rows[0], True) is not PhaseState.DEPENDENCY_FAILED:
            return None
        say(f"eps: {parent}: {rows[0].message}\n")
        return PHASE_FAILED
    bad = 0
    for p in (p for p in record if not p.after):
        row = by_id.get(p.id)
        state = phase_state(row, True)
        if row is None or state is PhaseState.SUCCEEDED:
            continue
        bad += 1
        if state is PhaseState.DEPENDENCY_FAILED:
            say(f"eps: {parent} phase {p.name} ({p.id}): {row.message}\n")
        else:
            say(
                f"eps: {parent} phase {p.name} ({p.id}): {result_word(row.state, row.job_status, row.exit_code)}"
                f"{'' if _back(row) or row.state is not DispatchState.ENDED else ' (its outputs did not come back)'}\n"
            )
    return PHASE_FAILED if bad else 0
