"""Property-based tests of the policy rules over random jobs, snapshots, grants and parks."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eps.core.gpus import gpu_memory_gb
from eps.core.healing import RetryOn
from eps.core.model import (
    Capacity,
    CapacitySnapshot,
    ClusterState,
    GcpState,
    Job,
    JobError,
    LaneKind,
    MachineLife,
    ParkState,
    Provisioning,
    QosGrants,
    QosTier,
    QueueState,
    Resource,
    RoutePlan,
    RunpodState,
    SkipCode,
    Stock,
    VmCapacity,
    evolve,
)
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY, FLEX_START_MAX_RUN_S, HEALING

POLICY = DEFAULT_POLICY
FELLOWS = POLICY.clusters[0]
TIERS = ("high-eur", "normal-eur", "low-eur", "dev-eur")
DAY = 86_400
MACHINES = [m.name for m in POLICY.gcp_machines]
ZONES = [*POLICY.gcp_zones, "*", "europe-west4-*", "us-central1-*"]
RUNPOD_IDS = [f.name for f in POLICY.runpod_cpu] + ["cpu3g-4-16", "cpu3m-16-128"] + [g.id for g in POLICY.runpod_gpu]
REASONS = [None, "Priority", "Resources", "QOSMaxGRESPerUser", "QOSMaxWallDurationPerJobLimit", "InvalidQOS"]

CPU_INTENTS = [i.name for i in POLICY.intents if i.resource is Resource.CPU]
GPU_INTENTS = [i.name for i in POLICY.intents if i.resource is Resource.GPU]


def _jobs(intents: list[str], pins: list[str]) -> st.SearchStrategy[Job]:
    return st.builds(
        Job,
        intent=st.sampled_from(intents),
        duration_s=st.one_of(st.integers(0, 120), st.integers(0, 30 * DAY)),
        restartable=st.booleans(),
        footprint_gb=st.one_of(st.just(0.0), st.floats(0, 1000, allow_nan=False)),
        gradient_fit=st.booleans(),
        count=st.sampled_from([1, 1, 1, 2, 3, 4, 8]),
        pin=st.one_of(st.none(), st.none(), st.sampled_from(pins)),
        # plan() reads the retry policy (what a preempted run does): events as the shell checks them
        retry=st.one_of(st.none(), st.lists(st.sampled_from(list(RetryOn)), unique=True, min_size=1).map(tuple)),
        # where the machine puts its outputs, as the shell checks it (plan() reads none of it)
        storage=st.none(), inputs=st.just(()),
        # a sweep's plan is its task's plan (tests/core/test_sweep.py): every property holds for it too
        sweep=st.sampled_from([1, 1, 1, 3]), sweep_parallel=st.none(),
    )


cpu_jobs = _jobs(CPU_INTENTS, ["vm", "gcp", "runpod"]).filter(lambda j: not j.gradient_fit)
gpu_jobs = _jobs(GPU_INTENTS, ["fellows", "gcp", "runpod"])
jobs = st.one_of(cpu_jobs, gpu_jobs, _jobs(CPU_INTENTS + GPU_INTENTS, ["vm", "fellows", "gcp", "runpod"]))

snapshots = st.builds(
    CapacitySnapshot,
    clusters=st.lists(st.builds(ClusterState, cluster=st.just("fellows"), reachable=st.booleans()), max_size=1).map(
        tuple
    ),
    queues=st.lists(
        st.builds(
            QueueState,
            cluster=st.just("fellows"),
            qos=st.sampled_from(TIERS),
            free_gpus=st.one_of(st.none(), st.integers(0, 16)),
            pending_reason=st.sampled_from(REASONS),
        ),
        max_size=3,
    ).map(tuple),
    gcp=st.lists(
        st.builds(
            GcpState,
            machine=st.sampled_from(MACHINES),
            zone=st.sampled_from(ZONES),
            state=st.sampled_from(list(Capacity)),
            provisioning=st.sampled_from([None, Provisioning.SPOT, Provisioning.ON_DEMAND, Provisioning.FLEX_START]),
        ),
        max_size=12,
    ).map(tuple),
    runpod=st.lists(
        st.builds(RunpodState, id=st.sampled_from(RUNPOD_IDS), stock=st.sampled_from(list(Stock))), max_size=6
    ).map(tuple),
)

tiers = st.builds(
    QosTier,
    name=st.sampled_from(TIERS),
    priority=st.integers(0, 300_000),
    max_wall_s=st.one_of(st.none(), st.sampled_from([DAY, 7 * DAY, 14 * DAY]), st.integers(60, 30 * DAY)),
    max_gpus_per_user=st.one_of(st.none(), st.integers(0, 16)),
)
grants = st.one_of(
    st.just(DEFAULT_GRANTS),
    st.lists(tiers, max_size=4, unique_by=lambda t: t.name).map(lambda ts: QosGrants((("fellows", tuple(ts)),))),
)
parks = st.one_of(
    st.none(),
    st.builds(
        ParkState,
        cluster=st.just("fellows"),
        qos=st.sampled_from(TIERS),
        elapsed_s=st.integers(0, 2000),
        pending_reason=st.sampled_from(REASONS),
    ),
)
policies = st.builds(
    lambda dev, early, first, nxt: evolve(
        POLICY,
        clusters=(
            evolve(
                FELLOWS, dev_qos_for_debug=dev, advance_on_self_cap=early, first_park_cap_s=first, next_park_cap_s=nxt
            ),
        ),
    ),
    st.booleans(),
    st.booleans(),
    st.integers(0, 3600),
    st.integers(0, 3600),
)

COMMON: dict[str, Any] = {
    "max_examples": 200,
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}


def _plan(job: Job, snap: CapacitySnapshot, g: QosGrants, park: ParkState | None, policy: Any = POLICY) -> RoutePlan:
    try:
        return plan(job, snap, g, park, policy=policy)
    except JobError as exc:
        assert "\n" not in str(exc)
        assume(False)
        raise


@settings(**COMMON)
@given(cpu_jobs, snapshots, grants, parks, policies)
def test_p3_gcp_always_before_runpod_for_cpu(
    job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, pol: Any
) -> None:
    """P3: for CPU work, no GCP rung ever comes after a RunPod rung."""
    p = _plan(job, snap, g, park, pol)
    lanes = [r.lane for r in p.rungs]
    if "runpod" in lanes:
        assert "gcp" not in lanes[lanes.index("runpod") :]


@settings(**COMMON)
@given(jobs, snapshots, grants, parks, policies)
def test_p6_no_gpu_rung_on_runpod_unless_pinned(
    job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, pol: Any
) -> None:
    """P6: RunPod never appears in the automatic GPU order."""
    p = _plan(job, snap, g, park, pol)
    if any(r.lane == "runpod" and r.gpus > 0 for r in p.rungs):
        assert job.pin == "runpod"
    if p.resource is Resource.GPU and job.pin is None:
        lanes = list(dict.fromkeys(r.lane for r in p.rungs))
        assert lanes in ([], ["fellows"], ["gcp"], ["fellows", "gcp"])


def _runnable(g: QosGrants, qos: str, job: Job, gpus: int) -> bool:
    tier = next((t for t in g.tiers("fellows") if t.name == qos), None)
    if tier is None:
        return False
    if tier.max_wall_s is not None and job.duration_s > tier.max_wall_s:
        return False
    return tier.max_gpus_per_user is None or gpus <= tier.max_gpus_per_user


@settings(**COMMON)
@given(gpu_jobs, snapshots, grants, policies)
def test_p7_high_eur_is_first_when_granted_and_runnable(
    job: Job, snap: CapacitySnapshot, g: QosGrants, pol: Any
) -> None:
    """P7: every fellows dispatch high-eur could run starts under high-eur; none starts lower."""
    p = _plan(job, snap, g, None, pol)
    fellows = [r for r in p.rungs if r.lane == "fellows"]
    assume(fellows)
    gpus = fellows[0].gpus
    if _runnable(g, "high-eur", job, gpus):
        assert fellows[0].qos == "high-eur"
        assert p.rungs[0] is fellows[0]
    # dev-eur only for debug with the switch on, and never first
    for r in fellows:
        if r.qos == "dev-eur":
            assert p.resolved_intent == "debug"
            assert pol.clusters[0].dev_qos_for_debug
            assert r is not fellows[0] or not _runnable(g, "high-eur", job, gpus)


@settings(**COMMON)
@given(jobs, snapshots, grants, parks, policies)
def test_p9_no_rung_on_a_tier_that_cannot_run_the_job(
    job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, pol: Any
) -> None:
    """P9: every fellows rung is granted, long enough, and within the per-user GPU cap."""
    p = _plan(job, snap, g, park, pol)
    for r in p.rungs:
        if r.kind is LaneKind.SLURM and r.qos is not None:
            assert _runnable(g, r.qos, job, r.gpus), r


@settings(**COMMON)
@given(jobs, snapshots, grants, parks, policies)
def test_plan_is_deterministic(job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, pol: Any) -> None:
    a = _plan(job, snap, g, park, pol)
    b = _plan(job, snap, g, park, pol)
    assert a == b


@settings(**COMMON)
@given(jobs, snapshots, grants, parks)
def test_p1_cpu_job_never_gets_a_gpu(job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any) -> None:
    """P1: CPU-only work never holds a GPU: no GPU count, no GPU cluster."""
    p = _plan(job, snap, g, park)
    if p.resource is Resource.CPU:
        assert all(r.gpus == 0 for r in p.rungs)
        assert all(r.kind is not LaneKind.SLURM for r in p.rungs)


@settings(**COMMON)
@given(jobs, snapshots, grants, parks)
def test_p5_gpu_work_is_one_machine(job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any) -> None:
    """P5: a GPU plan is one dispatch whose every rung carries all the GPUs; CPU plans fan out by count."""
    p = _plan(job, snap, g, park)
    if p.resource is Resource.GPU:
        assert p.count == 1
        assert len({r.gpus for r in p.rungs}) <= 1
    else:
        assert p.count == job.count


@settings(**COMMON)
@given(jobs, snapshots, grants)
def test_p11_long_non_restartable_never_spot(job: Job, snap: CapacitySnapshot, g: QosGrants) -> None:
    """P11: jobs longer than the spot threshold that cannot restart never get a spot rung."""
    p = _plan(job, snap, g, None)
    if job.duration_s > POLICY.thresholds.spot_max_s and not job.restartable:
        assert all(r.provisioning is not Provisioning.SPOT for r in p.rungs)
    gcp = [r.provisioning for r in p.rungs if r.lane == "gcp"]
    if Provisioning.ON_DEMAND in gcp:  # spot, when allowed, always comes before on-demand
        assert Provisioning.SPOT not in gcp[gcp.index(Provisioning.ON_DEMAND) :]


@settings(**COMMON)
@given(jobs, snapshots, grants)
def test_p11_flex_start_only_for_long_non_restartable_jobs_on_spot_flex_only_shapes(
    job: Job, snap: CapacitySnapshot, g: QosGrants
) -> None:
    """P11: a flex-start rung is planned only for a job that is long, not restartable and
    within flex-start's maximum run duration, on a machine type sold as spot/flex-start only
    (never beside spot or on-demand); such a job, unpinned elsewhere and with nothing
    known about that capacity, always gets one."""
    p = _plan(job, snap, g, None)
    flex = [r for r in p.rungs if r.provisioning is Provisioning.FLEX_START]
    long_fixed = job.duration_s > POLICY.thresholds.spot_max_s and not job.restartable
    for r in flex:
        machine = POLICY.gcp_machine(r.machine or "")
        assert machine is not None and machine.flex_start_offered and not machine.on_demand_offered
        assert long_fixed and job.duration_s <= FLEX_START_MAX_RUN_S
        assert r.lane == "gcp" and r.gpus > 0
    # Issue 35: every GPU family is offered, so flex-start rungs (of machine types without
    # on-demand) may sit beside another family's on-demand rungs, never beside their own
    # machine type's spot or on-demand, and never before an on-demand rung.
    for r in flex:
        own = {q.provisioning for q in p.rungs if q.lane == "gcp" and q.machine == r.machine}
        assert own == {Provisioning.FLEX_START}
    gcp = [r.provisioning for r in p.rungs if r.lane == "gcp"]
    assert not (flex and Provisioning.SPOT in gcp)
    if flex and Provisioning.ON_DEMAND in gcp:
        assert max(i for i, v in enumerate(gcp) if v is Provisioning.ON_DEMAND) < gcp.index(Provisioning.FLEX_START)
    machine = POLICY.gcp_machine(f"a3-highgpu-{max(1, p.rungs[0].gpus if p.rungs else 0)}g")
    wants_flex = (
        long_fixed
        and job.duration_s <= FLEX_START_MAX_RUN_S
        and p.resource is Resource.GPU
        and job.pin in (None, "gcp")
        and not snap.gcp
        and not snap.attempted
        and machine is not None
        and not machine.on_demand_offered
        and any(r.lane in {"gcp", "fellows"} for r in p.rungs)
    )
    if wants_flex and p.rungs and p.rungs[0].gpus < 8:
        assert flex, [r.key for r in p.rungs]
    if long_fixed and job.duration_s > FLEX_START_MAX_RUN_S and p.resource is Resource.GPU and p.rungs:
        assert not flex


@settings(**COMMON)
@given(jobs, snapshots, grants, policies)
def test_p8_worst_case_is_the_sum_of_park_caps(job: Job, snap: CapacitySnapshot, g: QosGrants, pol: Any) -> None:
    """P8: the stated worst-case wait is the sum of the park caps before the first paid rung."""
    p = _plan(job, snap, g, None, pol)
    queue = []
    for r in p.rungs:
        if r.provisioning is not Provisioning.QUEUE or r.park_cap_s is None:
            break
        queue.append(r.park_cap_s)
    assert p.worst_case_wait_s == sum(queue)
    caps = [r.park_cap_s for r in p.rungs if r.lane == "fellows" and r.park_cap_s is not None]
    if caps:
        c = pol.clusters[0]
        assert caps[0] == c.first_park_cap_s
        # rungs 2+ wait the smaller of the two settings (issue 14.1)
        assert all(x == min(c.first_park_cap_s, c.next_park_cap_s) for x in caps[1:])


@settings(**COMMON)
@given(gpu_jobs, snapshots, grants, policies)
def test_p8_rungs_2_plus_never_wait_longer_than_rung_1(
    job: Job, snap: CapacitySnapshot, g: QosGrants, pol: Any
) -> None:
    """P8 (issue 14.1): no later rung parks longer than rung 1, so the worst case before a job
    reaches GCP is at most (fellows rungs) x rung 1's cap, whatever the two settings are."""
    p = _plan(job, snap, g, None, pol)
    caps = [r.park_cap_s for r in p.rungs if r.lane == "fellows" and r.park_cap_s is not None]
    first = pol.clusters[0].first_park_cap_s
    assert all(c <= first for c in caps)
    assert p.worst_case_wait_s <= len(caps) * first


