"""eps from Python, for notebooks and agents: ``from eps import Job, plan, execute, status``.

    >>> from eps import Job, plan
    >>> p = plan(Job("gpu-1", duration="2h"))
    >>> p.can_start, p.rungs[0].rung.lane
    (True, 'fellows')
    >>> print(p)                       # the table `eps plan` prints
    >>> p.to_dict()                    # what `eps plan --json` prints (schema: `eps schema plan`)

Everything reads the user's settings (``$EPS_CONFIG`` or ``~/.config/eps/config.toml``
and the environment) unless ``env`` replaces the environment.  A :class:`Job`'s values
are checked when it is made, and whether it can be planned by :func:`plan` and
:func:`execute` (once, in the service), with the messages the command line gives; a bad
one raises :class:`JobError` or :class:`ConfigError` (both ``ValueError``).  :func:`execute`,
:func:`wait`, :func:`status` and :func:`cancel` call the operations the CLI and the MCP server call
(:mod:`eps.shell.service.operations`) and return their documents: nothing runs the CLI or
redirects stdout.  ``execute(job, detach=True)`` returns as soon as the supervisor owns
the dispatch; ``wait(dispatch, timeout=50)`` waits at most ``timeout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from eps.core.contract import Exit
from eps.core.model import CapacitySnapshot, JobError, ParkState, QosGrants
from eps.shell.config.settings import ConfigError
from eps.shell.request.job import JobRequest
from eps.shell.request.keywords import Job, seconds
from eps.shell.service.errors import EXPECTED, NotTaken, failure
from eps.shell.service.planning import Planned

if TYPE_CHECKING:
    from eps.shell.service.operations import Service

__all__ = ["ConfigError", "Execution", "Job", "JobError", "Plan", "cancel", "execute", "execute_pipeline", "plan",
           "status", "wait"]

#: The exit codes :class:`Execution` carries, as plain ints (the contract's :class:`Exit`).
OK, NOTHING_STARTS, STILL_RUNNING = int(Exit.OK), int(Exit.NOTHING_STARTS), int(Exit.STILL_RUNNING)


class Plan(Planned):
    """A route plan and what this machine can run of it.  ``print(plan)`` shows the table of
    ``eps plan``; :meth:`to_dict` is ``eps plan --json``; ``.rungs`` (each with ``.runnable``
    and, when not, ``.down``: why, and the fix), ``.can_start``, ``.terminal``."""

    def __str__(self) -> str:
        import io

        from eps.shell.render.views import Out, print_plan

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
    from eps.shell.service.operations import Service

    return Plan(*Service(_env(job, env)).plan(JobRequest.of(job), snapshot=snapshot, grants=grants, park=park))


def _env(job: Job, env: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """The environment the settings are read from: ``env``, else the job's ``settings_env``."""
    return job.settings_env if env is None else env


class Execution(NamedTuple):
    """What :func:`execute` did: the exit code ``eps execute`` would leave with (with
    ``wait``: the job's own; 75 when ``timeout`` came first), the dispatch ids, every
    progress event so far (the ``events`` schema), the error's text, and the state."""

    exit_code: int
    dispatches: tuple[str, ...]
    events: tuple[dict[str, Any], ...]
    error: str | None = None
    state: str | None = None


