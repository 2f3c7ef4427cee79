"""``eps plan --job pipeline.toml``: a pipeline's plan (:func:`plan_pipeline`), every phase
planned here exactly as ``eps plan`` plans the same job alone (:mod:`eps.shell.service.planning`:
the intent's default duration, its ``inputs`` checked, the boot loops and cluster faults this
machine remembers, the config's grants, each lane marked usable here or not), by the core's
:func:`eps.core.pipeline.plan_pipeline`.  Nothing is created or called.

Executing a pipeline is not built yet: ``eps execute --job pipeline.toml`` is refused in one
line (:func:`refuse_execute`, code ``pipeline_not_yet``) before anything is opened or recorded.
"""

from __future__ import annotations

from collections.abc import Mapping

from eps.core.model import CapacitySnapshot, JobError, QosGrants
from eps.core.pipeline import Phase, Pipeline, PipelinePlan
from eps.core.records import NamedTuple
from eps.shell.service.planning import Planned

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from eps.shell.config.settings import Settings
    from eps.shell.request.pipeline import PipelineRequest

__all__ = ["PlannedPipeline", "plan_pipeline", "refuse_execute"]


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


def refuse_execute(path: str) -> None:
    """Refuse ``eps execute --job PATH`` when PATH is a pipeline file (one line, exit 2); a
    one-job file passes (read again by the request)."""
    from eps.shell.config.convert import read_data
    from eps.shell.request.pipeline import holds_phases

    if holds_phases(read_data(path)):
        raise JobError("pipeline_not_yet", f"{path}: a pipeline ([[phases]]) is planned, not yet executed: "
                       f"`eps plan --job {path}` shows each phase's route; for now execute each phase as a job "
                       "of its own, in the order of its waves")  # fmt: skip
