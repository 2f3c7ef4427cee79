"""How a pipeline's plan looks (``eps plan --job pipeline.toml``): each phase's route in the
single job's rendering (:func:`eps.shell.render.views.print_plan`, :func:`~eps.shell.render.documents.plan_dict`),
then the waves, the worst-case wait before a paid lane and its critical path
(:mod:`eps.core.pipeline` defines them).  Its JSON Schema is ``eps/schemas/pipeline.json``."""

from __future__ import annotations

from collections.abc import Sequence

from eps.core.contract import SCHEMA_VERSION
from eps.core.durations import human
from eps.core.model import LaneDown
from eps.core.pipeline import PipelinePlan
from eps.core.tables import Healing
from eps.core.usable import can_start
from eps.shell.render.documents import plan_dict
from eps.shell.render.views import Out, print_plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["pipeline_dict", "print_pipeline", "worst_case_line"]

Downs = Sequence[Sequence[LaneDown]]


def pipeline_dict(file: str, plan: PipelinePlan, downs: Downs, healing: Healing) -> dict[str, Any]:
    """``eps plan --job pipeline.toml --json``: ``downs[i]`` are phase i's unusable lanes here."""
    phases = []
    for pp, down in zip(plan.phases, downs, strict=True):
        phases.append({
            "name": pp.phase.name,
            "needs": list(pp.phase.needs),
            "cpu": pp.phase.cpu,
            "wave": pp.wave + 1,
            "chain_wait_s": pp.chain_wait_s,
            "plan": plan_dict(pp.plan, pp.phase.job, down, healing),
        })  # fmt: skip
    return {
        "schema_version": SCHEMA_VERSION,
        "file": file,
        "phases": phases,
        "waves": [list(w) for w in plan.waves],
        "worst_case_wait_s": plan.worst_case_wait_s,
        "critical_path": list(plan.critical_path),
        "terminal": list(plan.terminal),
        "can_start": all(can_start(pp.plan, d) for pp, d in zip(plan.phases, downs, strict=True)),
    }


def worst_case_line(plan: PipelinePlan) -> str:
    """The pipeline's worst-case wait before a paid lane, with its sum along the critical path."""
    by = {pp.phase.name: pp.plan.worst_case_wait_s for pp in plan.phases}
    path = plan.critical_path
    terms = " + ".join(f"{by[n]} s" for n in path)
    total = f"{plan.worst_case_wait_s} s ({human(plan.worst_case_wait_s)})"
    along = f"{' -> '.join(path)}: {terms} = {total}" if len(path) > 1 else f"{path[0]}: {total}"
    return f"pipeline worst-case wait before a paid lane, along {along} (queue waits only, not the phases' run times)"


def print_pipeline(file: str, plan: PipelinePlan, downs: Downs, healing: Healing, out: Out) -> None:
    n, w = len(plan.phases), len(plan.waves)
    out.line(f"pipeline {file}: {n} phase{'s' if n != 1 else ''} in {w} wave{'s' if w != 1 else ''} "
             "(a wave's phases need nothing of each other and may run at once)")  # fmt: skip
    for i, names in enumerate(plan.waves, 1):
        out.line(f"  wave {i}: {', '.join(names)}")
    for pp, down in zip(plan.phases, downs, strict=True):
        needs = f"needs {', '.join(pp.phase.needs)}" if pp.phase.needs else "needs nothing"
        out.line()
        out.line(f"phase {pp.phase.name} (wave {pp.wave + 1}, {needs}{', cpu' if pp.phase.cpu else ''}):")
        print_plan(pp.plan, pp.phase.job, out, down, healing)
    out.line()
    out.line(worst_case_line(plan))
    if plan.terminal:
        out.line(f"no rung left for: {', '.join(plan.terminal)} (see each phase's terminal): the pipeline cannot "
                 "run to its end")  # fmt: skip
