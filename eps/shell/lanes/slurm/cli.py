"""SLURM through its CLIs: sbatch, squeue, sacct, scancel and sacctmgr through their CLIs.

Every command goes through one injected *runner* (argv, stdin) -> (rc, stdout,
stderr); the production default runs a local subprocess.  A cluster behind a
login node is reached with a command *prefix* such as ``("ssh",
"fellows-login")``: the SLURM argv is then passed as one shell-quoted string,
because ssh hands its arguments to the remote shell joined by blanks.

Fallible calls return ``returns.result.Result`` with a :class:`LaneFailure` on
failure; the adapter classifies what SLURM said and decides nothing else.  A
PENDING job is a state, not a failure.

Two of the fellows cluster's hard rules are also enforced here, as a last guard
behind the renderer: :meth:`SlurmClient.submit` never sends ``--export`` nor a
script that sets ``CUDA_VISIBLE_DEVICES``, and with a ``user`` every ``scancel`` is
scoped to that user's own jobs (``scancel -u USER``).  With a :class:`Pacer`,
submissions to the cluster from this host go one at a time, spaced by its gap.

A robot login (``robot=True``, ``[[clusters]] access = "robot"``) runs only
:data:`~eps.core.clusters.ROBOT_COMMANDS`: any other command is refused before anything runs
(an INVALID_REQUEST, code ``robot_login``), so sacct and sacctmgr are never asked there.  Its
squeue formats use ``@`` between fields (a forced command refuses ``|``); a job squeue no
longer lists is :data:`GONE` (its end is in its wrapper's files, read by the lane's callers);
a start estimate is read against this machine's clock (no ``date`` runs there).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from attrs import frozen
from returns.result import Failure, Result, Success

from eps.core.clusters import robot_refusal
from eps.core.durations import parse_slurm_time
from eps.core.model import QosGrants, QosTier
from eps.core.outcome import FailureKind, LaneFailure
from eps.shell.util.polling import poll_until

if TYPE_CHECKING:  # the pacer's module is imported by whoever builds one (the lane registry)
    from eps.shell.lanes.slurm.pacing import Pacer


class Runner(Protocol):
    """Runs one argv (optionally feeding ``stdin``) and reports (rc, stdout, stderr)."""

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]: ...


def subprocess_runner(
    argv: Sequence[str], stdin: str | None = None, *, timeout_s: float = 60.0
) -> tuple[int, str, str]:
    """The production runner.  A missing command is rc 127, a hung one rc 124 (as in a shell).
    Without ``stdin`` the command's stdin is closed: an ``ssh login ...`` never reads eps's
    own stdin (a terminal, an agent's pipe) and never waits on it."""
    from eps.shell.config.secrets import without_credentials

    feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    env = without_credentials(dict(os.environ))  # a local sbatch exports its environment into the job
    try:
        proc = subprocess.run(list(argv), **feed, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env=env)  # fmt: skip
    except FileNotFoundError as exc:
        return 127, "", f"{argv[0]}: command not found ({exc.strerror})"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer within {timeout_s:g} s"
    return proc.returncode, proc.stdout, proc.stderr


#: squeue/sacct states in which a job holds or may still take resources.
LIVE_STATES: frozenset[str] = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}
)
#: The state :meth:`SlurmClient.poll` reports for a job neither squeue nor sacct knows.
GONE = "GONE"

_POLL_FIELDS = ("%i", "%T", "%r", "%q")
_LIST_FIELDS = (*_POLL_FIELDS, "%j")
#: What the squeue formats put between fields: ``|``, and through a robot login ``@`` (its
#: forced command refuses a ``|`` anywhere in a command; no state, reason or QoS holds an ``@``).
_SEPARATOR = {False: "|", True: "@"}
#: The exit code of a command a robot login may not run, refused here before anything ran
#: (a shell's "cannot execute"); :func:`classify` reads it with :data:`_ROBOT_MARK`.
NOT_ALLOWED = 126
_ROBOT_MARK = "is a robot login"

