"""The history ``eps simulate`` replays (:mod:`eps.core.simulate`): read from ``sacct`` (a file,
or the cluster through its login prefix) and from the attempt ledger.

The sacct format is ``sacct -X -P -o JobID,JobName,QOS,Submit,Start,End,State,ReqTRES`` with
its header line; the columns may come in any order, and others may be present.  Times are the
cluster's own clock (sacct prints local time without a zone): they are read as such, so only
their differences and their time of day count.  A job that never started has ``Start``
``None`` or ``Unknown``; its wait ends at ``End`` (cancelled, e.g. at a park cap) or, still
pending, at the newest time the history holds (``as_of``): censored either way.

The ledger adds eps's own SLURM attempts that sacct does not hold (older than its window, or
purged): a park that timed out is a censored wait of its park time; one that started waited
until eps saw it start (within eps's polling).  sacct wins for a job both hold.  A cluster
reached through a robot login (sbatch, scancel, squeue, scp and rsync only) has no sacct: its
history is the ledger alone (:data:`ROBOT_NOTE`, said by ``eps simulate``).
"""

from __future__ import annotations

import calendar
import os
import re
import time
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from returns.result import Failure, Result, Success

from eps.core.model import LaneKind, Policy
from eps.core.names import dispatch_of_job
from eps.core.outcome import LaneFailure
from eps.core.simulate import Wait, ledger_wait

if TYPE_CHECKING:
    from eps.shell.lanes.slurm.cli import Runner, SlurmClient

#: The sacct columns eps asks for, and the ones a file must have.
SACCT_FIELDS = ("JobID", "JobName", "QOS", "Submit", "Start", "End", "State", "ReqTRES")
#: What ``eps simulate`` says of a history read from the ledger alone (a robot login).
ROBOT_NOTE = "a robot login runs no sacct: only eps's own attempts on it, as the ledger saw them"
_NO_TIME = frozenset({"", "None", "Unknown", "N/A"})
_GPUS = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")


class HistoryError(ValueError):
    """A sacct dump eps cannot read (no header, a missing column, a bad time).  One line."""


def _clock_s(text: str, where: str) -> int:
    """A sacct time (``2026-12-01T10:02:44``) as seconds on the cluster's own clock."""
    try:
        return calendar.timegm(datetime.fromisoformat(text).timetuple())
    except ValueError:
        raise HistoryError(f"{where}: not a sacct time: {text!r}") from None


def gpus_of(req_tres: str) -> int:
    """The GPUs a ``ReqTRES`` asks for (``gres/gpu=2`` or ``gres/gpu:h200=2``), 0 without any."""
    m = _GPUS.search(req_tres)
    return int(m[1]) if m else 0


def parse_sacct(text: str, *, source: str = "sacct", as_of: int | None = None) -> list[Wait]:
    """The waits of a ``sacct -X -P`` dump with its header line (see the module docstring)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split("|")]
    missing = [f for f in SACCT_FIELDS if f not in header]
    if missing:
        raise HistoryError(
            f"{source}: line 1 is not a sacct -P header with {','.join(SACCT_FIELDS)} (missing {', '.join(missing)})"
        )
    col = {name: header.index(name) for name in SACCT_FIELDS}
    rows: list[tuple[int, dict[str, str]]] = []
    for n, line in enumerate(lines[1:], start=2):
        cells = line.split("|")
        if len(cells) != len(header):
            raise HistoryError(f"{source}:{n}: {len(cells)} columns, the header has {len(header)}")
        rows.append((n, {name: cells[i].strip() for name, i in col.items()}))
    times = [
        _clock_s(r[k], f"{source}:{n}") for n, r in rows for k in ("Submit", "Start", "End") if r[k] not in _NO_TIME
    ]
    now = as_of if as_of is not None else max(times, default=0)
    return [w for n, r in rows if (w := _wait(r, f"{source}:{n}", now)) is not None]


def _wait(r: dict[str, str], where: str, now: int) -> Wait | None:
    if r["Submit"] in _NO_TIME or not r["QOS"]:
        return None
    submit = _clock_s(r["Submit"], where)
    end = None if r["End"] in _NO_TIME else _clock_s(r["End"], where)
    started = r["Start"] not in _NO_TIME and not r["State"].startswith("PENDING")
    if started:
        start = _clock_s(r["Start"], where)
        wait, run = start - submit, (None if end is None else end - start)
    else:
        wait, run = (now if end is None else end) - submit, None
    if wait < 0:
        raise HistoryError(f"{where}: job {r['JobID']} ends or starts before its submit time")
    return Wait(
        job_id=r["JobID"], tier=r["QOS"], dispatch=dispatch_of_job(r["JobName"]), gpus=gpus_of(r["ReqTRES"]),
        submit_s=submit, wait_s=wait, started=started, run_s=run,
    )  # fmt: skip


def clock_of(epoch: float) -> int:
    """A real epoch on the cluster's clock as sacct prints it (this machine's local time)."""
    return calendar.timegm(time.localtime(epoch))


def read_file(path: str) -> list[Wait]:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise HistoryError(f"{path}: {exc.strerror or exc}") from None
    return parse_sacct(text, source=path)


def sacct_options(since_epoch: float, *, all_users: bool, user: str | None) -> list[str]:
    """The sacct options eps runs on the cluster (its own jobs unless ``all_users``)."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since_epoch))
    who = ["-a"] if all_users else (["-u", user] if user else [])
    return ["-X", "-P", "-o", ",".join(SACCT_FIELDS), "-S", since, *who]


