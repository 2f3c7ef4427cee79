"""A free cluster set up wrong, and preemptible tiers (issue 31).

A tier the cluster said is set up wrong (its partition, account or QoS: a
:class:`~eps.core.model.TierFault`) marks exactly that rung of the plan; the walk stops there
with ``Terminal.MISCONFIGURED`` and the fix rather than fall to a paid lane, unless the job asks
to ``fall_through`` (then the tier is skipped and the walk goes on).  A capacity refusal still
advances.  ``preempted_by`` says which tiers may preempt a rung's tier."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from test_properties import (
    COMMON,
    DAY,
    FELLOWS,
    GPU_INTENTS,
    POLICY,
    TIERS,
    _plan,
    gpu_jobs,
    grants,
    policies,
    snapshots,
)
from test_walk import GPU, queued, run

from eps.core.clusters import ClusterConfig
from eps.core.ladder import preempted_by
from eps.core.model import (
    CapacitySnapshot,
    Job,
    JobError,
    LaneKind,
    QosGrants,
    QosTier,
    Rung,
    SkipCode,
    Terminal,
    TierFault,
    evolve,
)
from eps.core.outcome import FailureKind, Handle, LaneFailure, absorb, misconfigured_fix, stops_dispatch
from eps.core.tables import DEFAULT_FELLOWS_GRANTS, DEFAULT_GRANTS
from eps.core.walk import (
    Begin,
    Failed,
    Hold,
    Landed,
    PollFailed,
    Running,
    Start,
    Stop,
    Wait,
    Walk,
    Withdraw,
    Withdrawn,
    next_step,
)

SAID = "sbatch: error: Batch job submission failed: Invalid partition name specified"
PAID = frozenset({LaneKind.GCP, LaneKind.RUNPOD})


def fault(qos: str | None, cluster: str = "fellows") -> TierFault:
    return TierFault(cluster, qos, SAID, misconfigured_fix(cluster, "partition"))


def misconfigured(code: str | None = "partition") -> Any:
    return lambda step: Failed(step.rung, LaneFailure(FailureKind.MISCONFIGURED, SAID, code=code))


def parked_out(step: Any) -> Any:
    return queued(step.rung, step.rung.park_cap_s or 0)


def withdrawn(step: Any) -> Any:
    return Withdrawn(step.rung, "Priority")


def _hits(qos: str | None) -> Any:
    """Whether a rung is the one a fault on fellows' ``qos`` (``None``: every tier) names."""
    return lambda r: r.lane == "fellows" and (qos is None or r.qos == qos)


# --- the plan ---------------------------------------------------------------------------------

fault_tiers = st.sampled_from([*TIERS, None])


@settings(**COMMON)
@given(gpu_jobs, snapshots, grants, fault_tiers, policies)
def test_a_tier_fault_marks_exactly_that_rung_and_keeps_the_rest(
    job: Job, snap: CapacitySnapshot, g: QosGrants, qos: str | None, pol: Any
) -> None:
    """The plan keeps every rung, skip and terminal; only the named tier's rung carries the
    fault (what the cluster said and the fix), and nothing else of it changes."""
    job = evolve(job, fall_through=False)  # (the strategy draws every field of a Job)
    before = _plan(job, snap, g, None, pol)
    after = _plan(job, evolve(snap, faults=(fault(qos),)), g, None, pol)
    assert [r.key for r in after.rungs] == [r.key for r in before.rungs]
    assert (after.skipped, after.terminal, after.worst_case_wait_s) == (
        before.skipped,
        before.terminal,
        before.worst_case_wait_s,
    )
    hit = _hits(qos)
    event(f"faulted rungs: {sum(map(hit, after.rungs))}")
    for b, a in zip(before.rungs, after.rungs, strict=True):
        if hit(a):
            assert a.fault is not None
            assert a.fault.startswith(f"fellows says {a.qos} is set up wrong")
            assert SAID in a.fault and "sinfo -s" in a.fault  # what it said and the fix
            assert evolve(a, fault=None, reason=b.reason) == b  # a queue note aside, the same rung
        else:
            assert a == b