@settings(**COMMON)
@given(jobs, snapshots, grants, parks)
def test_p12_prices_never_change_the_decision(job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any) -> None:
    """P12: no dollar caps: multiplying every price by 1000 changes no rung, skip or terminal."""
    pricey = evolve(
        POLICY,
        gcp_machines=tuple(
            evolve(m, on_demand_per_hour=m.on_demand_per_hour * 1000, spot_per_hour=m.spot_per_hour * 1000)
            for m in POLICY.gcp_machines
        ),
        runpod_cpu=tuple(evolve(f, per_vcpu_hour=f.per_vcpu_hour * 1000) for f in POLICY.runpod_cpu),
        runpod_gpu=tuple(evolve(x, per_gpu_hour=x.per_gpu_hour * 1000) for x in POLICY.runpod_gpu),
    )
    a = _plan(job, snap, g, park)
    b = _plan(job, snap, g, park, pricey)
    assert [r.key for r in a.rungs] == [r.key for r in b.rungs]
    assert a.skipped == b.skipped
    assert a.terminal == b.terminal


@settings(**COMMON)
@given(jobs, snapshots, grants, parks)
def test_p10_a_pin_keeps_to_its_lane(job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any) -> None:
    """P10: a pinned plan has rungs on the pinned lane only; a fellows pin is one rung with no park cap."""
    p = _plan(job, snap, g, park)
    if job.pin is not None:
        assert {r.lane for r in p.rungs} <= {job.pin}
        if job.pin == "fellows":
            assert len(p.rungs) <= 1
            assert all(r.park_cap_s is None for r in p.rungs)
            assert p.terminal is None or not p.rungs


