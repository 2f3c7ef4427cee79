"""A pipeline of phases (issue 36 item 2): its lint and its plan, before anything runs.

Pure, like :func:`eps.core.router.plan`, which plans every phase: a phase is planned exactly
as the same job alone (the same ``plan(job, snapshot, grants, None, policy=...)``, nothing
added), so a phase's route is the route ``eps plan`` gives that job by itself.

A :class:`Pipeline` is its :class:`Phase` records, each a name, the phase's :class:`Job`
(its intent, job options and command, ``Job.command``) and ``needs``, the phases it needs.
:func:`plan_pipeline` refuses, with one :class:`JobError` line each (a stable ``code``,
``field`` the record's path such as ``phases[1].needs``, ``plain`` the line), in this order:

- ``pipeline_empty``: no phase at all;
- ``bad_phase_name``: a name that is not a lowercase letter, then at most 31 lowercase letters,
  digits, ``-`` or ``_`` (a phase is addressed as ``D/phase``, and its outputs are handed on
  under ``$EPS_INPUT_DIR/<phase>/``);
- ``duplicate_phase``: two phases of one name;
- ``unknown_need``: a ``needs`` entry that names no phase of the pipeline (did you mean);
  ``bad_needs``: one phase named twice in the same ``needs``;
- ``pipeline_cycle``: the needs form a cycle (a phase that needs itself is one), named
  phase by phase in run order, each needing the one before it (``a -> b -> a``);
- each phase's own checks, as a single job's: whatever ``plan()`` refuses the phase's job
  with, its code kept and its line said as ``phase 'NAME': ...``;
- ``cpu_phase_holds_gpu`` (P1): a phase that says it is CPU work (``cpu = true``: the rule
  is that flag, never a guess from the phase's name) whose job plans as GPU work: a GPU
  intent, or a CPU intent sent to one by ``gradient_fit`` (P4).

The order: a phase's **wave** is 0 when it needs nothing, else one more than the latest wave
of what it needs.  The phases of one wave need nothing of each other (no path of needs joins
them) and may run at once; every phase comes after everything it needs.

The pipeline's **worst-case wait before a paid lane** (``worst_case_wait_s``): each phase's
own plan says how long it can wait in queues before its first paid (or local) rung starts
(``RoutePlan.worst_case_wait_s``: the park caps of the queue rungs ahead of it, P8; 0 for a
phase that starts on a paid lane or the shared VM, and for a pinned queue, which holds its
handle, P10).  A phase cannot start before what it needs has ended, so those waits add up
along a chain of needs, while phases of one wave wait side by side.  A phase's
``chain_wait_s`` is the most its own wait and its needs' chains add up to (its own wait plus
the largest ``chain_wait_s`` of what it needs); the pipeline's is the largest of them, and
the chain it is summed along is the **critical path** (it ends at the last phase, in the
pipeline's order, whose ``chain_wait_s`` is the pipeline's, and goes back through the first
of the needs whose chain is the largest, at each step).  Run times are not in it: it is the time a pipeline can
lose to queues before its phases reach paid lanes, on top of what its phases run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from eps.core.model import CapacitySnapshot, Job, JobError, Policy, QosGrants, Resource, RoutePlan
from eps.core.records import NamedTuple

__all__ = ["PHASE_NAME", "Phase", "PhasePlan", "Pipeline", "PipelinePlan", "plan_pipeline", "waves_of"]

#: A phase's name: a lowercase letter, then at most 31 lowercase letters, digits, ``-``, ``_``.
PHASE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")

#: ``plan(job, snapshot, grants, park, *, policy)``: :func:`eps.core.router.plan` unless given.
Planner = Callable[..., RoutePlan]


class Phase(NamedTuple):
    """One phase: its ``name``, its ``job`` (intent, job options and ``command``), the phases it
    ``needs`` (by name), and ``cpu``: it says it is CPU work, which may never hold a GPU (P1)."""

    name: str
    job: Job
    needs: tuple[str, ...] = ()
    cpu: bool = False


class Pipeline(NamedTuple):
    phases: tuple[Phase, ...]


class PhasePlan(NamedTuple):
    """A phase, its route (the same job's plan alone), its wave (0 first) and its ``chain_wait_s``."""

    phase: Phase
    plan: RoutePlan
    wave: int
    chain_wait_s: int


class PipelinePlan(NamedTuple):
    """Every phase's plan, in the pipeline's order (wave by wave; the file's order within a
    wave), the waves by name, the worst-case wait before a paid lane and its critical path."""

    phases: tuple[PhasePlan, ...]
    waves: tuple[tuple[str, ...], ...]
    worst_case_wait_s: int
    critical_path: tuple[str, ...]

    @property
    def terminal(self) -> tuple[str, ...]:
        """The phases whose plan leaves no rung (the pipeline cannot run to its end)."""
        return tuple(p.phase.name for p in self.phases if p.plan.terminal is not None)


def _refuse(code: str, line: str, field: str, job: Job | None = None) -> JobError:
    return JobError(code, line, job, field=field, plain=line)


def waves_of(pipeline: Pipeline) -> tuple[tuple[str, ...], ...]:
    """The pipeline's waves (names, the file's order within each), once its graph is sound:
    names, duplicates, needs and cycles checked (:class:`JobError` otherwise, the first found)."""
    phases = pipeline.phases
    if not phases:
        raise _refuse("pipeline_empty", "a pipeline needs at least one phase ([[phases]])", "phases")
    seen: dict[str, int] = {}
    for i, p in enumerate(phases):
        if PHASE_NAME.fullmatch(p.name) is None:
            raise _refuse("bad_phase_name", f"bad phase name {p.name!r}: a lowercase letter, then at most 31 "
                          "lowercase letters, digits, - or _", f"phases[{i}].name")  # fmt: skip
        if p.name in seen:
            raise _refuse("duplicate_phase", f"two phases are named {p.name!r} (phases {seen[p.name]} and {i})",
                          f"phases[{i}].name")  # fmt: skip
        seen[p.name] = i
    for i, p in enumerate(phases):
        for need in p.needs:
            if need not in seen:
                from eps.core.router import did_you_mean

                known = sorted(seen)
                close = did_you_mean(need, known)
                raise _refuse("unknown_need", f"phase {p.name!r} needs {need!r}, which is no phase of this pipeline"
                              f"{close} (phases: {', '.join(known)})", f"phases[{i}].needs")  # fmt: skip
        if len(set(p.needs)) != len(p.needs):
            twice = next(n for n in p.needs if p.needs.count(n) > 1)
            raise _refuse("bad_needs", f"phase {p.name!r} needs {twice!r} twice", f"phases[{i}].needs")
    wave: dict[str, int] = {}
    while len(wave) < len(phases):
        ready = {p.name: 1 + max((wave[n] for n in p.needs), default=-1)
                 for p in phases if p.name not in wave and all(n in wave for n in p.needs)}  # fmt: skip
        if not ready:
            raise _cycle(phases, wave)
        wave.update(ready)
    count = 1 + max(wave.values())
    return tuple(tuple(p.name for p in phases if wave[p.name] == w) for w in range(count))


def _cycle(phases: Sequence[Phase], done: dict[str, int]) -> JobError:
    """The refusal of a cycle among the phases not ``done``: each of them needs one of the
    others, so following the first such need from the first of them comes back round."""
    left = {p.name: p for p in phases if p.name not in done}
    index = {p.name: i for i, p in enumerate(phases)}
    path = [next(iter(left))]
    while True:
        nxt = next(n for n in left[path[-1]].needs if n in left)
        if nxt in path:
            ring = [nxt, *reversed(path[path.index(nxt) :])]  # in run order: each needs the one before it
            return _refuse("pipeline_cycle", f"the phases' needs form a cycle: {' -> '.join(ring)} (each needs the "
                           "one before it, so none of them can start)", f"phases[{index[ring[-1]]}].needs")  # fmt: skip
        path.append(nxt)


def plan_pipeline(
    pipeline: Pipeline,
    capacity_snapshot: CapacitySnapshot,
    qos_grants: QosGrants,
    *,
    policy: Policy | None = None,
    planner: Planner | None = None,
) -> PipelinePlan:
    """Lint ``pipeline`` and plan each phase as the same job alone (``planner``, by default
    :func:`eps.core.router.plan`, with ``capacity_snapshot``, ``qos_grants``, no park and
    ``policy``); the waves, each phase's ``chain_wait_s``, the pipeline's worst-case wait
    before a paid lane and its critical path (the module's docstring defines them).

    Raises :class:`JobError` (one line, the first refusal in the module's order)."""
    from eps.core.tables import DEFAULT_POLICY

    if planner is None:
        from eps.core.router import plan

        planner = plan
    pol = DEFAULT_POLICY if policy is None else policy
    waves = waves_of(pipeline)
    plans: dict[str, RoutePlan] = {}
    for i, p in enumerate(pipeline.phases):
        try:
            route = planner(p.job, capacity_snapshot, qos_grants, None, policy=pol)
        except JobError as exc:
            field = f"phases[{i}]" if exc.field is None else f"phases[{i}].{exc.field}"
            line = f"phase {p.name!r}: {exc.plain}"
            raise JobError(exc.code, line, exc.job, field=field, plain=line) from None
        if p.cpu and route.resource is Resource.GPU:
            how = p.job.intent
            if route.resolved_intent != how:
                how = f"{how} -> {route.resolved_intent}"
            why = "; gradient_fit sends it to a GPU intent, P4" if p.job.gradient_fit and how != p.job.intent else ""
            raise _refuse("cpu_phase_holds_gpu", f"phase {p.name!r} says cpu = true but its job plans as GPU work "
                          f"({how}{why}): CPU work never holds a GPU (P1); give it a CPU intent",
                          f"phases[{i}].cpu", p.job)  # fmt: skip
        plans[p.name] = route
    by_name = {p.name: p for p in pipeline.phases}
    chain: dict[str, int] = {}
    out: list[PhasePlan] = []
    for w, names in enumerate(waves):
        for name in names:
            p = by_name[name]
            chain[name] = plans[name].worst_case_wait_s + max((chain[n] for n in p.needs), default=0)
            out.append(PhasePlan(p, plans[name], w, chain[name]))
    worst = max(chain.values())
    order = [pp.phase.name for pp in out]
    path = [next(n for n in reversed(order) if chain[n] == worst)]
    while by_name[path[-1]].needs:
        needs = by_name[path[-1]].needs
        top = max(chain[n] for n in needs)
        path.append(next(n for n in order if n in needs and chain[n] == top))
    return PipelinePlan(tuple(out), waves, worst, tuple(reversed(path)))
