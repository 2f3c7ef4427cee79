"""Running a pipeline (issue 36 item 2; docs/design/pipelines.md): which phases start now.

Pure.  The shell reads each phase's row from the ledger, asks :func:`phase_state` what
state that is (:class:`PhaseState`; a dispatch ``--after`` waits for, of many tasks: their
states :func:`together`), and asks :func:`schedule` what to do; it never decides itself.
The rules:

- a phase **starts** (``ready``) when it has not started and everything it ``needs`` has
  succeeded; phases ready together start at once (they need nothing of each other);
- a phase that has not started and needs a phase that failed, or that is itself ended
  ``dependency_failed``, is ended ``dependency_failed`` (``doomed``), transitively in one
  answer (a chain a -> b -> c whose a failed dooms b and c at once), and nothing is ever
  created for it;
- a phase that has not started and waits on a phase still running (or itself waiting) is
  ``blocked``;
- the pipeline is ``over`` when, once the doomed are ended, no phase is waiting or running;
  it ``succeeded`` when every phase did, and ``failed`` names the phases that failed of
  their own (not the ``dependency_failed`` ones), in the pipeline's order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from eps.core.pipeline import Pipeline
from eps.core.records import NamedTuple
from eps.core.states import DispatchState

__all__ = ["DEPENDENCY_FAILED", "PhaseState", "Schedule", "phase_state", "schedule", "together"]

#: The code a phase is ended with when a phase it needs (directly or not) failed.
DEPENDENCY_FAILED = "dependency_failed"


class PhaseState(StrEnum):
    WAITING = "waiting"  # not started: nothing created for it yet
    RUNNING = "running"  # started (walking, parked, running, being pulled): not ended
    SUCCEEDED = "succeeded"  # ended with exit code 0
    FAILED = "failed"  # ended otherwise (its job failed, no lane took it, cancelled)
    DEPENDENCY_FAILED = "dependency_failed"  # ended without starting: a phase it needs failed


#: The states of a phase that has ended.
ENDED = frozenset({PhaseState.SUCCEEDED, PhaseState.FAILED, PhaseState.DEPENDENCY_FAILED})


class Schedule(NamedTuple):
    """What to do now: start ``ready``, end ``doomed`` ``dependency_failed`` (each with the
    need that failed, ``because``), leave ``blocked`` waiting.  Names in the pipeline's order."""

    ready: tuple[str, ...]
    doomed: tuple[str, ...]
    blocked: tuple[str, ...]
    because: Mapping[str, str]  # doomed phase -> the failed (or doomed) need it waited on
    over: bool
    failed: tuple[str, ...]  # the phases that failed of their own (not dependency_failed)
    dependency_failed: tuple[str, ...]  # every phase ended, or to be ended now, dependency_failed

    @property
    def succeeded(self) -> bool:
        """Every phase succeeded."""
        return self.over and not self.failed and not self.dependency_failed


def phase_state(
    state: DispatchState | None, *, result: str = "", back: bool = False, message: str | None = None,
    handle: bool = False, started: bool = False,
) -> PhaseState:  # fmt: skip
    """A phase's state, from its row: its dispatch ``state`` (``None``: no row yet), its
    ``result`` word (:func:`eps.core.ends.result_word`), whether its outputs came back
    (``back``: here, or in storage: what a phase that needs it is given), its row's
    ``message``, whether it has a ``handle``, and whether it was ``started`` (this
    supervisor started it, or it has an attempt).  A phase ended ``succeeded`` succeeded
    only once its outputs are back; one never started, with nothing said of it, waits."""
    if state is None:
        return PhaseState.WAITING
    if state is DispatchState.ENDED:
        return PhaseState.SUCCEEDED if result == "succeeded" and back else PhaseState.FAILED
    if state is DispatchState.FAILED and (message or "").startswith(DEPENDENCY_FAILED):
        return PhaseState.DEPENDENCY_FAILED
    if state in (DispatchState.FAILED, DispatchState.CANCELLED):
        return PhaseState.FAILED
    if state is DispatchState.WALKING and not started and not handle and not message:
        return PhaseState.WAITING
    return PhaseState.RUNNING


def together(states: Iterable[PhaseState]) -> PhaseState:
    """The state of a dispatch of many tasks (a fan-out, sweep or pipeline that ``--after``
    waits for), from its tasks' (phases'): succeeded once every one succeeded, failed as soon
    as one did not (failed, or dependency_failed), running otherwise."""
    states = list(states)
    if all(s is PhaseState.SUCCEEDED for s in states):
        return PhaseState.SUCCEEDED
    if any(s in (PhaseState.FAILED, PhaseState.DEPENDENCY_FAILED) for s in states):
        return PhaseState.FAILED
    return PhaseState.RUNNING


def schedule(pipeline: Pipeline, states: Mapping[str, PhaseState]) -> Schedule:
    """What to do with ``pipeline`` given each phase's state (a phase not in ``states`` is
    waiting).  The pipeline is sound (:func:`eps.core.pipeline.waves_of` passed)."""
    now = {p.name: states.get(p.name, PhaseState.WAITING) for p in pipeline.phases}
    because: dict[str, str] = {}
    changed = True
    while changed:  # doom transitively: a need failed, or was doomed in an earlier round
        changed = False
        for p in pipeline.phases:
            if now[p.name] is not PhaseState.WAITING:
                continue
            bad = next((n for n in p.needs if now[n] in (PhaseState.FAILED, PhaseState.DEPENDENCY_FAILED)), None)
            if bad is not None:
                now[p.name] = PhaseState.DEPENDENCY_FAILED
                because[p.name] = bad
                changed = True
    order = [p.name for p in pipeline.phases]
    doomed = tuple(n for n in order if n in because)
    waiting = [p for p in pipeline.phases if now[p.name] is PhaseState.WAITING]
    ready = tuple(p.name for p in waiting if all(now[n] is PhaseState.SUCCEEDED for n in p.needs))
    blocked = tuple(n for n in order if now[n] is PhaseState.WAITING and n not in ready)
    over = all(now[n] in ENDED for n in order)
    failed = tuple(n for n in order if now[n] is PhaseState.FAILED)
    dep = tuple(n for n in order if now[n] is PhaseState.DEPENDENCY_FAILED)
    return Schedule(ready, doomed, blocked, because, over, failed, dep)