@settings(**COMMON)
@given(gpu_jobs, snapshots, grants, fault_tiers, policies)
def test_with_fall_through_a_faulted_tier_is_skipped_and_the_rest_stay(
    job: Job, snap: CapacitySnapshot, g: QosGrants, qos: str | None, pol: Any
) -> None:
    job = evolve(job, fall_through=True)
    before = _plan(job, snap, g, None, pol)
    after = _plan(job, evolve(snap, faults=(fault(qos),)), g, None, pol)
    hit = _hits(qos)
    assert [r.key for r in after.rungs] == [r.key for r in before.rungs if not hit(r)]
    assert all(r.fault is None for r in after.rungs)
    skips = [s for s in after.skipped if s.code is SkipCode.MISCONFIGURED]
    assert [(s.lane, s.target) for s in skips] == [(r.lane, r.qos) for r in before.rungs if hit(r)]
    assert all(SAID in s.detail and "--fall-through" in s.detail for s in skips)
    assert [s for s in after.skipped if s.code is not SkipCode.MISCONFIGURED] == list(before.skipped)
    assert (after.terminal is None) == bool(after.rungs)


@settings(**COMMON)
@given(gpu_jobs, snapshots, grants, policies)
def test_fall_through_changes_nothing_without_a_fault(job: Job, snap: CapacitySnapshot, g: QosGrants, pol: Any) -> None:
    through, stop = (evolve(job, fall_through=f) for f in (True, False))
    assert _plan(through, snap, g, None, pol) == _plan(stop, snap, g, None, pol)


LAB = ClusterConfig(name="lab", partition="batch", qos_ladder=(), gpus_per_node=4, gpu_model="A100")
TWO = evolve(POLICY, clusters=(FELLOWS, LAB), gpu_lane_order=("fellows", "lab", "gcp"))
other_faults = st.lists(
    st.builds(
        TierFault, cluster=st.sampled_from(["lab", "gone"]), qos=fault_tiers, reason=st.just(SAID), fix=st.just("x")
    ),
    min_size=1,
    max_size=3,
)


@settings(**COMMON)
@given(gpu_jobs.filter(lambda j: j.pin is None), grants, other_faults, st.booleans())
def test_a_fault_of_another_cluster_never_touches_this_ones_rungs(
    job: Job, g: QosGrants, faults: list[TierFault], fall_through: bool
) -> None:
    """A fault is its cluster's only: one on lab leaves every fellows (and paid) rung as it was;
    one of a cluster no longer configured (a stale record) changes nothing at all."""
    job = evolve(job, fall_through=fall_through)
    before = _plan(job, CapacitySnapshot(), g, None, TWO)
    after = _plan(job, CapacitySnapshot(faults=tuple(faults)), g, None, TWO)
    if all(f.cluster == "gone" for f in faults):
        assert after == before
    lab_faulted = any(f.cluster == "lab" and f.qos is None for f in faults)  # lab's one rung has no QoS
    assert [r for r in after.rungs if r.lane != "lab"] == [r for r in before.rungs if r.lane != "lab"]
    for r in after.rungs:
        assert (r.fault is not None) == (r.lane == "lab" and lab_faulted)
    if lab_faulted and fall_through:
        assert [r.lane for r in after.rungs] == [r.lane for r in before.rungs if r.lane != "lab"]


# --- what a failure teaches, and whether it ends the dispatch -----------------------------------


@pytest.mark.parametrize(
    ("kind", "fall_through", "stops"),
    [
        (FailureKind.MISCONFIGURED, False, True),
        (FailureKind.MISCONFIGURED, True, False),
        (FailureKind.REFUSED, False, False),  # a capacity refusal (a tier not granted) advances as before
        (FailureKind.REFUSED, True, False),
        (FailureKind.AUTH, True, True),  # fall_through is about a misconfigured cluster only
    ],
)
def test_which_failures_stop_a_dispatch_with_and_without_fall_through(
    kind: FailureKind, fall_through: bool, stops: bool
) -> None:
    assert stops_dispatch(LaneFailure(kind, "x", code="partition"), fall_through=fall_through) is stops


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("partition", "sinfo -s"),
        ("account", "sacctmgr show assoc"),
        ("qos", "sacctmgr show qos"),
        (None, "eps check"),
        ("something-else", "eps check"),
    ],
)
def test_a_misconfigured_tier_is_remembered_with_its_fix(code: str | None, words: str) -> None:
    rung = next(r for r in _plan(GPU, CapacitySnapshot(), DEFAULT_GRANTS, None).rungs if r.qos == "normal-eur")
    snap = absorb(CapacitySnapshot(), rung, LaneFailure(FailureKind.MISCONFIGURED, SAID, code=code))
    assert snap.attempted == (rung.key,)
    assert snap.faults == (TierFault("fellows", "normal-eur", SAID, misconfigured_fix("fellows", code)),)
    assert words in snap.faults[0].fix and '[[clusters]] name = "fellows"' in snap.faults[0].fix


