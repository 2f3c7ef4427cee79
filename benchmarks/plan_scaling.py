"""How ``plan()`` grows with the number of GCP zones and snapshot facts.  Prints figures; asserts nothing.

    python benchmarks/plan_scaling.py [--zones 6 60 600] [--repeat 5]

For each zone count Z: a policy whose GCP zone preference lists Z zones, every
machine type offered in all of them, and a capacity snapshot holding one fact per
zone (alternately exhausted and available) for the job's machine type.  Two jobs:
``cpu-small`` for 30 min (spot then on-demand: 2 x Z GCP rungs) and ``gpu-1`` for 1 h.
Times are the best of ``--repeat`` runs of a loop sized to take about 0.2 s.  A
linear ``plan()`` shows a roughly constant time per zone; a quadratic one a time
per zone that grows with Z.  A last line varies the snapshot size alone (600
zones, 0 / 60 / 600 / 6000 facts).
"""

from __future__ import annotations

import argparse
import timeit

from eps.core.model import Capacity, CapacitySnapshot, GcpState, Job, Policy, evolve
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY


def _policy(zones: int) -> Policy:
    names = tuple(f"region{i // 3}-{'abc'[i % 3]}" for i in range(zones))
    machines = tuple(evolve(m, zones=names) for m in DEFAULT_POLICY.gcp_machines)
    return evolve(DEFAULT_POLICY, gcp_zones=names, gcp_machines=machines)


def _snapshot(policy: Policy, machine: str, facts: int) -> CapacitySnapshot:
    zones = policy.gcp_zones
    states = (Capacity.EXHAUSTED, Capacity.AVAILABLE)
    gcp = tuple(GcpState(machine, zones[i % len(zones)], states[i % 2]) for i in range(facts))
    return CapacitySnapshot(gcp=gcp)


def _time(job: Job, snap: CapacitySnapshot, policy: Policy, repeat: int) -> float:
    """Seconds per plan() call, best of ``repeat``."""

    def call() -> None:
        plan(job, snap, DEFAULT_GRANTS, None, policy=policy)

    call()
    n = 1
    while timeit.timeit(call, number=n) < 0.2 and n < 1_000_000:
        n *= 2
    return min(timeit.repeat(call, number=n, repeat=repeat)) / n


JOBS = (("cpu-small 30m", Job("cpu-small", 1800), "e2-standard-4"), ("gpu-1 1h", Job("gpu-1", 3600), "a3-highgpu-1g"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--zones", type=int, nargs="+", default=[6, 60, 600])
    ap.add_argument("--repeat", type=int, default=5)
    ns = ap.parse_args()
    print(f"{'job':<14} {'zones':>6} {'facts':>6} {'plan() us':>12} {'us per zone':>12}")
    for name, job, machine in JOBS:
        for z in ns.zones:
            policy = _policy(z)
            us = _time(job, _snapshot(policy, machine, z), policy, ns.repeat) * 1e6
            print(f"{name:<14} {z:>6} {z:>6} {us:>12.1f} {us / z:>12.2f}")
    z = max(ns.zones)
    policy = _policy(z)
    name, job, machine = JOBS[0]
    for facts in (0, z // 10, z, 10 * z):
        us = _time(job, _snapshot(policy, machine, facts), policy, ns.repeat) * 1e6
        print(f"{name:<14} {z:>6} {facts:>6} {us:>12.1f} {us / z:>12.2f}")


if __name__ == "__main__":
    main()
