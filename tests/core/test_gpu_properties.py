"""Properties of the GPU need (issue 35) over random jobs, GPU needs, zone preferences and
capacity: every rung's GPU satisfies the job's models and memory (P5: one machine with all its
GPUs); GCP rungs are sorted by list price per GPU-hour within each provisioning model, spot
before on-demand before flex-start (P11); no rung offers a zone the tables do not list for its
family; and a need is refused exactly when no lane of the policy has a GPU for it."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eps.core.gpus import GCP_GPU_FAMILIES, GPU_MODELS, GpuNeed, family_of, gpu_memory_gb, gpu_model, job_gpu_need
from eps.core.model import (
    Capacity,
    CapacitySnapshot,
    GcpState,
    Job,
    JobError,
    LaneKind,
    Provisioning,
    Resource,
    RoutePlan,
    evolve,
)
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY

POLICY = DEFAULT_POLICY
DAY = 86_400
GPU_INTENTS = [i.name for i in POLICY.intents if i.resource is Resource.GPU]
MODELS = [m.name for m in GPU_MODELS]
GPU_MACHINES = [m.name for m in POLICY.gcp_machines if m.gpus]
ALL_ZONES = sorted({z for f in GCP_GPU_FAMILIES for z in f.zones} | set(POLICY.gcp_zones))
FAMILY_ZONES = {f.name: frozenset(f.zones) for f in GCP_GPU_FAMILIES}
ORDER = {Provisioning.SPOT: 0, Provisioning.ON_DEMAND: 1, Provisioning.FLEX_START: 2}

COMMON: dict[str, Any] = {
    "max_examples": 150,
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}



def _job(**fields: Any) -> Job:
    """A job of only these fields, the rest Job's defaults (``st.builds(Job)`` would draw them all)."""
    return Job(**fields)


jobs = st.builds(
    _job,
    intent=st.sampled_from(GPU_INTENTS),
    duration_s=st.one_of(st.none(), st.integers(60, 4 * 3600), st.integers(0, 20 * DAY)),
    restartable=st.booleans(),
    count=st.sampled_from([1, 1, 1, 2, 4, 8]),
    pin=st.one_of(st.none(), st.none(), st.sampled_from(["fellows", "gcp", "runpod"])),
    gpu_models=st.one_of(
        st.just(()),
        st.lists(st.sampled_from([*MODELS, "any"]), min_size=1, max_size=3).map(tuple),
    ),
    gpu_mem_gb=st.one_of(st.none(), st.sampled_from([0, 24, 40, 48, 80, 100, 141, 180, 200])),
)
policies = st.lists(st.sampled_from(ALL_ZONES), min_size=1, max_size=10, unique=True).map(
    lambda zones: evolve(POLICY, gcp_zones=tuple(zones))
)
snapshots = st.builds(
    CapacitySnapshot,
    gcp=st.lists(
        st.builds(
            GcpState,
            machine=st.sampled_from(GPU_MACHINES),
            zone=st.sampled_from([*ALL_ZONES, "*"]),
            state=st.sampled_from(list(Capacity)),
            provisioning=st.sampled_from([None, Provisioning.SPOT, Provisioning.ON_DEMAND, Provisioning.FLEX_START]),
        ),
        max_size=8,
    ).map(tuple),
)


def _plan(job: Job, snap: CapacitySnapshot, policy: Any) -> RoutePlan:
    try:
        return plan(job, snap, DEFAULT_GRANTS, None, policy=policy)
    except JobError as exc:
        assert "\n" not in str(exc)
        assume(False)
        raise


def _need(job: Job, p: RoutePlan) -> GpuNeed:
    intent = POLICY.intent(p.resolved_intent)
    assert intent is not None
    return job_gpu_need(job, intent)


@settings(**COMMON)
@given(jobs, snapshots, policies)
def test_every_rungs_gpu_satisfies_the_jobs_models_and_memory(job: Job, snap: CapacitySnapshot, pol: Any) -> None:
    p = _plan(job, snap, pol)
    need = _need(job, p)
    gpus = POLICY.intent(job.intent).gpus * job.count  # type: ignore[union-attr]
    for r in p.rungs:
        assert r.gpus == gpus, r.key  # P5: one machine with every GPU
        if r.kind is LaneKind.SLURM:
            model, memory = pol.cluster(r.lane).gpu_model, None
        elif r.kind is LaneKind.GCP:
            machine = pol.gcp_machine(r.machine)
            model, memory = machine.gpu_model, gpu_memory_gb(machine)
        else:
            pod = next(g for g in pol.runpod_gpu if g.id == r.machine)
            model, memory = pod.model, pod.memory_gb
        assert need.admits(model, memory), (r.key, need)
        known = gpu_model(model)
        if need.models:
            assert known is not None and known.name in need.models
        if known is not None:
            assert (memory or known.memory_gb) >= need.min_mem_gb