def read_cluster(
    client: SlurmClient, since_epoch: float, now_epoch: float, *, all_users: bool, user: str | None
) -> Result[list[Wait], LaneFailure]:
    """The cluster's history since ``since_epoch``, through the SLURM client (its login prefix)."""
    match client.accounting(sacct_options(since_epoch, all_users=all_users, user=user)):
        case Success(out):
            return Success(parse_sacct(out, source="sacct", as_of=clock_of(now_epoch)))
        case Failure(failure):
            return Failure(failure)
    raise AssertionError("unreachable")  # pragma: no cover


def read_login(
    login: tuple[str, ...], since_epoch: float, now_epoch: float, *, all_users: bool, user: str | None,
    runner: Runner | None = None,
) -> Result[list[Wait], LaneFailure]:
    """The cluster's history through its ``login`` (``ssh HOST`` or nothing: this host), by
    sacct; ``runner`` stands in for the subprocess (tests)."""
    from eps.shell.lanes.slurm.cli import SlurmClient, subprocess_runner

    client = SlurmClient(runner=runner or subprocess_runner, prefix=login)
    return read_cluster(client, since_epoch, now_epoch, all_users=all_users, user=user)


class LedgerUnread(HistoryError):
    """The ledger could not be read (say so, and that ``--no-ledger`` leaves it out)."""


def read_ledger(state_dir: str, policy: Policy, cluster: str, since_epoch: float, url: str | None = None) -> list[Wait]:
    """eps's own SLURM attempts on ``cluster`` since ``since_epoch``, as the ledger saw them
    (every host's, on a ledger a team shares; a park still running counts as a wait so far:
    :func:`eps.core.simulate.ledger_wait`).  Nothing when there is no ledger (it is never
    created here).  :class:`LedgerUnread` when it cannot be read."""
    if not url and not os.path.exists(os.path.join(state_dir, "ledger.sqlite3")):
        return []
    from eps.shell.state.ledger import LedgerError

    try:
        return _read_ledger(state_dir, policy, cluster, since_epoch, url)
    except LedgerError as exc:
        raise LedgerUnread(str(exc)) from None


def _read_ledger(state_dir: str, policy: Policy, cluster: str, since_epoch: float, url: str | None) -> list[Wait]:
    from eps.shell.state.ledger import Ledger

    ledger = Ledger(state_dir, url=url)
    try:
        now = time.time()
        found: list[Wait] = []
        for d in ledger.select(since=since_epoch):
            intent = policy.intent(d.job.intent)
            gpus = (intent.gpus if intent else 0) * d.job.count
            for a in ledger.attempts(d.id):
                if a.kind != LaneKind.SLURM or a.lane != cluster or not a.handle or not a.qos:
                    continue
                outcome = None if a.outcome is None else str(a.outcome)
                got = ledger_wait(str(a.state), outcome, a.started_at, a.updated_at, d.started_at, now)
                if got is not None:
                    found.append(Wait(job_id=a.handle, tier=a.qos, dispatch=d.id, gpus=gpus,
                                      submit_s=clock_of(a.started_at), wait_s=got[0], started=got[1]))  # fmt: skip
        return found
    finally:
        ledger.close()


def merge(sacct: Iterable[Wait], ledger: Iterable[Wait]) -> list[Wait]:
    """sacct's waits, and the ledger's for the jobs sacct does not hold."""
    waits = list(sacct)
    known = {w.job_id for w in waits}
    return waits + [w for w in ledger if w.job_id not in known]