@settings(**COMMON)
@given(jobs, snapshots, grants, parks)
def test_terminal_iff_no_rungs(job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any) -> None:
    """A plan is terminal exactly when it has no rung; the retired hard terminal never appears."""
    p = _plan(job, snap, g, park)
    assert (p.terminal is None) == bool(p.rungs)
    assert p.terminal is None or p.terminal.value != "cpu_exhausted_no_runpod_lane"


class _CountingStr(str):
    """A str that counts how often it is compared or hashed (by ``plan()``'s lookups)."""

    calls = 0

    def __eq__(self, other: object) -> bool:
        _CountingStr.calls += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        _CountingStr.calls += 1
        return str.__ne__(self, other)

    def __hash__(self) -> int:
        _CountingStr.calls += 1
        return str.__hash__(self)


class _CountingZones(tuple):  # type: ignore[type-arg]
    """A zone tuple that counts how often it is hashed (a cache keyed by the whole Policy hashes it)."""

    hashes = 0

    def __hash__(self) -> int:
        _CountingZones.hashes += 1
        return tuple.__hash__(self)


def _wide_policy(zones: int) -> Any:
    names = tuple(f"region{i // 3}-{'abc'[i % 3]}" for i in range(zones))
    machines = tuple(evolve(m, zones=names) for m in POLICY.gcp_machines)
    return evolve(POLICY, gcp_zones=_CountingZones(names), gcp_machines=machines)


