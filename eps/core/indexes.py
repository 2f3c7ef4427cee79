"""Lookups built once, so that ``plan()`` stays linear in zones and snapshot facts.

- :class:`PolicyIndex`: one per policy *object*: names to intents, clusters,
  machine types and flavors, each machine type's zones as a set, each lane's
  kind, and the memo of candidate rungs (what a lane offers before capacity
  is consulted).  :func:`policy_index` finds it by the policy's identity: a
  ``Policy`` is a tuple of tuples, and hashing it (every machine's zone list)
  on every cache lookup cost O(size of the policy) per call.  The index holds
  its policy, so an ``id`` is never reused while it is cached.
- :class:`Facts`: one per ``plan()`` call: the capacity snapshot's facts by
  key (GCP facts by machine and zone, wildcards by prefix; RunPod stock by id;
  queue facts by cluster and QoS), so each rung is a few dict probes instead
  of a walk over every fact.

Memoising a pure function is still pure: the same arguments give the same
plan whether or not the memo is warm.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from eps.core.model import (
    Capacity,
    CapacitySnapshot,
    ClusterConfig,
    GcpMachine,
    Intent,
    LaneKind,
    Policy,
    Provisioning,
    QueueState,
    Rung,
    RunpodCpuFlavor,
    RunpodGpuType,
    Skip,
    Stock,
    TierFault,
)
from eps.core.runpod_supply import failed_here

#: Candidate rungs of one lane for one job shape, and the skips found on the way.
Candidates = tuple[tuple[Rung, ...], tuple[Skip, ...]]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeVar

    _N = TypeVar("_N", Intent, ClusterConfig, GcpMachine)

_MEMO_LIMIT = 4096  # candidate entries per policy; the memo starts afresh beyond it
_POLICY_LIMIT = 8  # policies indexed at once (one in production; tests build many)


def _first_by_name(items: tuple[_N, ...]) -> dict[str, _N]:
    """name -> the first record of that name (what ``Policy.intent()`` and friends return)."""
    out: dict[str, _N] = {}
    for it in items:
        out.setdefault(it.name, it)
    return out


class PolicyIndex:
    """The lookups of one :class:`Policy`, built once."""

    __slots__ = (
        "_memo",
        "clusters",
        "intents",
        "lane_kinds",
        "machine_zones",
        "machines",
        "policy",
        "positions",
        "runpod_cpu",
        "runpod_gpu",
    )

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.intents = _first_by_name(policy.intents)
        self.clusters = _first_by_name(policy.clusters)
        self.machines = _first_by_name(policy.gcp_machines)
        self.machine_zones = {name: frozenset(m.zones) for name, m in self.machines.items()}
        self.runpod_cpu: dict[str, RunpodCpuFlavor] = {f.name: f for f in policy.runpod_cpu}
        self.runpod_gpu: dict[str, RunpodGpuType] = {g.id: g for g in policy.runpod_gpu}
        kinds = dict.fromkeys(self.clusters, LaneKind.SLURM)
        kinds.update({"runpod": LaneKind.RUNPOD, "gcp": LaneKind.GCP, policy.trivial_lane: LaneKind.VM})
        self.lane_kinds: dict[str, LaneKind] = kinds  # the VM, then gcp, then runpod win over a cluster name
        self._memo: dict[Hashable, Candidates] = {}
        #: cluster -> tier -> position in its ladder order (0 = top); filled by ``parking`` on first use.
        self.positions: dict[str, dict[str, int]] = {}

    def memo(self, key: Hashable, build: Callable[[], Candidates]) -> Candidates:
        """``build()`` once per ``key`` (keys are small tuples: never the policy itself)."""
        hit = self._memo.get(key)
        if hit is None:
            hit = build()
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = hit
        return hit


_INDEXES: dict[int, PolicyIndex] = {}


def policy_index(policy: Policy) -> PolicyIndex:
    """The index of ``policy``, found by identity (O(1), no hashing of the policy)."""
    index = _INDEXES.get(id(policy))
    if index is not None and index.policy is policy:
        return index
    index = PolicyIndex(policy)
    if len(_INDEXES) >= _POLICY_LIMIT:
        _INDEXES.pop(next(iter(_INDEXES), 0), None)  # the oldest
    _INDEXES[id(policy)] = index
    return index


_GcpFact = tuple[int, Provisioning | None, Capacity]  # (position in the snapshot, provisioning, state)


class Facts:
    """The capacity snapshot of one ``plan()`` call, indexed once.  Later facts override earlier ones."""

    __slots__ = (
        "_down", "_exact", "_faults", "_queues", "_stock", "_unreachable", "_wild", "_wild_lengths", "attempted",
        "runpod_lost",
    )  # fmt: skip

    def __init__(self, snap: CapacitySnapshot) -> None:
        self._down: dict[str, str] = {}
        for d in snap.unavailable:
            self._down.setdefault(d.lane, d.reason)
        self._unreachable = frozenset(c.cluster for c in snap.clusters if not c.reachable)
        self._faults: dict[tuple[str, str | None], TierFault] = {(f.cluster, f.qos): f for f in snap.faults}
        self._queues: dict[tuple[str, str], list[QueueState]] = {}
        for q in snap.queues:
            self._queues.setdefault((q.cluster, q.qos), []).append(q)
        self.attempted = frozenset(snap.attempted)
        # GCP: exact (machine, zone) facts, and wildcards (machine, prefix) for "*" and "europe-west4-*".
        self._exact: dict[tuple[str, str], list[_GcpFact]] = {}
        self._wild: dict[tuple[str, str], list[_GcpFact]] = {}
        lengths: set[int] = set()
        for i, g in enumerate(snap.gcp):
            fact = (i, g.provisioning, g.state)
            if g.zone.endswith("*"):
                prefix = g.zone[:-1]
                lengths.add(len(prefix))
                self._wild.setdefault((g.machine, prefix), []).append(fact)
            else:
                self._exact.setdefault((g.machine, g.zone), []).append(fact)
        self._wild_lengths = tuple(sorted(lengths))
        self._stock: dict[str, tuple[int, Stock]] = {st.id: (i, st.stock) for i, st in enumerate(snap.runpod)}
        self.runpod_lost = failed_here(snap.runpod)  # GPU pods made and lost this dispatch (eps.core.runpod_supply)

    @classmethod
    def of(cls, snap: CapacitySnapshot) -> Facts:
        """The facts of ``snap``; one shared empty index when it holds none (the usual ``eps plan``)."""
        if snap.gcp or snap.runpod or snap.queues or snap.clusters or snap.unavailable or snap.attempted or snap.faults:
            return cls(snap)
        return _NO_FACTS

    def lane_down(self, lane: str) -> str | None:
        """Why ``lane`` cannot be used now, or ``None``."""
        return self._down.get(lane)

    def unreachable(self, cluster: str) -> bool:
        return cluster in self._unreachable

    def fault(self, cluster: str, qos: str | None) -> TierFault | None:
        """What ``cluster`` said is set up wrong for ``qos`` (or for all its tiers), or ``None``."""
        if not self._faults:
            return None
        return self._faults.get((cluster, qos)) or self._faults.get((cluster, None))

    def queue(self, cluster: str, qos: str | None) -> list[QueueState]:
        """What is known about ``qos`` on ``cluster``, in snapshot order."""
        return [] if qos is None else self._queues.get((cluster, qos), [])

    @property
    def has_queues(self) -> bool:
        return bool(self._queues)

    @property
    def has_gcp(self) -> bool:
        return bool(self._exact or self._wild)

    @property
    def has_runpod(self) -> bool:
        return bool(self._stock)

    def gcp_state(self, machine: str, zone: str, prov: Provisioning) -> Capacity:
        """The last fact about ``machine`` in ``zone`` for ``prov`` (a fact without provisioning covers both)."""
        best, state = -1, Capacity.UNKNOWN
        lists = [self._exact.get((machine, zone))]
        lists += [self._wild.get((machine, zone[:n])) for n in self._wild_lengths if n <= len(zone)]
        for facts in lists:
            for i, p, st in reversed(facts or ()):
                if p is None or p is prov:
                    if i > best:
                        best, state = i, st
                    break
        return state

    def runpod_stock(self, machine: str, flavor: str) -> Stock:
        """The last stock fact about the instance id ``machine`` or its flavor."""
        a = self._stock.get(machine)
        b = self._stock.get(flavor)
        if a is None and b is None:
            return Stock.UNKNOWN
        return max((x for x in (a, b) if x is not None), key=lambda x: x[0])[1]


_NO_FACTS = Facts(CapacitySnapshot())