# What sbatch/scancel print when a job id is unknown to the controller.
_INVALID_JOB = "Invalid job id"
# sbatch refusals that mean the config names a partition or account the cluster does not
# have (or does not give this user): a fix for the user, never a capacity refusal
# (MISCONFIGURED, code = the setting).  Matched case-insensitively: SLURM 22.05's sbatch
# prints "sbatch: error: invalid partition specified: X" itself, then the controller's
# "Batch job submission failed: Invalid partition name specified"; a bad --account (or one
# the partition does not allow) is "Invalid account or account/partition combination
# specified" (``--test-only`` says "allocation failure: ..." with the same texts).
_MISCONFIGURED_MARKERS = (
    ("invalid partition", "partition"),
    ("no partition specified or system default partition", "partition"),
    ("user's group not permitted to use this partition", "partition"),
    ("invalid account", "account"),
)
# sbatch refusals that mean "not under this QoS": skip the rung (REFUSED).  A QoS the user
# is not granted ("Invalid qos specification") is a capacity refusal, not a config error.
_REFUSED_MARKERS = (
    "Invalid qos specification",
    "QOSNotAllowed",
    "not allowed to use",
    "Job violates accounting/QOS policy",
    "Invalid generic resource",
    "Requested node configuration is not available",
    "Requested time limit is invalid",
    "AccessDenied",
)
# The controller (or the login node) did not answer: nothing on this lane will work.
_UNREACHABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Connection refused",
    "Could not resolve hostname",
    "No route to host",
    "Permission denied (publickey",
)
_TRANSIENT_MARKERS = ("Socket timed out", "Resource temporarily unavailable", "slurm_persist_conn_open")

# What no submission may carry (fellows' hard rules; each crashed or broke shared nodes
# there): an --export option (slurmd crashes), or a script that exports through #SBATCH
# or sets CUDA_VISIBLE_DEVICES (SLURM sets it to the job's own GPUs).
_EXPORT_OPTION = "--export"
_FORBIDDEN_SCRIPT_LINE = re.compile(
    r"^[ \t]*(?:#SBATCH[ \t]+--export|(?:export[ \t]+)?CUDA_VISIBLE_DEVICES=)", re.MULTILINE
)


@frozen
class JobStatus:
    """One job as squeue (or, once it has left squeue, sacct) reports it.

    ``reason`` is the pending reason (``Priority``, ``QOSMaxGRESPerUser``, ...),
    ``None`` when squeue prints ``None`` or the job is not pending."""

    job_id: str
    state: str
    reason: str | None = None
    qos: str | None = None
    name: str | None = None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