@settings(max_examples=5, deadline=None)
@given(st.integers(100, 300), st.sampled_from(["cpu-small", "gpu-1"]))
def test_plan_is_linear_in_zones_and_snapshot_facts(zones: int, intent: str) -> None:
    """Issue 14.6: with one GCP fact per zone, plan() compares or hashes a fact's names a bounded
    number of times per zone (indexed once per plan), never once per (rung, fact) pair."""
    pol = _wide_policy(zones)
    machine = "e2-standard-4" if intent == "cpu-small" else "a3-highgpu-1g"
    facts = tuple(
        GcpState(_CountingStr(machine), _CountingStr(z), Capacity.EXHAUSTED if i % 2 else Capacity.AVAILABLE)
        for i, z in enumerate(pol.gcp_zones)
    )
    job = Job(intent, 1800, restartable=True)
    plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=pol)  # warm any per-policy memo
    _CountingStr.calls = 0
    p = plan(job, CapacitySnapshot(gcp=facts), DEFAULT_GRANTS, None, policy=pol)
    assert any(s.code.value == "gcp_zone_exhausted" for s in p.skipped)
    assert _CountingStr.calls <= 12 * zones, f"{_CountingStr.calls} name comparisons for {zones} zones"


def test_cache_lookups_never_hash_the_whole_policy() -> None:
    """Issue 14.6: keying a cache by the Policy re-hashes every table (here: the zone list) on every
    plan(); plan() keys its caches by the policy's identity instead."""
    pol = _wide_policy(60)
    for job in (Job("gpu-1", 3600), Job("cpu-small", 1800), Job("cpu-bigmem", 5 * 3600, footprint_gb=300)):
        plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=pol)
    _CountingZones.hashes = 0
    for d in range(20):
        plan(Job("cpu-small", 1800 + d), CapacitySnapshot(), DEFAULT_GRANTS, None, policy=pol)
        plan(Job("gpu-1", 3600 + d), CapacitySnapshot(), DEFAULT_GRANTS, None, policy=pol)
    assert _CountingZones.hashes == 0