# --- the walk ---------------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["partition", "account", "qos", None])
def test_a_misconfigured_tier_stops_the_walk_with_the_fix(code: str | None) -> None:
    walk, (start, stop) = run(GPU, misconfigured(code))
    assert isinstance(start, Start) and start.rung.qos == "high-eur"
    assert isinstance(stop, Stop) and stop.terminal is Terminal.MISCONFIGURED
    assert stop.failure == LaneFailure(FailureKind.MISCONFIGURED, SAID, code=code)
    fix = misconfigured_fix("fellows", code)
    assert stop.message.startswith("fellows says high-eur is set up wrong")
    assert SAID in stop.message and f"fix: {fix}" in stop.message
    assert "nothing was started on a paid lane" in stop.message and "--fall-through" in stop.message
    assert walk.snapshot.faults == (TierFault("fellows", "high-eur", SAID, fix),)  # the next plan marks it


def test_with_fall_through_a_misconfigured_tier_is_skipped_and_the_walk_goes_on() -> None:
    walk, (_, nxt) = run(evolve(GPU, fall_through=True), misconfigured())
    assert isinstance(nxt, Start) and (nxt.rung.lane, nxt.rung.qos) == ("fellows", "normal-eur")
    assert ("fellows", SkipCode.MISCONFIGURED, "high-eur") in [(s.lane, s.code, s.target) for s in nxt.plan.skipped]
    assert walk.snapshot.faults[-1].qos == "high-eur"


def test_with_fall_through_every_misconfigured_tier_is_skipped_then_the_paid_lane() -> None:
    walk, steps = run(evolve(GPU, fall_through=True), *[misconfigured()] * 3)
    started = [(s.rung.lane, s.rung.qos) for s in steps if isinstance(s, Start)]
    assert started[:3] == [("fellows", "high-eur"), ("fellows", "normal-eur"), ("fellows", "low-eur")]
    assert started[3][0] == "gcp"  # the user asked for it
    assert {f.qos for f in walk.snapshot.faults} == {"high-eur", "normal-eur", "low-eur"}


def test_a_capacity_refusal_still_advances() -> None:
    refused = LaneFailure(FailureKind.REFUSED, "Invalid qos specification")
    _, (_, nxt) = run(GPU, lambda s: Failed(s.rung, refused))
    assert isinstance(nxt, Start) and nxt.rung.qos == "normal-eur"


def _walk(job: Job, *faulted: str | None) -> Walk:
    return Walk(job, CapacitySnapshot(faults=tuple(fault(q) for q in faulted)), DEFAULT_GRANTS)


@pytest.mark.parametrize("faulted", [("high-eur",), (None,), ("high-eur", "low-eur")])
def test_a_fault_known_before_the_walk_stops_it_at_once(faulted: tuple[str | None, ...]) -> None:
    _, step = next_step(_walk(GPU, *faulted), Begin())
    assert isinstance(step, Stop) and step.terminal is Terminal.MISCONFIGURED
    assert step.plan is not None and step.plan.rungs[0].fault is not None
    assert SAID in step.message and "nothing was started on a paid lane" in step.message


def test_a_fault_known_before_the_walk_with_fall_through_starts_the_next_tier() -> None:
    _, step = next_step(_walk(evolve(GPU, fall_through=True), "high-eur"), Begin())
    assert isinstance(step, Start) and step.rung.qos == "normal-eur"


def test_a_fault_further_down_the_ladder_stops_the_walk_there_never_on_gcp() -> None:
    walk = _walk(GPU, "low-eur")
    walk, step = next_step(walk, Begin())
    started = []
    while isinstance(step, (Start, Withdraw)):
        if isinstance(step, Start):
            started.append(step.rung.qos)
            walk, step = next_step(walk, parked_out(step))
        else:
            walk, step = next_step(walk, withdrawn(step))
    assert started == ["high-eur", "normal-eur"]
    assert isinstance(step, Stop) and step.terminal is Terminal.MISCONFIGURED and "low-eur" in step.message


# the property: never a silent fall to a paid lane

OUTCOMES = ["misconfigured", "misconfigured", "refused", "park_out", "park_out", "lost", "no_capacity", "running"]
walk_jobs = st.tuples(
    st.sampled_from(GPU_INTENTS), st.integers(60, 20 * DAY), st.booleans(), st.sampled_from([None, None, "fellows"])
).map(lambda t: Job(t[0], t[1], restartable=t[2], pin=t[3], command=("train",)))