class SlurmClient:
    """SLURM's CLIs, run locally or through ``prefix`` (a login command such as ssh)."""

    def __init__(
        self,
        runner: Runner = subprocess_runner,
        prefix: Sequence[str] = (),
        user: str | None = None,
        pacer: Pacer | None = None,
        *,
        robot: str | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """``user``: every scancel names it (``scancel -u USER``), so a wrong job id can
        never cancel another user's job.  ``pacer``: every sbatch takes its turn.
        ``robot``: the cluster's name when it is reached through a robot login (only
        sbatch, scancel, squeue, scp, rsync); ``wall``: this machine's clock (its estimates)."""
        self._runner = runner
        self._prefix = tuple(prefix)
        self._user = user
        self._pacer = pacer
        self._robot = robot
        self._wall = wall
        self._sep = _SEPARATOR[robot is not None]

    @property
    def robot(self) -> bool:
        return self._robot is not None

    def _run(self, argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        """Run one SLURM command (through the prefix).  Through a robot login, a command its
        key does not run is not run at all: rc :data:`NOT_ALLOWED` and why, on stderr."""
        if self._robot is not None and (refusal := robot_refusal(argv, self._robot)) is not None:
            return NOT_ALLOWED, "", refusal
        if self._prefix:
            return self._runner([*self._prefix, shlex.join(argv)], stdin)
        return self._runner(list(argv), stdin)

    # --- jobs ----------------------------------------------------------------------------

    def submit(self, script: str, options: Sequence[str] = ()) -> Result[str, LaneFailure]:
        """``sbatch --parsable [OPTIONS]`` reading ``script`` on stdin; the job id on success.
        ``options`` go on the command line, where any path is one argument (an ``#SBATCH``
        line cannot hold a blank).

        Refused without running sbatch (INVALID_REQUEST, a bug in whoever built the
        submission): any ``--export`` option, and a script with an ``#SBATCH --export`` line
        or one that sets ``CUDA_VISIBLE_DEVICES``."""
        refusal = _forbidden(script, options)
        if refusal is not None:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, refusal, code="cluster_rule"))
        argv = ["sbatch", "--parsable", *options]
        if self._pacer is None:
            rc, out, err = self._run(argv, script)
        else:
            with self._pacer.turn():
                rc, out, err = self._run(argv, script)
        if rc == 0:
            job_id = out.strip().splitlines()[-1].split(";")[0] if out.strip() else ""
            if job_id.isdigit():
                return Success(job_id)
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"sbatch printed no job id: {out.strip()!r}"))
        return Failure(classify(rc, err or out, "sbatch"))

    def test_only(self, script: str, options: Sequence[str] = ()) -> LaneFailure | None:
        """Whether the cluster would take ``script`` (``sbatch --test-only``, nothing
        submitted, so not paced): ``None`` when it would, else what it said, classified
        (a wrong partition or account is MISCONFIGURED).  The submit guards apply."""
        refusal = _forbidden(script, options)
        if refusal is not None:
            return LaneFailure(FailureKind.INVALID_REQUEST, refusal, code="cluster_rule")
        rc, out, err = self._run(["sbatch", "--test-only", *options], script)
        return None if rc == 0 else classify(rc, err or out, "sbatch")

    def start_estimate(self, script: str) -> int | None:
        """Seconds until ``script`` would start, by the cluster's own estimate (``sbatch
        --test-only``, nothing submitted), against the cluster's own clock (its local time,
        printed by the same shell); ``None`` when it gives none.  Through a robot login,
        ``sbatch --test-only`` alone, against this machine's clock: no clock correction."""
        if self.robot:
            _, out, err = self._run(["sbatch", "--test-only"], script)
            return start_estimate_s(out + err, now=datetime.fromtimestamp(self._wall()))
        line = "sbatch --test-only 2>&1; echo; date +%Y-%m-%dT%H:%M:%S"
        _, out, err = self._run(["bash", "-c", line], script)
        return start_estimate_s(out + err)

    def poll(self, job_id: str) -> Result[JobStatus, LaneFailure]:
        """The job's state and pending reason from ``squeue``; once it has left squeue,
        its final state from ``sacct``, or :data:`GONE` when neither knows it.  A robot login
        has no sacct: a job squeue no longer lists is :data:`GONE` (its wrapper's files say
        how it ended)."""
        rc, out, err = self._run(["squeue", "-h", "-j", job_id, "-o", self._sep.join(_POLL_FIELDS)])
        if rc == 0:
            for line in out.splitlines():
                status = _parse_status(line, self._sep)
                if status is not None and status.job_id == job_id:
                    return Success(status)
        elif _INVALID_JOB not in err:
            return Failure(classify(rc, err, "squeue"))
        return Success(JobStatus(job_id, GONE)) if self.robot else self._from_sacct(job_id)

    def _from_sacct(self, job_id: str) -> Result[JobStatus, LaneFailure]:
        rc, out, err = self._run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,QOS"])
        if rc != 0:
            return Failure(classify(rc, err, "sacct"))
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) >= 3 and parts[0] == job_id:
                # "CANCELLED by 0" -> CANCELLED
                state = parts[1].split(" ")[0] or GONE
                qos = parts[2] if parts[2] not in ("", "Unknown") else None
                return Success(JobStatus(job_id, state, None, qos))
        return Success(JobStatus(job_id, GONE))

    def history_by_name(self, name: str, since_epoch: float) -> Result[tuple[JobStatus, ...], LaneFailure]:
        """Jobs named ``name`` that ``sacct`` has seen since ``since_epoch`` (any state):
        tells "never submitted" from "submitted and already gone" after a crash."""
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since_epoch))
        rc, out, err = self._run(["sacct", "-n", "-P", "-X", f"--name={name}", "-S", since, "-o", "JobID,State,QOS"])
        if rc != 0:
            return Failure(classify(rc, err, "sacct"))
        found = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) >= 3 and parts[0]:
                qos = parts[2] if parts[2] not in ("", "Unknown") else None
                found.append(JobStatus(parts[0], parts[1].split(" ")[0] or GONE, None, qos, name))
        return Success(tuple(found))

    def accounting(self, options: Sequence[str]) -> Result[str, LaneFailure]:
        """``sacct OPTIONS``'s output as it printed it (``eps simulate`` reads the history)."""
        rc, out, err = self._run(["sacct", *options])
        if rc != 0:
            return Failure(classify(rc, err or out, "sacct"))
        return Success(out)

    def cancel(self, job_id: str, *, pending_only: bool = False) -> Result[None, LaneFailure]:
        """``scancel``; a job the controller no longer knows counts as cancelled.

        With the client's ``user``: ``scancel -u USER ... JOBID``, which SLURM applies only
        when the job is that user's (another user's job is left alone, and scancel exits 0).
        ``pending_only`` adds ``--state=PENDING``: a job that started meanwhile is left
        running (scancel then succeeds and changes nothing)."""
        argv = ["scancel"]
        if self._user is not None:
            argv += ["-u", self._user]
        if pending_only:
            argv.append("--state=PENDING")
        argv.append(job_id)
        rc, out, err = self._run(argv)
        if rc == 0 or _INVALID_JOB in err:
            return Success(None)
        return Failure(classify(rc, err or out, "scancel"))

    def wait_gone(
        self,
        job_id: str,
        timeout_s: float,
        *,
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> bool:
        """Poll until the job is in no live state (squeue shows it ended, or it left
        squeue).  False when it is still live after ``timeout_s`` or cannot be read."""

        def gone() -> bool | None:
            match self.poll(job_id):
                case Success(status) if not status.live:
                    return True
            return None

        return poll_until(gone, timeout_s=timeout_s, interval_s=interval_s, clock=clock, sleep=sleep) is True

    def list_by_name(self, prefix: str) -> Result[tuple[JobStatus, ...], LaneFailure]:
        """The user's jobs (any live state) whose name starts with ``prefix``: for reconcile
        (``-r``: each task of an array its own line, ``J_i``, pending ones too)."""
        rc, out, err = self._run(["squeue", "-h", "-r", "--me", "-o", self._sep.join(_LIST_FIELDS)])
        if rc != 0:
            return Failure(classify(rc, err, "squeue"))
        found = []
        for line in out.splitlines():
            status = _parse_status(line, self._sep, with_name=True)
            if status is not None and status.name is not None and status.name.startswith(prefix):
                found.append(status)
        return Success(tuple(found))

    # --- grants --------------------------------------------------------------------------

    def discover_grants(self, user: str) -> Result[QosGrants, LaneFailure]:
        """The QoS tiers ``user`` may use per cluster, with each tier's limits.

        ``sacctmgr -P -n show assoc user=U format=Cluster,User,Account,QOS`` gives
        the granted names (the union over the user's associations);
        ``sacctmgr -P -n show qos format=Name,Priority,MaxWall,MaxTRESPU,Preempt,PreemptMode,GraceTime``
        their priority, MaxWall, per-user GPU cap and preemption (:func:`parse_grants`).
        Tiers come highest priority first."""
        rc, assoc_out, err = self._run(
            ["sacctmgr", "-P", "-n", "show", "assoc", f"user={user}", "format=Cluster,User,Account,QOS"]
        )
        if rc != 0:
            return Failure(classify(rc, err, "sacctmgr"))
        rc, qos_out, err = self._run(["sacctmgr", "-P", "-n", "show", "qos", f"format={QOS_FORMAT}"])
        if rc != 0:
            return Failure(classify(rc, err, "sacctmgr"))
        try:
            return Success(parse_grants(assoc_out, qos_out))
        except ValueError as exc:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"cannot read sacctmgr output: {exc}"))


