"""``eps plan --job pipeline.toml``: a pipeline's plan (:func:`plan_pipeline`), every phase
planned here exactly as ``eps plan`` plans the same job alone (:mod:`eps.shell.service.planning`:
the intent's default duration, its ``inputs`` checked, the boot loops and cluster faults this
machine remembers, the config's grants, each lane marked usable here or not), by the core's
:func:`eps.core.pipeline.plan_pipeline`.  Nothing is created or called.

``eps execute --job pipeline.toml`` (:func:`submit`; docs/design/pipelines.md): every
phase checked as ``eps execute`` checks one job (nothing recorded when one is refused), then
ONE dispatch recorded, a child row per phase, and handed to the state directory's supervisor,
which runs the phases (:mod:`eps.shell.run.pipelines`).  It needs a supervisor: with
``[jobs] supervise = "inline"`` it is refused in one line (:func:`refuse_execute`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from eps.core.model import CapacitySnapshot, JobError, QosGrants
from eps.core.pipeline import Phase, Pipeline, PipelinePlan
from eps.core.records import NamedTuple
from eps.shell.service.planning import Planned

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from eps.shell.config.settings import Settings
    from eps.shell.lanes.jobs import JobFiles
    from eps.shell.request.job import JobRequest
    from eps.shell.request.pipeline import PipelineRequest
    from eps.shell.service.context import Ctx
    from eps.shell.state.ledger import DispatchRow

__all__ = ["PlannedPipeline", "execute_document", "exit_of", "plan_pipeline", "refuse_execute", "refuse_unshared",
           "submit", "submit_after"]


class PlannedPipeline(NamedTuple):
    """A pipeline's plan (``plan``: waves, worst case, critical path) and each phase's
    :class:`Planned` (``phases``, in the plan's order); :meth:`to_dict` is ``eps plan --json``'s."""

    file: str
    plan: PipelinePlan
    phases: tuple[Planned, ...]

    @property
    def can_start(self) -> bool:
        """Whether every phase has a rung this machine can run now."""
        return all(p.can_start for p in self.phases)

    def to_dict(self) -> dict[str, Any]:
        from eps.shell.render.pipeline import pipeline_dict

        return pipeline_dict(self.file, self.plan, tuple(p.down for p in self.phases), self.phases[0].healing)


def plan_pipeline(
    settings: Settings,
    env: Mapping[str, str],
    request: PipelineRequest,
    snapshot: CapacitySnapshot | None = None,
    grants: QosGrants | None = None,
) -> PlannedPipeline:
    """The plan of ``request`` (``grants`` ``None``: the config's); a refusal is one line naming
    the file and the path of the value (:meth:`PipelineRequest.named`)."""
    from eps.core.pipeline import plan_pipeline as core_plan
    from eps.core.router import with_intent_duration
    from eps.shell.service.planning import planned, with_inputs, world

    phases = []
    try:
        for i, p in enumerate(request.phases):
            try:
                job = with_inputs(p.request.job, p.request.shipping.inputs)
            except JobError as exc:
                line = f"phase {p.name!r}: {exc.plain}"
                raise JobError(exc.code, line, exc.job, field=f"phases[{i}].inputs", plain=line) from None
            phases.append(Phase(p.name, with_intent_duration(job, settings.policy), p.needs, p.cpu))
        snap, granted = world(settings, snapshot, grants)
        got = core_plan(Pipeline(tuple(phases)), snap, granted, policy=settings.policy)
    except JobError as exc:
        raise request.named(exc) from None
    return PlannedPipeline(request.file, got, tuple(planned(settings, env, snap, pp.plan, pp.phase.job)
                                                   for pp in got.phases))  # fmt: skip


def refuse_execute(ctx: Ctx) -> None:
    """A pipeline runs under a supervisor: refused inline (one line, exit 2, nothing recorded)."""
    if ctx.settings.jobs.supervise != "detached":
        raise JobError("usage", 'a pipeline ([[phases]]) runs under a supervisor ([jobs] supervise = "detached"); '
                       "this config walks dispatches inline", None)  # fmt: skip


def refuse_unshared(ctx: Ctx, what: str, stored: bool) -> None:
    """On a ledger hosts share, a phase's inputs come from storage (``stored``: they do): a
    host that takes the pipeline over has none of the executing host's files (one line,
    exit 2, nothing recorded)."""
    if ctx.ledger.shared and not stored:
        raise JobError("usage", f"{what}: on a team's ledger ([state] url) a phase's inputs are handed on through "
                       "storage (another host may take it over), so it and what it needs must have [storage]",
                       None)  # fmt: skip


def submit(ctx: Ctx, request: PipelineRequest, dispatch_id: str | None, snapshot: CapacitySnapshot | None,
           grants: QosGrants | None) -> str:  # fmt: skip
    """``eps execute --job pipeline.toml`` for every door: the pipeline linted and planned,
    each phase prepared as one job's execute prepares it (every input error first, nothing
    recorded), then the pipeline's record, its dispatch and a child row per phase, handed
    over to the supervisor; the dispatch's id."""
    from eps.core.model import evolve
    from eps.core.names import copy_id
    from eps.core.tables import DEFAULT_GRANTS
    from eps.shell.lanes.jobs import write_env_values
    from eps.shell.run import ownership
    from eps.shell.run import pipelines as run
    from eps.shell.service import operations as ops

    refuse_execute(ctx)
    ops.unused(ctx, dispatch_id)
    plan_pipeline(ctx.settings, ctx.lanes.env, request, snapshot, grants)  # the pipeline's own refusals first
    snap, granted = snapshot or CapacitySnapshot(), grants or DEFAULT_GRANTS
    ready = []
    for i, p in enumerate(request.phases):
        try:
            ready.append(ops.prepare(ctx, p.request, None, snap, granted))
        except JobError as exc:
            line = f"{request.file}: phase {p.name!r}: {exc.plain}"
            raise JobError(exc.code, line, exc.job, field=f"phases[{i}]", plain=line) from None
    dispatch = dispatch_id or ops.new_dispatch_id()
    if dispatch_id is not None:
        from eps.core.names import BadName, check_dispatch_id

        try:
            check_dispatch_id(dispatch_id, user_given=True)
        except BadName as exc:
            raise JobError("bad_dispatch_id", str(exc), None) from None
    state_dir = ctx.settings.state_dir
    ids = {p.name: copy_id(dispatch, i + 1) for i, p in enumerate(request.phases)}
    jobs = []
    own = {p.name: got.job for p, got in zip(request.phases, ready, strict=True)}
    for p in request.phases:
        stored = bool(own[p.name].storage) and all(own[n].storage for n in p.needs)
        refuse_unshared(ctx, f"{request.file}: phase {p.name!r}", stored or not p.needs)
    for p, got in zip(request.phases, ready, strict=True):
        job = got.job
        if p.needs and job.storage and all(own[n].storage for n in p.needs):  # its machine copies them from storage
            from eps.core.jobscript import INPUTS_DIR
            from eps.core.lifecycle import storage_plan

            places = [storage_plan(own[n], ids[n]) for n in p.needs]
            urls = [f"{sp.place.outputs_url}:{INPUTS_DIR}/{n}" for n, sp in zip(p.needs, places, strict=True)
                    if sp is not None and sp.place is not None]  # fmt: skip
            job = evolve(job, inputs=(*job.inputs, *urls))
        elif p.needs:  # shipped from a staged workdir: its own files, then its inputs (at its start)
            staged = run.stage_dir(state_dir, dispatch, p.name)
            _copy_files(got.files, staged)
            job = evolve(job, workdir=staged)
        jobs.append(job)
    ownership.write_inputs(state_dir, dispatch, snapshot, grants, ctx.lanes.env)
    for p, got in zip(request.phases, ready, strict=True):
        write_env_values(state_dir, ids[p.name], got.values)
    children = [(ids[p.name], job) for p, job in zip(request.phases, jobs, strict=True)]
    ctx.ledger.new_pipeline(dispatch, jobs[0], children, [run.PhaseRecord(p.name, ids[p.name], p.needs)
                                                          for p in request.phases])  # fmt: skip
    ownership.share_inputs(ctx.ledger, dispatch, ctx.settings)
    ops.take_over(ctx, dispatch)
    return dispatch