def _observe(outcome: str, rung: Rung) -> Any:
    handle = Handle(rung.lane, rung.kind, "42", rung.key, qos=rung.qos)
    if rung.kind is LaneKind.SLURM:
        if outcome == "misconfigured":
            return Failed(rung, LaneFailure(FailureKind.MISCONFIGURED, SAID, code="partition"))
        if outcome == "refused":
            return Failed(rung, LaneFailure(FailureKind.REFUSED, "Invalid qos specification"))
        if outcome == "lost":
            return PollFailed(rung, handle, LaneFailure(FailureKind.UNREACHABLE, "no controller"))
        if outcome == "running":
            return Running(handle)
        return queued(rung, rung.park_cap_s or 0)
    if outcome == "running":
        return Running(handle)
    kind = FailureKind.ZONE_EXHAUSTED if rung.kind is LaneKind.GCP else FailureKind.NO_CAPACITY
    return Failed(rung, LaneFailure(kind, "none left"))


@settings(**COMMON)
@given(
    walk_jobs,
    grants,
    st.booleans(),
    st.lists(fault_tiers, max_size=2),
    st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=14),
)
def test_a_misconfigured_free_cluster_is_never_a_silent_fall_to_a_paid_lane(
    job: Job, g: QosGrants, fall_through: bool, faulted: list[str | None], outcomes: list[str]
) -> None:
    """Without fall_through, no walk ever starts a paid rung after a MISCONFIGURED failure (it
    stops at once, with the fix).  With it, the walk goes on and never stops as MISCONFIGURED.
    Either way no faulted rung is ever started, nor a tier the cluster said is set up wrong."""
    job = evolve(job, fall_through=fall_through)
    walk = Walk(job, CapacitySnapshot(faults=tuple(fault(q) for q in faulted)), g)
    try:
        walk, step = next_step(walk, Begin())
    except JobError:
        assume(False)
    if isinstance(step, Stop):
        event(f"stopped at once: {step.terminal}")
    wrong = {("fellows", q) for q in faulted}
    failed_misconfigured = False
    for outcome in outcomes:
        if isinstance(step, Start):
            rung = step.rung
            assert rung.fault is None
            assert (rung.lane, rung.qos) not in wrong and (rung.lane, None) not in wrong
            if rung.kind in PAID:
                assert fall_through or not failed_misconfigured
                if failed_misconfigured:
                    event("a paid start after a misconfigured tier, with fall_through")
            seen = _observe(outcome, rung)
            if isinstance(seen, Failed) and seen.failure.kind is FailureKind.MISCONFIGURED:
                wrong.add((rung.lane, rung.qos))
                failed_misconfigured = True
                event(f"a misconfigured failure (fall_through={fall_through})")
        elif isinstance(step, Wait):
            seen = queued(step.rung, step.cap_s)
        elif isinstance(step, Withdraw):
            seen = Withdrawn(step.rung, "Priority")
        else:
            assert isinstance(step, (Stop, Landed, Hold))
            break
        walk, step = next_step(walk, seen)
        if isinstance(seen, Failed) and seen.failure.kind is FailureKind.MISCONFIGURED and not fall_through:
            assert isinstance(step, Stop) and step.terminal is Terminal.MISCONFIGURED
            assert misconfigured_fix("fellows", "partition") in step.message
        if isinstance(step, Stop) and step.terminal is Terminal.MISCONFIGURED:
            assert not fall_through
            event("stopped after a step: misconfigured")


# --- preemptible tiers --------------------------------------------------------------------------


def _tiers(*preempts: tuple[str, tuple[str, ...]]) -> tuple[QosTier, ...]:
    """The default fellows grants, with ``Preempt`` as given (none elsewhere)."""
    said = dict(preempts)
    return tuple(evolve(t, preempts=said.get(t.name, ())) for t in DEFAULT_FELLOWS_GRANTS)


NOBODY = _tiers()  # grants read without any Preempt (an older grants file)


