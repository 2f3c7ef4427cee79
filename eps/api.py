"""eps from Python, for notebooks and agents: ``from eps import Job, plan, execute, status``.

    >>> from eps import Job, plan
    >>> p = plan(Job("gpu-1", duration="2h"))
    >>> p.can_start, p.rungs[0].rung.lane
    (True, 'fellows')
    >>> print(p)                       # the table `eps plan` prints
    >>> p.to_dict()                    # what `eps plan --json` prints (schema: `eps schema plan`)

Everything reads the user's settings (``$EPS_CONFIG`` or ``~/.config/eps/config.toml``
and the environment) unless ``env`` replaces the environment.  A :class:`Job` is
checked when it is made, with the messages the command line gives; a bad one raises
:class:`JobError` or :class:`ConfigError` (both ``ValueError``).  :func:`execute` and
:func:`status` run the same code as ``eps execute --json`` / ``eps status --json``.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from eps.core.durations import parse_duration
from eps.core.healing import job_max_restarts, job_retry
from eps.core.model import CapacitySnapshot, JobError, LaneDown, ParkState, QosGrants, RoutePlan
from eps.core.model import Job as CoreJob
from eps.core.tables import HEALING, Healing
from eps.core.usable import RungStatus
from eps.shell.settings import ConfigError, Settings

__all__ = ["ConfigError", "Execution", "Job", "JobError", "Plan", "execute", "plan", "status"]


def _settings(env: Mapping[str, str] | None) -> Settings:
    from eps.shell.config import load_settings

    return load_settings(os.environ if env is None else env)


def _seconds(value: str | float, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise JobError(f"bad_{what}", f"{what} must be a duration such as '2h' or a number of seconds, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise JobError(f"bad_{what}", f"bad {what} {value!r}: a finite number of seconds")
    try:
        return parse_duration(str(value))
    except ValueError as exc:
        raise JobError(f"bad_{what}", str(exc)) from None


def _checked(what: str, check: Callable[[Any], Any], value: Any) -> Any:
    """``check(value)``; its ValueError as :class:`JobError` ``bad_<what>``."""
    try:
        return check(value)
    except ValueError as exc:
        raise JobError(f"bad_{what}", str(exc)) from None


@dataclass(frozen=True)
class Job:
    """A job, checked on construction (same rules and messages as ``eps plan``/``execute``).

    ``intent`` (see ``eps intents``), ``duration`` (``"1h30m"``, ``"90min"``,
    ``"01:30:00"`` or seconds; ``None``, the default: unknown, taken as long: never the
    shared VM, no spot unless restartable, the time limit the lane's maximum),
    ``restartable``, ``footprint_gb``, ``gradient_fit``, ``count`` (parallel copies),
    ``backend`` (pin a lane: ``"fellows"``, ``"gcp"``, ...), and for :func:`execute`:
    ``command`` (one string is a shell line, a list an argv), ``workdir``, ``setup``,
    ``env`` (``"KEY"`` or ``"KEY=VALUE"``), ``time_limit``.  The retry policy (README,
    "Jobs that heal"): ``retry`` (events: ``("interruption", "error")`` or
    ``"interruption,error"``; ``None``: the default), ``retry_for`` (a duration),
    ``max_restarts`` (0..1000), ``sync_every`` (a duration; 0: never; ``None``: ``[jobs]
    sync_every_s``).  ``settings_env`` replaces ``os.environ`` when the settings are read
    for the check.
    """

    intent: str
    duration: str | int | float | None = None  # None: unknown, taken as long (see ``eps plan --help``)
    restartable: bool = False
    footprint_gb: float = 0.0
    gradient_fit: bool = False
    count: int = 1
    backend: str | None = None
    command: str | Sequence[str] = ()
    workdir: str | None = None
    setup: str | None = None
    env: Sequence[str] = ()
    time_limit: str | int | None = None
    retry: str | Sequence[str] | None = None
    retry_for: str | int | float | None = None
    max_restarts: int | None = None
    sync_every: str | int | float | None = None
    settings_env: Mapping[str, str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        from eps.core.router import plan as route
        from eps.core.tables import DEFAULT_GRANTS

        if isinstance(self.count, bool) or not isinstance(self.count, int):
            raise JobError("bad_count", f"count must be a whole number, got {self.count!r}")
        if self.count < 1:
            raise JobError("bad_count", f"count must be at least 1, got {self.count}")
        fp = self.footprint_gb
        if isinstance(fp, bool) or not isinstance(fp, int | float) or fp < 0 or not math.isfinite(fp):
            raise JobError("bad_footprint", f"footprint must be a finite number >= 0, got {fp!r}")
        if self.time_limit is not None and _seconds(self.time_limit, "time_limit") <= 0:
            raise JobError("time_limit", "--time-limit must be positive")
        if self.max_restarts is not None:
            _checked("max_restarts", job_max_restarts, self.max_restarts)
        core = self.core()
        route(core, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=_settings(self.settings_env).policy)

    def core(self) -> CoreJob:
        """The core's record of this job (what ``plan()`` reads)."""
        command = (self.command,) if isinstance(self.command, str) else tuple(self.command)
        return CoreJob(
            intent=self.intent,
            duration_s=None if self.duration is None else _seconds(self.duration, "duration"),
            restartable=bool(self.restartable),
            footprint_gb=float(self.footprint_gb),
            gradient_fit=bool(self.gradient_fit),
            count=self.count,
            pin=self.backend,
            command=command,
            retry=None if self.retry is None else _checked("retry", job_retry, self.retry),
            retry_for_s=None if self.retry_for is None else _seconds(self.retry_for, "retry_for"),
            max_restarts=self.max_restarts,
            sync_every_s=None if self.sync_every is None else _seconds(self.sync_every, "sync_every"),
        )

    def argv(self) -> list[str]:
        """The same job as ``eps`` job options (and ``-- COMMAND``)."""
        core = self.core()
        out = [core.intent, *([] if core.duration_s is None else ["--duration", str(core.duration_s)]),
               "--footprint-gb", repr(core.footprint_gb), "--count", str(core.count)]  # fmt: skip
        out += ["--restartable"] if core.restartable else []
        out += ["--gradient-fit"] if core.gradient_fit else []
        out += ["--pin", core.pin] if core.pin else []
        out += ["--workdir", self.workdir] if self.workdir else []
        out += ["--setup", self.setup] if self.setup else []
        for item in self.env:
            out += ["--env", item]
        if self.time_limit is not None:
            out += ["--time-limit", str(_seconds(self.time_limit, "time_limit"))]
        out += ["--retry", ",".join(core.retry)] if core.retry is not None else []
        out += ["--retry-for", str(core.retry_for_s)] if core.retry_for_s is not None else []
        out += ["--max-restarts", str(core.max_restarts)] if core.max_restarts is not None else []
        out += ["--sync-every", str(core.sync_every_s)] if core.sync_every_s is not None else []
        return [*out, "--", *core.command] if core.command else out


class Plan(NamedTuple):
    """A route plan and what this machine can run of it.  ``print(plan)`` shows the table of
    ``eps plan``; :meth:`to_dict` is ``eps plan --json``."""

    route: RoutePlan
    job: CoreJob
    down: tuple[LaneDown, ...]
    healing: Healing = HEALING  # with the config's numbers ([jobs] sync_every_s)

    @property
    def rungs(self) -> tuple[RungStatus, ...]:
        """Each rung (``.rung``) with ``.runnable`` and, when not, ``.down`` (why, and the fix)."""
        from eps.core.usable import mark

        return mark(self.route, self.down)

    @property
    def can_start(self) -> bool:
        """Whether ``execute`` of this job could start anything on this machine now."""
        from eps.core.usable import can_start

        return can_start(self.route, self.down)

    @property
    def terminal(self) -> str | None:
        return None if self.route.terminal is None else self.route.terminal.value

    def to_dict(self) -> dict[str, Any]:
        from eps.shell.cli.views import plan_dict

        return plan_dict(self.route, self.job, self.down, self.healing)

    def __str__(self) -> str:
        from eps.shell.cli.views import Out, print_plan

        buf = io.StringIO()
        print_plan(self.route, self.job, Out(buf, 100), self.down, self.healing)
        return buf.getvalue()


def plan(
    job: Job,
    *,
    snapshot: CapacitySnapshot | None = None,
    grants: QosGrants | None = None,
    park: ParkState | None = None,
    env: Mapping[str, str] | None = None,
) -> Plan:
    """The route plan for ``job`` under the user's settings, with each rung marked runnable
    on this machine or not (why, and how to fix it).  Nothing is created or called."""
    from eps.core.router import plan as route
    from eps.core.tables import DEFAULT_GRANTS
    from eps.shell.availability import down_here
    from eps.shell.state.lives import remembered_here

    environ = os.environ if env is None else env
    settings = _settings(environ)
    core = job.core()
    snap = remembered_here(snapshot or CapacitySnapshot(), settings.state_dir)  # boot loops, as execute sees them
    result = route(core, snap, grants or DEFAULT_GRANTS, park, policy=settings.policy)
    lanes = tuple(dict.fromkeys(r.lane for r in result.rungs))
    return Plan(result, core, (*snap.unavailable, *down_here(settings, environ, lanes)), settings.jobs.healing())


class Execution(NamedTuple):
    """What :func:`execute` did: the exit code ``eps execute`` would leave with, the dispatch
    ids, and every progress event (the ``events`` schema)."""

    exit_code: int
    dispatches: tuple[str, ...]
    events: tuple[dict[str, Any], ...]
    error: str | None = None


def _run(argv: list[str], env: Mapping[str, str] | None) -> tuple[int, str, str]:
    from eps.shell.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv, env=None if env is None else dict(env))
    return rc, out.getvalue(), err.getvalue()