@settings(**COMMON)
@given(jobs, snapshots, policies)
def test_gcp_rungs_are_sorted_by_price_per_gpu_hour_within_a_provisioning_model(
    job: Job, snap: CapacitySnapshot, pol: Any
) -> None:
    p = _plan(job, snap, pol)
    gcp = [r for r in p.rungs if r.lane == "gcp"]
    ranks = [ORDER[r.provisioning] for r in gcp]
    assert ranks == sorted(ranks), [r.key for r in gcp]  # spot, then on-demand, then flex-start (P11)
    for prov in ORDER:
        prices = [r.price_per_hour / r.gpus for r in gcp if r.provisioning is prov]
        assert prices == sorted(prices), prov
        machines = [r.machine for r in gcp if r.provisioning is prov]
        runs = [m for i, m in enumerate(machines) if i == 0 or machines[i - 1] != m]
        assert len(runs) == len(set(runs)), machines  # a machine type's zones come together, one run


@settings(**COMMON)
@given(jobs, snapshots, policies)
def test_no_rung_offers_a_zone_its_family_does_not_list(job: Job, snap: CapacitySnapshot, pol: Any) -> None:
    p = _plan(job, snap, pol)
    for r in p.rungs:
        if r.lane != "gcp":
            continue
        assert r.zone in FAMILY_ZONES[family_of(r.machine or "")], r.key
        assert r.zone in pol.gcp_zones, r.key  # and only the configured zones


@settings(**COMMON)
@given(jobs, policies)
def test_a_need_is_refused_exactly_when_no_lane_has_such_a_gpu(job: Job, pol: Any) -> None:
    intent = POLICY.intent(job.intent)
    assert intent is not None
    need = job_gpu_need(job, intent)
    somewhere = (
        any(need.admits(c.gpu_model, None) for c in pol.clusters)
        or any(m.gpus and need.admits(m.gpu_model, gpu_memory_gb(m)) for m in pol.gcp_machines)
        or any(need.admits(g.model, g.memory_gb) for g in pol.runpod_gpu)
    )
    try:
        plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=pol)
    except JobError as exc:
        if exc.code == "no_such_gpu":
            assert not somewhere
            assert "\n" not in str(exc) and "fellows: h200 (141 GB)" in str(exc)
            return
        assume(False)  # another refusal (a pin this work cannot run on, a GPU count no machine has)
    assert somewhere


@settings(**COMMON)
@given(jobs.filter(lambda j: j.pin is None and not j.gpu_models and j.gpu_mem_gb is None))
def test_without_a_need_of_its_own_a_job_gets_the_intents_default(job: Job) -> None:
    """debug: any GPU of 24 GB or more; gpu-N and capture-7b: 80 GB or more (their old meaning)."""
    p = _plan(job, CapacitySnapshot(), POLICY)
    floor = 24 if job.intent == "debug" else 80
    for r in p.rungs:
        if r.lane == "gcp":
            assert gpu_memory_gb(POLICY.gcp_machine(r.machine or "")) >= floor  # type: ignore[arg-type, operator]
    if floor == 80:
        assert not {r.machine for r in p.rungs if r.lane == "gcp"} & {"g2-standard-4", "a2-highgpu-1g"}


@settings(**COMMON)
@given(jobs, policies)
def test_a_rungs_price_is_the_one_eps_status_shows_for_it(job: Job, pol: Any) -> None:
    """P12's information is one number: the plan's price per hour of a GCP rung (spot, on-demand
    or flex-start) is the list price ``eps status`` costs the dispatch by."""
    from eps.core.prices import list_price_per_hour

    p = _plan(job, CapacitySnapshot(), pol)
    for r in p.rungs:
        if r.lane == "gcp":
            assert list_price_per_hour(pol, LaneKind.GCP, r.machine, r.provisioning, r.gpus) == r.price_per_hour