@pytest.mark.parametrize(
    ("cluster", "tiers", "qos", "by"),
    [
        # the tables' grants: high-eur preempts normal-eur and low-eur (sacctmgr's Preempt)
        (FELLOWS, DEFAULT_FELLOWS_GRANTS, "high-eur", ()),
        (FELLOWS, DEFAULT_FELLOWS_GRANTS, "normal-eur", ("high-eur",)),
        (FELLOWS, DEFAULT_FELLOWS_GRANTS, "low-eur", ("high-eur",)),
        (FELLOWS, DEFAULT_FELLOWS_GRANTS, "dev-eur", ()),
        # grants that say nothing of preemption: the row's preemptible tiers, by every ladder tier
        # above them that is not preemptible itself (fellows: high-eur preempts both)
        (FELLOWS, NOBODY, "high-eur", ()),
        (FELLOWS, NOBODY, "normal-eur", ("high-eur",)),
        (FELLOWS, NOBODY, "low-eur", ("high-eur",)),
        (FELLOWS, NOBODY, "dev-eur", ()),  # not on the ladder
        (FELLOWS, (), "low-eur", ("high-eur",)),
        # the grants win, whatever the row says
        (FELLOWS, _tiers(("dev-eur", ("high-eur",))), "high-eur", ("dev-eur",)),
        (
            FELLOWS,
            _tiers(("normal-eur", ("low-eur",)), ("high-eur", ("low-eur",))),
            "low-eur",
            ("high-eur", "normal-eur"),
        ),
        # grants that say anything of preemption are the whole truth: normal-eur is not preempted here
        (FELLOWS, _tiers(("high-eur", ("low-eur",))), "normal-eur", ()),
        # a row that calls nothing preemptible, or a tier off its ladder
        (evolve(FELLOWS, preemptible=()), NOBODY, "low-eur", ()),
        (evolve(FELLOWS, preemptible=("x",)), NOBODY, "x", ()),
        (LAB, (), "low-eur", ()),
    ],
)
def test_preempted_by(cluster: ClusterConfig, tiers: tuple[QosTier, ...], qos: str, by: tuple[str, ...]) -> None:
    assert preempted_by(cluster, qos, tiers) == by


@settings(**COMMON)
@given(
    st.sampled_from(TIERS),
    st.lists(st.sampled_from(TIERS), unique=True).map(tuple),
    st.dictionaries(st.sampled_from(TIERS), st.lists(st.sampled_from(TIERS), unique=True).map(tuple)),
)
def test_preempted_by_reads_the_grants_first_then_the_row(
    qos: str, preemptible: tuple[str, ...], said: dict[str, tuple[str, ...]]
) -> None:
    cluster = evolve(FELLOWS, preemptible=preemptible)
    tiers = _tiers(*said.items())
    live = tuple(t.name for t in tiers if qos in t.preempts)
    ladder = cluster.qos_ladder
    above = ladder[: ladder.index(qos)] if qos in preemptible and qos in ladder else ()
    row = tuple(t for t in above if t not in preemptible)
    assert preempted_by(cluster, qos, tiers) == (live if any(t.preempts for t in tiers) else row)


def test_the_plan_says_which_rungs_are_preemptible_and_what_a_preempted_run_does() -> None:
    p = _plan(GPU, CapacitySnapshot(), DEFAULT_GRANTS, None)
    rungs = {r.qos: r for r in p.rungs if r.lane == "fellows"}
    assert "preemptible" not in rungs["high-eur"].reason
    for qos in ("normal-eur", "low-eur"):
        assert "preemptible (by high-eur)" in rungs[qos].reason
    said = [n for n in p.notes if n.startswith("preemptible rungs")]
    assert said == [
        "preemptible rungs (fellows/normal-eur/-/queue, fellows/low-eur/-/queue): a preempted run is interrupted, "
        "not failed, and is not relaunched: the dispatch ends preempted (--restartable or --retry interruption "
        "relaunches it)"
    ]
    restartable = _plan(evolve(GPU, restartable=True), CapacitySnapshot(), DEFAULT_GRANTS, None)
    assert any("is relaunched from the top of the ladder with its synced outputs" in n for n in restartable.notes)
    older = QosGrants((("fellows", NOBODY),))
    low = next(r for r in _plan(GPU, CapacitySnapshot(), older, None).rungs if r.qos == "low-eur")
    assert low.reason.endswith("preemptible (by high-eur)")  # the row: by the tiers above that are not preemptible


def test_a_plan_without_a_preemptible_rung_says_nothing_of_preemption() -> None:
    row = evolve(FELLOWS, preemptible=())
    pol = evolve(POLICY, clusters=(row,))
    p = _plan(GPU, CapacitySnapshot(), QosGrants((("fellows", NOBODY),)), None, pol)
    assert p.rungs and not any("preemptible" in r.reason for r in p.rungs)
    assert not any(n.startswith("preemptible rungs") for n in p.notes)