def _copy_files(files: JobFiles, to: str) -> None:
    """The phase's own workdir files (as its job would ship them) copied to ``to``."""
    import os
    import shutil

    os.makedirs(to, mode=0o700, exist_ok=True)
    workdir = files.workdir
    if workdir is None:
        return
    for rel in workdir.files:
        dst = os.path.join(to, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(workdir.root, rel), dst, follow_symlinks=False)


def exit_of(ctx: Ctx, rows: Sequence[DispatchRow], say: Callable[[str], object]) -> int | None:
    """``eps wait`` of a pipeline's phases (``rows``): 0, or ``PHASE_FAILED`` naming each phase
    that failed and each it ended dependency_failed through ``say``; ``None``: no pipeline."""
    from eps.shell.run.pipelines import exit_of as of

    return of(ctx.ledger, rows, say)


#: The phase of ``eps execute ... --after D``: the job itself (addressed as ``E/job``).
AFTER_PHASE = "job"


def submit_after(ctx: Ctx, request: JobRequest, after: str, dispatch_id: str | None,
                 snapshot: CapacitySnapshot | None, grants: QosGrants | None) -> str:  # fmt: skip
    """``eps execute ... --after D``: the job checked as any execute checks it (nothing
    recorded when it is refused), then recorded as a one-phase pipeline E that needs D: its
    phase ``E/job`` starts once D has succeeded, with D's outputs in ``$EPS_INPUT_DIR/D/``,
    and ends ``dependency_failed`` (nothing created) if D did not succeed.  D a fan-out or
    sweep: it succeeded when every task did, task i's outputs in ``$EPS_INPUT_DIR/D/<i>/``; D a
    pipeline: when every phase did, each final phase's (none needs it) outputs in
    ``$EPS_INPUT_DIR/D/<phase>/``."""
    from eps.core.model import evolve
    from eps.core.names import copy_id
    from eps.core.tables import DEFAULT_GRANTS
    from eps.shell.lanes.jobs import write_env_values
    from eps.shell.run import ownership
    from eps.shell.run import pipelines as run
    from eps.shell.service import operations as ops

    refuse_execute(ctx)
    row = ops.known(ctx, after)
    if row.parent is not None:
        raise JobError("usage", f"--after {after}: it is a row of a fan-out, sweep or pipeline; --after takes a "
                       "dispatch: one job, a fan-out, a sweep or a pipeline", None)  # fmt: skip
    if request.job.count > 1 or request.job.sweep > 1:
        raise JobError("usage", "--after with --count or --sweep is not built yet: --after takes one job", None)
    ops.unused(ctx, dispatch_id)
    ready = ops.prepare(ctx, request, dispatch_id, snapshot or CapacitySnapshot(), grants or DEFAULT_GRANTS)
    dispatch = dispatch_id or ops.new_dispatch_id()
    state_dir = ctx.settings.state_dir
    child = copy_id(dispatch, 1)
    urls = _stored_outputs(ctx, row, after) if ready.job.storage and ctx.ledger.shared else None
    refuse_unshared(ctx, f"--after {after}", urls is not None)
    if urls is not None:  # its machine copies D's outputs from storage (a team: nothing on this host)
        job = evolve(ready.job, inputs=(*ready.job.inputs, *urls))
    else:
        staged = run.stage_dir(state_dir, dispatch, AFTER_PHASE)
        _copy_files(ready.files, staged)
        job = evolve(ready.job, workdir=staged)
    ownership.write_inputs(state_dir, dispatch, snapshot, grants, ctx.lanes.env)
    write_env_values(state_dir, child, ready.values)
    ctx.ledger.new_pipeline(dispatch, job, [(child, job)], [run.PhaseRecord(after, after, (), after=True),
                                                            run.PhaseRecord(AFTER_PHASE, child, (after,))])  # fmt: skip
    ownership.share_inputs(ctx.ledger, dispatch, ctx.settings)
    ops.take_over(ctx, dispatch)
    return dispatch