LADDER_ORDER = ("high-eur", "dev-eur", "normal-eur", "low-eur")  # FELLOWS's ladder, the dev tier after the top


def _tier_key(qos: str) -> str:
    return f"fellows/{qos}/-/queue"


@settings(**COMMON)
@given(
    gpu_jobs.filter(lambda j: j.pin is None),
    snapshots,
    grants,
    parks,
    st.lists(st.sampled_from(TIERS), max_size=2),
    policies,
)
def test_p7_the_ladder_never_walks_back_up(
    job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, tried: list[str], pol: Any
) -> None:
    """P7 (issue 14.2): once a dispatch has parked on a tier or tried one, no fellows rung above
    it in ladder order is proposed, whatever the grants say now; a parked tier itself stays only
    while the decision is to keep waiting on it."""
    snap = evolve(snap, attempted=tuple(_tier_key(q) for q in tried))
    p = _plan(job, snap, g, park, pol)
    reached = [*tried, *([park.qos] if park is not None else [])]
    if not reached:
        return
    floor = max(LADDER_ORDER.index(q) for q in reached)
    for r in p.rungs:
        if r.lane == "fellows" and r.qos is not None:
            pos = LADDER_ORDER.index(r.qos)
            assert pos >= floor, (r.qos, reached)
            if pos == floor and park is not None and r.qos == park.qos:
                assert p.park is not None and p.park.action.value in ("wait", "hold")