#: The QoS fields :meth:`SlurmClient.discover_grants` asks ``sacctmgr show qos`` for, in order.
QOS_FORMAT = "Name,Priority,MaxWall,MaxTRESPU,Preempt,PreemptMode,GraceTime"


def parse_grants(assoc_out: str, qos_out: str) -> QosGrants:
    """Build :class:`QosGrants` from the two ``sacctmgr -P -n`` listings (see
    :meth:`SlurmClient.discover_grants`).  Raises ``ValueError`` on a malformed line.

    A QoS line has the fields of :data:`QOS_FORMAT`; a line of only the first four (a
    listing captured before preemption was read) gives a tier without preemption facts.
    ``Preempt`` is a comma list (empty: preempts nothing).  ``PreemptMode`` is lowercased;
    ``cluster`` or empty is ``None``: the cluster's own PreemptMode applies.  ``GraceTime``
    0 is ``None``, like a missing one: SLURM prints ``00:00:00`` for every QoS that sets
    none, so 0 cannot tell "no grace" from "not configured", and either way a preempted
    job gets only the cluster's KillWait between SIGTERM and SIGKILL, no grace of its tier."""
    granted: dict[str, set[str]] = {}
    for line in assoc_out.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < 4:
            raise ValueError(f"association line {line!r} has fewer than 4 fields")
        cluster, qos_list = parts[0], parts[3]
        granted.setdefault(cluster, set()).update(q for q in qos_list.split(",") if q)
    tiers: dict[str, QosTier] = {}
    for line in qos_out.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < 4:
            raise ValueError(f"QoS line {line!r} has fewer than 4 fields")
        name, priority, max_wall, max_tres, preempt, mode, grace = [*parts, "", "", ""][:7]
        mode = mode.strip().lower()
        tiers[name] = QosTier(
            name,
            priority=int(priority or 0),
            max_wall_s=parse_slurm_time(max_wall),
            max_gpus_per_user=gpu_cap(max_tres),
            preempts=tuple(q for q in preempt.split(",") if q),
            preempt_mode=None if mode in ("", "cluster") else mode,
            grace_s=_grace_s(grace),
        )
    clusters = []
    for cluster in sorted(granted):
        found = [tiers.get(q, QosTier(q, priority=0)) for q in granted[cluster]]
        found.sort(key=lambda t: (-t.priority, t.name))
        clusters.append((cluster, tuple(found)))
    return QosGrants(clusters=tuple(clusters))


