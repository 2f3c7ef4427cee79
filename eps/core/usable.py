"""Plan equals execute: which rungs of a plan this machine can run now, and what a plan
with nothing left says.

Pure.  Whether a lane can be used here (configured, credentials found, answering) is
gathered by the shell (``eps.shell.config.availability``) and comes in as data, a
:class:`~eps.core.model.LaneDown` per unusable lane.  ``eps plan`` shows every rung the
policy offers and marks those whose lane is down here with the reason; ``eps execute``
puts the same facts into the snapshot (``unavailable``), so ``plan()`` skips those lanes
(``lane_unavailable``) and, when no lane is left that could even try,
ends with ``no_usable_lane`` instead of claiming exhaustion.
"""

from collections.abc import Iterable

from eps.core.model import LaneDown, RoutePlan, Rung, SkipCode, Terminal
from eps.core.records import NamedTuple


class RungStatus(NamedTuple):
    """A rung of a plan and whether this machine can run it now (``down``: why not)."""

    rung: Rung
    down: LaneDown | None = None

    @property
    def runnable(self) -> bool:
        return self.down is None


def mark(plan: RoutePlan, down: Iterable[LaneDown]) -> tuple[RungStatus, ...]:
    """Every rung of ``plan`` with the reason its lane cannot be used here, if any."""
    by_lane = {d.lane: d for d in down}
    return tuple(RungStatus(r, by_lane.get(r.lane)) for r in plan.rungs)


def can_start(plan: RoutePlan, down: Iterable[LaneDown]) -> bool:
    """Whether ``eps execute`` of this plan could start anything here: a rung is left and
    at least one rung's lane is usable."""
    return plan.terminal is None and any(s.runnable for s in mark(plan, down))


def unusable_lanes(plan: RoutePlan, down: Iterable[LaneDown]) -> tuple[LaneDown, ...]:
    """The lanes of ``plan`` (its rungs, or its ``lane_unavailable`` skips) that are down
    here, each once, in plan order."""
    by_lane = {d.lane: d for d in down}
    seen: dict[str, LaneDown] = {}
    for r in plan.rungs:
        if r.lane in by_lane:
            seen.setdefault(r.lane, by_lane[r.lane])
    for s in plan.skipped:
        if s.code is SkipCode.LANE_UNAVAILABLE:
            seen.setdefault(s.lane, by_lane.get(s.lane) or LaneDown(s.lane, s.detail))
    return tuple(seen.values())


def terminal_text(plan: RoutePlan, down: Iterable[LaneDown] = ()) -> str:
    """One line for a plan with no rung left that names the real reason: the lanes that
    could not even be tried here (``no_usable_lane``), or the exhaustion, plus the lanes
    that were unusable besides."""
    if plan.terminal is None:
        return ""
    lanes = unusable_lanes(plan, down)
    why = "; ".join(f"{d.lane}: {d.reason}" for d in lanes)
    if plan.terminal is Terminal.NO_USABLE_LANE:
        return f"no lane here can run it ({plan.terminal.value}): {why}"
    tail = f"; not usable here: {why}" if why else ""
    return f"nothing left to try ({plan.terminal.value}){tail}"