def _grants_without(*missing: str) -> QosGrants:
    return QosGrants((("fellows", tuple(t for t in DEFAULT_GRANTS.tiers("fellows") if t.name not in missing)),))


@settings(**COMMON)
@given(gpu_jobs.filter(lambda j: j.pin is None), st.lists(grants, min_size=1, max_size=4), policies)
def test_p7_the_executors_walk_goes_down_only(job: Job, steps: list[QosGrants], pol: Any) -> None:
    """P7 (issue 14.2): the executor's walk (plan, park out the first fellows rung, re-plan with it in
    ``attempted``) goes strictly down the ladder, even when the grants change between steps."""
    snap = CapacitySnapshot()
    last = -1
    for g in [_grants_without("high-eur"), *steps]:
        p = _plan(job, snap, g, None, pol)
        if not p.rungs or p.rungs[0].lane != "fellows" or p.rungs[0].qos is None:
            return
        rung = p.rungs[0]
        pos = LADDER_ORDER.index(rung.qos)
        assert pos > last, f"walked back up to {rung.qos}"
        last = pos
        parked = ParkState("fellows", rung.qos, (rung.park_cap_s or 0) + 1, "Priority")
        decision = _plan(job, snap, g, parked, pol).park
        assert decision is not None
        if decision.action.value != "advance":
            return
        snap = evolve(snap, attempted=(*snap.attempted, rung.key))


@settings(**COMMON)
@given(
    st.sampled_from([1, 2, 4, 8]),
    st.integers(60, DAY),
    st.booleans(),
    snapshots,
    policies,
)
def test_p7_debug_stays_a_debug_job_when_it_grows(
    count: int, duration: int, restartable: bool, snap: CapacitySnapshot, pol: Any
) -> None:
    """P5, P7 (issue 14.3): `debug --count N` is one N-GPU machine (gpu-N's shape) and still a debug
    job: with the dev switch on and the default grants (dev-eur: 1 day, 8 GPUs), dev-eur is a rung."""
    pol = evolve(pol, clusters=(evolve(pol.clusters[0], dev_qos_for_debug=True),))
    snap = evolve(snap, clusters=(), queues=())
    p = _plan(Job("debug", duration, restartable=restartable, count=count), snap, DEFAULT_GRANTS, None, pol)
    assert p.resolved_intent == "debug" and p.count == 1
    assert {r.gpus for r in p.rungs} == {count}
    assert "dev-eur" in [r.qos for r in p.rungs if r.lane == "fellows"]
    # issue 35: GCP offers every family's N-GPU machine type of at least debug's 24 GB per GPU
    for r in p.rungs:
        if r.lane == "gcp":
            machine = pol.gcp_machine(r.machine or "")
            assert machine.gpus == count and gpu_memory_gb(machine) >= 24, r.key