def _error(err: str) -> str | None:
    for line in err.splitlines():
        if line.startswith("{"):
            return str(json.loads(line)["error"]["text"])
    return err.strip() or None


def execute(job: Job, *, wait: bool = False, dispatch_id: str | None = None,
            env: Mapping[str, str] | None = None) -> Execution:  # fmt: skip
    """Walk the plan for real, as ``eps execute --json`` does; with ``wait``, until the job
    ended (``exit_code`` is then the job's own).  A job without a command is refused."""
    argv = ["execute", "--json", *(["--wait"] if wait else [])]
    argv += ["--dispatch-id", dispatch_id] if dispatch_id else []
    rc, out, err = _run([*argv, *job.argv()], env)
    events = tuple(json.loads(line) for line in out.splitlines() if line.startswith("{"))
    ids = tuple(dict.fromkeys(e["dispatch"] for e in events if e.get("event") == "dispatch"))
    return Execution(rc, ids, events, None if rc == 0 else _error(err))


def status(
    dispatch: str | None = None,
    *,
    active: bool = False,
    since: str | int | None = None,
    intent: str | None = None,
    limit: int | None = 20,
    env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The dispatches as ``eps status --json`` lists them (schema: ``eps schema status``):
    one, or the active ones and the newest ``limit`` (``None``: all), or those matching
    ``active`` / ``since`` (a duration: ``"2d"``) / ``intent``."""
    argv = ["status", "--json", *([dispatch] if dispatch else []), *(["--active"] if active else [])]
    if since is not None:
        argv += ["--since", str(_seconds(since, "since"))]
    argv += ["--intent", intent] if intent else []
    argv += ["--all"] if limit is None else ["--limit", str(limit)]
    rc, out, err = _run(argv, env)
    if rc != 0:
        raise JobError("status", _error(err) or f"eps status exited {rc}")
    rows: list[dict[str, Any]] = json.loads(out)["dispatches"]
    return rows
