"""The clusters' own start estimates for a job, gathered before its walk: each cluster of a
run of two or more consecutive clusters in the GPU lane order is asked at once (``sbatch
--test-only`` through its login prefix, nothing submitted), each within
:data:`ESTIMATE_TIMEOUT_S`.  They go into the capacity snapshot (``ClusterState.
start_estimate_s``), where the pure core ranks the run by them: a hint, never a gate.  A
cluster that answers late or not at all is unknown (it ranks last), never a failure."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from eps.core.model import CapacitySnapshot, ClusterState, Job, Policy, QosGrants, Resource, Rung, evolve

if TYPE_CHECKING:
    from eps.shell.lanes import Lanes

#: How long eps waits for the clusters' estimates before walking without them.
ESTIMATE_TIMEOUT_S = 5.0


def to_ask(policy: Policy, snapshot: CapacitySnapshot) -> list[str]:
    """The clusters whose estimate would rank them: in a run of 2+ consecutive clusters of
    the GPU order, and not already known (``--snapshot``)."""
    from eps.core.router import lane_runs

    known = {c.cluster for c in snapshot.clusters if c.start_estimate_s is not None or not c.reachable}
    return [n for ranks, run in lane_runs(policy.gpu_lane_order, policy) if ranks for n in run if n not in known]


def estimated(
    lanes: Lanes, policy: Policy, job: Job, dispatch: str, snapshot: CapacitySnapshot, grants: QosGrants,
    timeout_s: float = ESTIMATE_TIMEOUT_S,
) -> CapacitySnapshot:
    """``snapshot`` with the start estimates of :func:`to_ask`'s clusters for ``job`` (each
    for its first rung of the plan); unchanged when there is nothing to ask."""
    from eps.core.router import plan

    names = to_ask(policy, snapshot)
    if job.pin is not None or not names:
        return snapshot
    route = plan(job, snapshot, grants, None, policy=policy)
    if route.resource is not Resource.GPU:
        return snapshot
    first: dict[str, Rung] = {}
    for rung in route.rungs:
        first.setdefault(rung.lane, rung)
    names = [n for n in names if n in first and lanes.down(n) is None]
    got: dict[str, int | None] = {}

    def ask(name: str) -> None:
        lane = lanes.get(name)
        try:
            got[name] = lane.start_estimate(job, first[name], dispatch)  # type: ignore[attr-defined]
        except Exception:  # a hint: whatever goes wrong leaves it unknown
            got[name] = None

    threads = [threading.Thread(target=ask, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    end = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    states = [ClusterState(n, start_estimate_s=s) for n, s in dict(got).items() if s is not None]
    return evolve(snapshot, clusters=(*snapshot.clusters, *states)) if states else snapshot