vm_sizes = st.builds(
    VmCapacity,
    vcpus=st.one_of(st.none(), st.integers(1, 64)),
    mem_gb=st.one_of(st.none(), st.floats(0, 512, allow_nan=False)),
    free_disk_gb=st.one_of(st.none(), st.floats(0, 500, allow_nan=False)),
)


@settings(**COMMON)
@given(cpu_jobs.filter(lambda j: j.pin is None), vm_sizes, vm_sizes)
def test_p2_a_trivial_op_stays_on_the_vm_only_when_it_fits(job: Job, measured: VmCapacity, default: VmCapacity) -> None:
    """P2 (issue 14.5): a trivial op stays on the VM exactly when its memory (per copy, a fan-out's
    copy counting all N) and its
    footprint (per copy) plus the margin fit the VM's size (the snapshot's, else the policy's);
    an unknown size keeps it there; otherwise it takes the normal CPU route, and says why."""
    pol = evolve(POLICY, vm=default)
    p = _plan(job, CapacitySnapshot(vm=measured), DEFAULT_GRANTS, None, pol)
    th = POLICY.thresholds
    trivial = job.duration_s <= th.trivial_op_s and job.footprint_gb <= th.big_footprint_gb
    mem = measured.mem_gb if measured.mem_gb is not None else default.mem_gb
    disk = measured.free_disk_gb if measured.free_disk_gb is not None else default.free_disk_gb
    intent = POLICY.intent(p.resolved_intent)
    assert intent is not None
    copies = max(job.count, job.task_count)  # a copy of a fan-out runs beside the other N - 1
    fits = (mem is None or intent.mem_gb * copies <= mem) and (
        disk is None or job.footprint_gb * copies + th.vm_disk_margin_gb <= disk
    )
    on_vm = [r.lane for r in p.rungs] == ["vm"]
    assert on_vm == (trivial and fits)
    too_small = any(s.code.value == "vm_too_small" for s in p.skipped)
    assert too_small == (trivial and not fits)
    if too_small:
        assert p.rungs and p.rungs[0].lane == "gcp"


@settings(**COMMON)
@given(jobs, snapshots, grants, parks, st.data())
def test_a_boot_looped_rung_never_appears_in_a_plan_unless_pinned(
    job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, data: st.DataObject
) -> None:
    """A rung with two early deaths within the window is never planned, unless the job is
    pinned (pins are exempt: then the plan is the one without the deaths); nothing else changes."""
    before = _plan(job, snap, g, park)
    keys = [r.key for r in before.rungs]
    looped = data.draw(st.lists(st.sampled_from(keys), unique=True) if keys else st.just([]))
    now = 10 * DAY
    ago = st.floats(0, DAY - 1)
    soon = st.floats(0, HEALING.early_death_s)
    deaths = {k: data.draw(st.lists(st.tuples(ago, soon), min_size=2, max_size=3)) for k in looped}
    lives = tuple(MachineLife(k, now - a - s, now - a) for k, times in deaths.items() for a, s in times)
    after = _plan(job, evolve(snap, lives=lives, lives_at=now), g, park)
    if job.pin is not None:
        assert [r.key for r in after.rungs] == keys
        return
    held = before.park.rung if before.park is not None else None
    assert [r.key for r in after.rungs] == [k for k in keys if k not in looped or k == held]
    assert {s.target for s in after.skipped if s.code is SkipCode.BOOT_LOOP} == set(looped) - {held}
