"""What a user's own jobs already hold on a cluster, counted from the ledger's rows: every
host's, when the hosts of a team share one ledger (docs/design/team.md).

A cluster's per-user cap (fellows: 16 GPUs per user per QoS, ``MaxTRESPerUser``) binds the
user, not the host: a ladder walked from host B must count the jobs host A's dispatches
hold under that QoS.  The shell reads the live SLURM attempts of the ledger (pending: a
park; running) with their dispatch's intent and the user who started it
(:class:`LiveJob`); the rules of the count are here, pure:

- Only the user's own jobs count (a job recorded without a user, from before a team shared
  the ledger, was this host's, so the user's).  Another user's jobs bind their own cap.
- A running job takes its GPUs from the cap.  A parked job of the user under the same QoS is
  ahead of a new one (SLURM starts the older first), so its GPUs are spoken for too.
- :func:`capped_queues`: a QoS whose tier has a per-user cap becomes a queue fact with the
  GPUs left under the cap (never below 0).  The plan then says so on the rung (``expect to
  park``); the walk parks there as it always does: waiting on one's own jobs is the policy's
  default (``advance_on_self_cap`` off), so nothing is skipped here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from eps.core.model import QosGrants, QueueState


class LiveJob(NamedTuple):
    """One live SLURM job of the ledger: a pending (parked) or running attempt."""

    cluster: str
    qos: str | None
    gpus: int
    running: bool
    user: str | None  # who started its dispatch; None: recorded before a team shared the ledger


class Holding(NamedTuple):
    """What one user's jobs hold under one QoS of one cluster."""

    cluster: str
    qos: str
    running_gpus: int
    parked_gpus: int

    @property
    def gpus(self) -> int:
        return self.running_gpus + self.parked_gpus


def holdings(jobs: Iterable[LiveJob], user: str) -> tuple[Holding, ...]:
    """The GPUs ``user``'s jobs hold, per (cluster, QoS), running and parked; sorted."""
    sums: dict[tuple[str, str], list[int]] = {}
    for job in jobs:
        if job.qos is None or (job.user is not None and job.user != user):
            continue
        got = sums.setdefault((job.cluster, job.qos), [0, 0])
        got[0 if job.running else 1] += job.gpus
    return tuple(Holding(c, q, r, p) for (c, q), (r, p) in sorted(sums.items()))


def capped_queues(held: Iterable[Holding], grants: QosGrants) -> tuple[QueueState, ...]:
    """The queue facts of ``held`` under tiers with a per-user GPU cap: the GPUs left under it."""
    facts: list[QueueState] = []
    for h in held:
        tier = next((t for t in grants.tiers(h.cluster) if t.name == h.qos), None)
        if tier is None or tier.max_gpus_per_user is None:
            continue
        facts.append(QueueState(h.cluster, h.qos, free_gpus=max(0, tier.max_gpus_per_user - h.gpus)))
    return tuple(facts)