def _stored_outputs(ctx: Ctx, row: DispatchRow, after: str) -> list[str] | None:
    """The ``inputs`` entries that put dispatch ``row``'s outputs (each task's, for a fan-out
    or sweep) under ``$EPS_INPUT_DIR/<after>/`` (``/<i>/``) from storage; ``None`` when they
    are not all in storage."""
    from eps.core.jobscript import INPUTS_DIR
    from eps.core.lifecycle import storage_plan
    from eps.shell.run.pipelines import after_sources

    urls = []
    for dest, of in after_sources(ctx.ledger, row.id, after):
        r = row if of == row.id else ctx.ledger.dispatch(of)
        sp = storage_plan(r.job, r.id) if r is not None and r.job.storage else None
        if sp is None or sp.place is None:
            return None
        urls.append(f"{sp.place.outputs_url}:{INPUTS_DIR}/{dest}")
    return urls


def execute_document(ctx: Ctx, document: Mapping[str, Any] | str, dispatch_id: str | None = None) -> dict[str, Any]:
    """A pipeline (a file of ``[[phases]]``, or the same table as a document: ``{"phases":
    [...]}``) recorded and handed over as :func:`submit` does; at once, the dispatch and its state."""
    from eps.shell.request.pipeline import PipelineRequest
    from eps.shell.service.operations import execute_doc

    if isinstance(document, str):
        request = PipelineRequest.from_file(document)
    else:
        request = PipelineRequest.from_data("pipeline", dict(document))
    return execute_doc(ctx, submit(ctx, request, dispatch_id, None, None))
