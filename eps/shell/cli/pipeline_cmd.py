"""``eps plan --job pipeline.toml``: a pipeline file's plan, as text or ``--json``; and
``eps execute --job pipeline.toml``: the pipeline handed to the supervisor as one dispatch.

A pipeline's phases each give their own job options in the file, so the command line gives
none (a flag would not say which phase it is for): only ``--snapshot``, ``--grants``,
``--json`` and ``--wide``; anything else is one line, exit 2."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence

from eps.core.model import JobError
from eps.shell.cli.exits import Exit
from eps.shell.config.settings import Settings
from eps.shell.request.job import FLAGS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from types import SimpleNamespace

    from eps.shell.request.job import JobRequest
    from eps.shell.request.pipeline import PipelineRequest
    from eps.shell.service.context import Ctx

__all__ = ["after_dispatch", "check_execute", "cmd_plan_pipeline", "handed_over", "pipeline_dispatch"]

#: The command line's job options besides :data:`FLAGS` (each phase gives its own in the file).
_JOB_OPTIONS = ("workdir", "setup", "env", "time_limit", "storage", "input", "notify", "park", "park_reason")


def cmd_plan_pipeline(ns: argparse.Namespace | SimpleNamespace, settings: Settings, env: Mapping[str, str],
                      request: PipelineRequest) -> int:  # fmt: skip
    """Print the pipeline's plan; exit 1 when a phase's plan is terminal, else 0."""
    _no_job_options(ns, "plan", request.file)
    from eps.shell.service.pipelines import plan_pipeline
    from eps.shell.service.planning import given as files

    snap, grants = files(ns.snapshot, ns.grants)
    result = plan_pipeline(settings, env, request, snap, grants if ns.grants else None)
    if ns.json:
        from eps.shell.util.jsontext import dumps

        sys.stdout.write(dumps(result.to_dict()) + "\n")  # it carries its schema_version
    else:
        from eps.shell.render.pipeline import print_pipeline
        from eps.shell.render.views import out_for

        downs = tuple(p.down for p in result.phases)
        print_pipeline(request.file, result.plan, downs, result.phases[0].healing,
                       out_for(sys.stdout, env, wide=ns.wide))  # fmt: skip
    return Exit.NOTHING_STARTS if result.plan.terminal else Exit.OK


def _no_job_options(ns: argparse.Namespace | SimpleNamespace, cmd: str, file: str) -> None:
    given = [name for name in (*FLAGS, *_JOB_OPTIONS) if getattr(ns, name, None) not in (None, [], ())]
    if given:
        flag = "an intent" if given[0] == "intent" else "--" + given[0].replace("_", "-")
        raise JobError("usage", f"eps {cmd} --job {file}: a pipeline's phases give their own job options "
                       f"in the file; {flag} cannot say which phase it is for")  # fmt: skip


def check_execute(ns: argparse.Namespace, command: Sequence[str], settings: Settings, env: Mapping[str, str]) -> None:
    """``eps execute --job FILE`` of a pipeline, checked before anything is opened or recorded:
    no command after ``--`` and no job option on the command line, a supervisor to run it, and
    the pipeline's lint and plan (each phase's own refusals).  A one-job FILE passes."""
    from eps.shell.request.pipeline import pipeline_file
    from eps.shell.service.pipelines import plan_pipeline
    from eps.shell.service.planning import given as files

    request = pipeline_file(ns.job)
    if request is None:
        return
    if command:
        raise JobError("usage", f"eps execute --job {request.file}: each phase gives its own command in the file; "
                       "none goes after --")  # fmt: skip
    _no_job_options(ns, "execute", request.file)
    if settings.jobs.supervise != "detached":
        raise JobError("usage", f"eps execute --job {request.file}: a pipeline runs under a supervisor "
                       '([jobs] supervise = "detached"); this config walks dispatches inline')  # fmt: skip
    snap, grants = files(getattr(ns, "snapshot", None), getattr(ns, "grants", None))
    plan_pipeline(settings, env, request, snap, grants if getattr(ns, "grants", None) else None)


def pipeline_dispatch(ns: argparse.Namespace, ctx: Ctx, command: Sequence[str]) -> str | None:
    """``eps execute --job FILE`` when FILE is a pipeline (:func:`check_execute` passed):
    recorded and handed to the supervisor; its dispatch id.  ``None``: FILE is one job."""
    from eps.shell.request.pipeline import pipeline_file
    from eps.shell.service import operations
    from eps.shell.service.pipelines import submit

    request = pipeline_file(ns.job)
    if request is None:
        return None
    snapshot, grants = operations.given(getattr(ns, "snapshot", None), getattr(ns, "grants", None))
    return submit(ctx, request, ns.dispatch_id or None, snapshot if ns.snapshot else None,
                  grants if ns.grants else None)  # fmt: skip


def handed_over(ctx: Ctx, dispatch: str, *, as_json: bool) -> int:
    """``eps execute --job pipeline.toml`` without ``--wait``: the pipeline is its supervisor's
    now; say so (its phases, how to follow it) and leave."""
    from eps.shell.service import operations
    from eps.shell.service.phase_address import phases_of

    phases = phases_of(ctx, dispatch)
    if as_json:
        from eps.shell.util.jsontext import dumps

        answer = operations.execute_doc(ctx, dispatch)
        answer["phases"] = [{"phase": p.name, "dispatch": p.id, "needs": list(p.needs)} for p in phases]
        sys.stdout.write(dumps(answer) + "\n")
        return Exit.OK
    sys.stdout.write(f"{dispatch} pipeline: {', '.join(f'{dispatch}/{p.name} ({p.id})' for p in phases)}\n")
    sys.stderr.write(f"eps: {dispatch} runs under its supervisor: eps status {dispatch}; eps wait {dispatch}; "
                     f"eps cancel {dispatch}\n")  # fmt: skip
    return Exit.OK


def after_dispatch(ns: argparse.Namespace, ctx: Ctx, command: Sequence[str],
                   request_of: Callable[[argparse.Namespace, Sequence[str]], JobRequest]) -> str:  # fmt: skip
    """``eps execute ... --after D``: the job recorded to start once D has succeeded; its id."""
    from eps.shell.service import operations
    from eps.shell.service.phase_address import resolve
    from eps.shell.service.pipelines import submit_after

    request = request_of(ns, command)
    snapshot, grants = operations.given(getattr(ns, "snapshot", None), getattr(ns, "grants", None))
    return submit_after(ctx, request, resolve(ctx, ns.after), ns.dispatch_id or None,
                        snapshot if ns.snapshot else None, grants if ns.grants else None)  # fmt: skip