def execute(
    job: Job,
    *,
    wait: bool = False,
    detach: bool = False,
    timeout: str | float | None = None,
    dispatch_id: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Execution:
    """Walk the plan for real, as ``eps execute`` does.  Under a supervisor (``[jobs]
    supervise = "detached"``, the default): ``detach`` returns as soon as it owns the
    dispatch; ``wait`` waits for the job's end (``exit_code`` is then the job's own), at
    most ``timeout`` (a duration; then exit code 75, still running: :func:`wait` again);
    neither: until something started.  A job without a command is refused."""
    from eps.shell.service.operations import Service

    svc = Service(_env(job, env))
    bound = None if timeout is None else seconds(timeout, "timeout")
    try:
        if svc.settings.jobs.supervise != "detached":
            if detach:
                raise JobError("usage", 'execute(detach=True) needs a supervisor ([jobs] supervise = "detached")')
            return _inline(svc, job, dispatch_id, wait=wait)
        answer = svc.execute(JobRequest.of(job), dispatch_id=dispatch_id)
        dispatch, state = answer["dispatch"], answer["state"]
    except EXPECTED as exc:
        said = failure(exc)
        if isinstance(exc, NotTaken):  # its id is in the dispatches, not in the line
            return Execution(int(said.exit_code), (exc.dispatch,), (), exc.said)
        return Execution(int(said.exit_code), (), (), said.text)
    if detach:
        return Execution(OK, (dispatch,), tuple(svc.events(dispatch)[0]), None, state)
    got = svc.wait_until(dispatch, bound, landed=not wait)
    events = tuple(svc.events(dispatch)[0])
    started = all(j["started"] for j in got["jobs"])
    if wait and not got["ended"]:
        return Execution(STILL_RUNNING, (dispatch,), events, None, got["state"])  # the timeout came first
    if wait:
        code = int(got["exit_code"])
        return Execution(code if started else max(code, NOTHING_STARTS), (dispatch,), events, None, got["state"])
    if any(j["state"] in ("waiting", "walking", "interrupted") for j in got["jobs"]):
        return Execution(STILL_RUNNING, (dispatch,), events, None, got["state"])  # waits for capacity, or the timeout
    return Execution(OK if started else NOTHING_STARTS, (dispatch,), events, None, got["state"])


def _inline(svc: Service, job: Job, dispatch_id: str | None, *, wait: bool) -> Execution:
    """``[jobs] supervise = "inline"``: the walk (and with ``wait`` the job's end) in this
    process, as ``eps execute`` does there; its events kept, not printed."""
    from eps.shell.service import inline as I
    from eps.shell.service import operations as S
    from eps.shell.service.waits import wait_until
    sink = S.Collect()
    with svc.opened(sink) as ctx:
        dispatch, results = I.run_here(ctx, JobRequest.of(job), dispatch_id, None, None)
        started = all(r.handle is not None for r in results)
        if not any(r.handle is not None for r in results):
            why = next((r.failure for r in results if r.failure), None)
            return Execution(NOTHING_STARTS, (dispatch,), tuple(sink.records), why, None)
        if not wait:
            return Execution(OK if started else NOTHING_STARTS, (dispatch,), tuple(sink.records), None, "started")
        got = wait_until(ctx, dispatch, None)
    code = int(got["exit_code"])
    return Execution(code if started else max(code, NOTHING_STARTS), (dispatch,), tuple(sink.records), None,
                     got["state"])  # fmt: skip


def execute_pipeline(
    pipeline: Mapping[str, Any] | str,
    *,
    wait: bool = False,
    timeout: str | float | None = None,
    dispatch_id: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Execution:
    """Run a pipeline as ``eps execute --job pipeline.toml`` does: ``pipeline`` is the file's
    path, or the same table as a document (``{"phases": [{"name": ..., "needs": [...],
    "intent": ..., "command": ...}, ...]}``).  Under a supervisor only.  At once, the
    dispatch; with ``wait``, until every phase ended (at most ``timeout``: then 75):
    ``exit_code`` 0, or 3 when a phase failed (``wait`` names it)."""
    from eps.shell.service.operations import Service

    svc = Service(env)
    bound = None if timeout is None else seconds(timeout, "timeout")
    try:
        from eps.shell.service.pipelines import execute_document

        with svc.opened() as ctx:
            answer = execute_document(ctx, pipeline, dispatch_id)
    except EXPECTED as exc:
        said = failure(exc)
        if isinstance(exc, NotTaken):
            return Execution(int(said.exit_code), (exc.dispatch,), (), exc.said)
        return Execution(int(said.exit_code), (), (), said.text)
    dispatch = answer["dispatch"]
    if not wait:
        return Execution(OK, (dispatch,), tuple(svc.events(dispatch)[0]), None, answer["state"])
    got = svc.wait_until(dispatch, bound)
    events = tuple(svc.events(dispatch)[0])
    if not got["ended"]:
        return Execution(STILL_RUNNING, (dispatch,), events, None, got["state"])
    return Execution(int(got["exit_code"]), (dispatch,), events, None, got["state"])


def wait(dispatch: str, *, timeout: str | float | None = 50, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Wait at most ``timeout`` (a duration; ``None``: until it ended) for a dispatch to end:
    the ``wait`` document (``eps schema wait``): ``ended``, ``state``, and once it ended the
    ``exit_code`` ``eps wait`` leaves with and each job's ``outputs``."""
    from eps.shell.service.operations import Service

    bound = None if timeout is None else seconds(timeout, "timeout")
    return Service(env).wait_until(dispatch, bound)


def status(
    dispatch: str | None = None,
    *,
    active: bool = False,
    since: str | int | None = None,
    intent: str | None = None,
    limit: int | None = 20,
    env: Mapping[str, str] | None = None,
    mine: bool = False,
    host: str | None = None,
) -> list[dict[str, Any]]:
    """The dispatches as ``eps status --json`` lists them (schema: ``eps schema status``):
    one, or the active ones and the newest ``limit`` (``None``: all), or those matching
    ``active`` / ``since`` (a duration: ``"2d"``) / ``intent``; on a team's ledger, ``mine``
    (this host's alone) or ``host`` (that host's alone)."""
    from eps.shell.service.operations import Service

    since_s = None if since is None else seconds(since, "since")
    rows: list[dict[str, Any]] = Service(env).status(dispatch, active=active, since_s=since_s, intent=intent,
                                                     limit=limit, mine=mine, host=host)["dispatches"]  # fmt: skip
    return rows


def cancel(dispatch: str | None = None, *, every: bool = False, force: bool = False,
           env: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Stop ``dispatch`` (or, ``every``, every live one) and release what it holds: the
    ``cancel`` document (``eps schema cancel``).  On a team's ledger a dispatch another user
    started is cancelled only with ``force`` (else :class:`JobError` ``not_yours``, nothing
    changed); the cancel is recorded as this user's (``cancelled_by``)."""
    from eps.shell.service.operations import Service

    return Service(env).cancel(dispatch, every=every, force=force)