def _grace_s(text: str) -> int | None:
    # "" and "00:00:00" alike: no grace of the tier's own (see parse_grants)
    if not text.strip():
        return None
    seconds = parse_slurm_time(text)
    return seconds or None


_WILL_START = re.compile(r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
_NOW = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\s*$", re.MULTILINE)


def start_estimate_s(text: str, *, now: datetime | None = None) -> int | None:
    """``sbatch --test-only``'s start time less the cluster's time after it (both its local
    time), in whole seconds, at least 0; ``None`` when either is missing.  ``now``: this
    machine's local time instead of the cluster's (a robot login prints none): no clock
    correction, so a cluster clock or time zone that differs from this machine's is off by
    as much."""
    start = _WILL_START.search(text)
    if now is None:
        seen = _NOW.findall(text)
        now = datetime.fromisoformat(seen[-1]) if seen else None
    if start is None or now is None:
        return None
    seconds = (datetime.fromisoformat(start[1]) - now).total_seconds()
    return max(0, int(seconds))


def gpu_cap(max_tres: str) -> int | None:
    """The GPU count in a TRES list such as ``cpu=4,gres/gpu=16``; ``None`` = no cap.

    A typed entry (``gres/gpu:h200=8``) counts when no untyped one is given."""
    typed: int | None = None
    for item in max_tres.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            continue
        if key == "gres/gpu":
            return int(value)
        if key.startswith("gres/gpu:"):
            typed = int(value) if typed is None else max(typed, int(value))
    return typed


def classify(rc: int, message: str, command: str) -> LaneFailure:
    """Map a failed SLURM command to one :class:`FailureKind` (the message is kept, trimmed)."""
    text = " ".join(message.split()) or f"{command} exited {rc}"
    if rc == NOT_ALLOWED and _ROBOT_MARK in text:  # refused here, never run (SlurmClient._run)
        return LaneFailure(FailureKind.INVALID_REQUEST, text, code="robot_login")
    if rc in (127, 255) or any(m in text for m in _UNREACHABLE_MARKERS):
        return LaneFailure(FailureKind.UNREACHABLE, text, code=f"rc={rc}")
    if rc == 124 or any(m in text for m in _TRANSIENT_MARKERS):
        return LaneFailure(FailureKind.TRANSIENT, text, code=f"rc={rc}")
    lowered = text.lower()
    for marker, setting in _MISCONFIGURED_MARKERS:
        if marker in lowered:
            return LaneFailure(FailureKind.MISCONFIGURED, text, code=setting)
    for marker in _REFUSED_MARKERS:
        if marker in text:
            return LaneFailure(FailureKind.REFUSED, text, code=marker)
    if command == "sbatch":
        return LaneFailure(FailureKind.REFUSED, text, code=f"rc={rc}")
    return LaneFailure(FailureKind.TRANSIENT, text, code=f"rc={rc}")


def _forbidden(script: str, options: Sequence[str]) -> str | None:
    """Why this submission breaks a cluster rule, or ``None`` when it breaks none."""
    for option in options:
        if option.startswith(_EXPORT_OPTION):
            return f"refused to submit with {option!r}: never --export (it crashes slurmd); export in the script"
    found = _FORBIDDEN_SCRIPT_LINE.search(script)
    if found is None:
        return None
    line = script[found.start() :].split("\n", 1)[0].strip()
    if "--export" in found[0]:
        return f"refused to submit a script with {line[:80]!r}: never --export (it crashes slurmd)"
    return f"refused to submit a script with {line[:80]!r}: never set CUDA_VISIBLE_DEVICES (SLURM sets it)"


def _parse_status(line: str, sep: str = "|", *, with_name: bool = False) -> JobStatus | None:
    fields = 5 if with_name else 4
    parts = line.strip().split(sep, fields - 1)
    if len(parts) != fields or not parts[0]:
        return None
    reason = parts[2] if parts[2] not in ("", "None", "(null)") else None
    return JobStatus(
        job_id=parts[0],
        state=parts[1],
        reason=reason,
        qos=parts[3] or None,
        name=parts[4] if with_name else None,
    )
