"""Reconcile's decisions (eps.core.settle): what happens to a dispatch no live eps process
owns, scenario by scenario."""

from __future__ import annotations

import pytest

from eps.core.model import LaneKind, Provisioning, Rung
from eps.core.outcome import AttemptRecord, Handle
from eps.core.settle import DispatchView, JobSeen, LiveItem, Verdict, needs_history, settle, to_probe, vanished
from eps.core.states import AttemptState, DispatchState, HandleState, Outcome

HIGH = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "", qos="high-eur")
NORMAL = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "", qos="normal-eur")
SPOT = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "", machine="e2-standard-4", zone="us-central1-a")
ONDEMAND = Rung("gcp", LaneKind.GCP, Provisioning.ON_DEMAND, "", machine="e2-standard-4", zone="us-central1-a")


def attempt(seq: int, rung: Rung, state: AttemptState, handle: str | None = None, name: str = "") -> AttemptRecord:
    return AttemptRecord(seq, rung, state, None, handle, 0.0, seq, name or f"n{seq}")


def slurm_item(job: str, qos: str, state: HandleState) -> LiveItem:
    key = f"fellows/{qos}/-/queue"
    return LiveItem("d1", Handle("fellows", LaneKind.SLURM, job, key, qos=qos, state=state), "eps-d1")


def vm_item(name: str, rung: Rung, state: HandleState) -> LiveItem:
    return LiveItem("d1", Handle("gcp", LaneKind.GCP, name, rung.key, zone=rung.zone, state=state), name)


def view(state: DispatchState, *attempts: AttemptRecord, handle: Handle | None = None, pinned: bool = False):
    return DispatchView("d1", state, pinned, handle, attempts)


def test_a_lane_that_could_not_be_read_changes_nothing() -> None:
    v = view(DispatchState.WALKING, attempt(1, SPOT, AttemptState.INTENT))
    s = settle(v, [], blind=frozenset({"gcp"}), resuming=False)
    assert (s.verdict, s.blind) == (Verdict.BLIND, ("gcp",))


@pytest.mark.parametrize("state", [DispatchState.CANCELLED, DispatchState.FAILED])
def test_a_cancelled_or_failed_dispatch_keeps_nothing(state: DispatchState) -> None:
    items = [vm_item("vm-1", SPOT, HandleState.RUNNING)]
    s = settle(view(state, attempt(1, SPOT, AttemptState.CANCELLED, "vm-1")), items, blind=frozenset(), resuming=False)
    assert (s.verdict, s.release) == (Verdict.RELEASE, tuple(items))


def test_finished_machines_are_kept_for_their_output_then_released() -> None:
    items = [vm_item("vm-1", ONDEMAND, HandleState.FINISHED)]
    v = view(DispatchState.STARTED, attempt(1, ONDEMAND, AttemptState.RUNNING, "vm-1"))
    s = settle(v, items, blind=frozenset(), resuming=False)
    assert (s.verdict, s.dispatch_state, s.release) == (Verdict.FINISHED, DispatchState.ENDED, tuple(items))


def test_a_preempted_spot_vm_is_released_and_reported() -> None:
    items = [vm_item("vm-1", SPOT, HandleState.PREEMPTED)]
    v = view(DispatchState.STARTED, attempt(1, SPOT, AttemptState.RUNNING, "vm-1"))
    s = settle(v, items, blind=frozenset(), resuming=False)
    assert (s.verdict, s.dispatch_state) == (Verdict.PREEMPTED, DispatchState.PREEMPTED)
    assert "--resume d1" in (s.message or "")


def test_a_vanished_spot_vm_was_preempted_judged_by_the_rung_not_its_name() -> None:
    handle = Handle("gcp", LaneKind.GCP, "vm-1", SPOT.key, zone=SPOT.zone)
    v = view(DispatchState.STARTED, attempt(1, SPOT, AttemptState.RUNNING, "vm-1"), handle=handle)
    assert settle(v, [], blind=frozenset(), resuming=False).verdict is Verdict.PREEMPTED
    handle = Handle("gcp", LaneKind.GCP, "vm-1", ONDEMAND.key, zone=ONDEMAND.zone)
    v = view(DispatchState.STARTED, attempt(1, ONDEMAND, AttemptState.RUNNING, "vm-1"), handle=handle)
    assert settle(v, [], blind=frozenset(), resuming=False).verdict is Verdict.ENDED


def test_a_vanished_spot_vm_whose_jobs_end_is_on_record_was_released_by_its_walk_not_preempted() -> None:
    """The walk recorded the job's end, pulled, released the machine, and was killed (or lost
    its lease) before it wrote the dispatch's end: the job ended; nothing to run again."""
    handle = Handle("gcp", LaneKind.GCP, "vm-1", SPOT.key, zone=SPOT.zone)
    v = view(DispatchState.STARTED, attempt(1, SPOT, AttemptState.RUNNING, "vm-1"), handle=handle)
    ended = v._replace(job_ended=True)
    assert (settle(ended, [], blind=frozenset(), resuming=False).verdict,
            settle(ended, [], blind=frozenset(), resuming=True).verdict) == (Verdict.ENDED, Verdict.ENDED)  # fmt: skip


def test_the_newest_resource_is_kept_and_the_rest_released() -> None:
    old, new = slurm_item("10", "high-eur", HandleState.PENDING), slurm_item("11", "normal-eur", HandleState.RUNNING)
    v = view(
        DispatchState.WALKING, attempt(1, HIGH, AttemptState.ADVANCED, "10"), attempt(2, NORMAL, AttemptState.PENDING)
    )
    s = settle(v, [old, new], blind=frozenset(), resuming=False)
    assert (s.verdict, s.keep, s.release) == (Verdict.KEEP, new, (old,))
    assert s.keep_attempt is not None and s.keep_attempt.seq == 2
    assert (s.keep_state, s.dispatch_state) == (AttemptState.RUNNING, DispatchState.STARTED)


def test_a_parked_job_of_a_dead_walk_is_adopted_as_interrupted_unless_pinned() -> None:
    item = slurm_item("10", "high-eur", HandleState.PENDING)
    a = attempt(1, HIGH, AttemptState.INTENT)
    s = settle(view(DispatchState.WALKING, a), [item], blind=frozenset(), resuming=False)
    assert (s.dispatch_state, s.keep_state) == (DispatchState.INTERRUPTED, AttemptState.PENDING)
    s = settle(view(DispatchState.WALKING, a, pinned=True), [item], blind=frozenset(), resuming=False)
    assert s.dispatch_state is DispatchState.STARTED  # P10: its pending job is the answer


def test_an_unrecorded_resource_is_the_newest_and_owned_by_the_last_attempt() -> None:
    item = vm_item("vm-9", ONDEMAND, HandleState.RUNNING)
    v = view(DispatchState.WALKING, attempt(1, SPOT, AttemptState.FAILED, name="vm-1"), attempt(2, ONDEMAND,
             AttemptState.INTENT, name="vm-2"))  # fmt: skip
    s = settle(v, [item], blind=frozenset(), resuming=False)
    assert s.keep == item and s.keep_attempt is not None and s.keep_attempt.seq == 2


def test_a_walk_that_died_with_nothing_live_is_interrupted_and_its_attempts_judged() -> None:
    v = view(DispatchState.WALKING, attempt(1, HIGH, AttemptState.INTENT))
    s = settle(v, [], blind=frozenset(), resuming=False)
    assert (s.verdict, s.dispatch_state) == (Verdict.WALK_DIED, DispatchState.INTERRUPTED)
    assert [a.seq for a in s.vanished] == [1]
    resumed = settle(v, [], blind=frozenset(), resuming=True)
    assert resumed.dispatch_state is None  # the resuming walker owns the state


def test_a_vanished_attempt_is_judged_by_the_providers_history() -> None:
    intent = attempt(1, HIGH, AttemptState.INTENT)
    assert needs_history(intent) and not needs_history(attempt(1, SPOT, AttemptState.INTENT))
    assert vanished(intent, False)[0] is Outcome.NOT_SUBMITTED  # P7: the tier may be tried again
    assert vanished(intent, True)[0] is Outcome.GONE
    assert vanished(intent, None, "timeout")[0] is Outcome.GONE  # unknown: never retry blindly
    assert vanished(attempt(1, HIGH, AttemptState.PENDING), None)[0] is Outcome.GONE


def test_a_started_dispatch_whose_job_left_has_ended() -> None:
    handle = Handle("fellows", LaneKind.SLURM, "10", HIGH.key, qos="high-eur")
    v = view(DispatchState.STARTED, attempt(1, HIGH, AttemptState.RUNNING, "10"), handle=handle)
    s = settle(v, [], blind=frozenset(), resuming=False)
    assert (s.verdict, s.dispatch_state) == (Verdict.ENDED, DispatchState.ENDED)


# --- what the job record on a made machine says (JobSeen) -----------------------------------------


def seen_vm(job: JobSeen, state: HandleState = HandleState.RUNNING) -> LiveItem:
    return vm_item("vm-1", SPOT, state)._replace(job=job)


def test_a_dead_walks_machine_with_no_job_is_released_and_its_rung_may_be_tried_again() -> None:
    made = attempt(1, SPOT, AttemptState.INTENT, name="vm-1")
    v = view(DispatchState.WALKING, made)
    s = settle(v, [seen_vm(JobSeen.NONE)], blind=frozenset(), resuming=False)
    assert s.not_launched == ((seen_vm(JobSeen.NONE), made),)
    # nothing else live: the walk died; the released machine's attempt is not judged vanished
    assert (s.verdict, s.dispatch_state, s.vanished) == (Verdict.WALK_DIED, DispatchState.INTERRUPTED, ())


def test_a_resume_keeps_the_machine_to_launch_the_job_on_it() -> None:
    v = view(DispatchState.WALKING, attempt(1, SPOT, AttemptState.INTENT, name="vm-1"))
    s = settle(v, [seen_vm(JobSeen.NONE)], blind=frozenset(), resuming=True)
    assert s.not_launched == () and s.verdict is Verdict.KEEP and s.dispatch_state is None


@pytest.mark.parametrize(
    ("job", "state"), [(JobSeen.UNKNOWN, DispatchState.INTERRUPTED), (JobSeen.RUNNING, DispatchState.STARTED)]
)
def test_a_dead_walks_machine_is_started_only_when_its_job_was_seen(job: JobSeen, state: DispatchState) -> None:
    v = view(DispatchState.WALKING, attempt(1, SPOT, AttemptState.INTENT, name="vm-1"))
    s = settle(v, [seen_vm(job)], blind=frozenset(), resuming=False)
    assert (s.verdict, s.dispatch_state, s.not_launched) == (Verdict.KEEP, state, ())
    if state is DispatchState.INTERRUPTED:
        assert s.message is not None and "eps execute --resume d1" in s.message


def test_a_started_machine_whose_job_ended_has_finished_though_it_still_runs() -> None:
    v = view(DispatchState.STARTED, attempt(1, SPOT, AttemptState.RUNNING, "vm-1", name="vm-1"))
    s = settle(v, [seen_vm(JobSeen.ENDED)], blind=frozenset(), resuming=False)
    assert (s.verdict, s.dispatch_state) == (Verdict.FINISHED, DispatchState.ENDED)
    assert s.release[0].handle.state is HandleState.FINISHED


def test_to_probe_names_what_settle_needs_read() -> None:
    running, starting = seen_vm(JobSeen.UNKNOWN), seen_vm(JobSeen.UNKNOWN, HandleState.STARTING)
    walking = view(DispatchState.WALKING, attempt(1, SPOT, AttemptState.INTENT, name="vm-1"))
    assert to_probe(walking, [running, starting], resuming=False) == (running,)
    assert to_probe(walking, [running], resuming=True) == ()  # a resume launches the job itself
    started = view(DispatchState.STARTED, attempt(1, HIGH, AttemptState.RUNNING, "7"))
    queued = slurm_item("7", "high-eur", HandleState.RUNNING)
    assert to_probe(started, [queued], resuming=True) == (queued,)  # its job may have ended
    assert to_probe(view(DispatchState.CANCELLED), [running], resuming=False) == ()


@pytest.mark.parametrize("state", [DispatchState.ENDED, DispatchState.CANCELLED])
def test_a_machine_kept_for_a_failed_pull_is_not_released(state: DispatchState) -> None:
    """Issue 19 (2): the pull of an ended job's outputs failed; its machine holds them."""
    items = [vm_item("vm-1", ONDEMAND, HandleState.RUNNING)]
    kept = attempt(1, ONDEMAND, AttemptState.ENDED, "vm-1")._replace(outcome=Outcome.KEPT.value)
    s = settle(view(state, kept), items, blind=frozenset(), resuming=False)
    assert (s.verdict, s.release) == (Verdict.NOTHING, ())
    ended = kept._replace(outcome=Outcome.ENDED.value)  # pulled: released as before
    s = settle(view(state, ended), items, blind=frozenset(), resuming=False)
    assert (s.verdict, s.release) == (Verdict.RELEASE, tuple(items))


@pytest.mark.parametrize(
    ("seen", "becomes"),
    [(HandleState.PENDING, None), (HandleState.RUNNING, DispatchState.STARTED)],
    ids=["still-queued", "left-its-queue"],
)
def test_a_pinned_job_that_left_its_queue_is_followed_as_started(
    seen: HandleState, becomes: DispatchState | None
) -> None:
    """A held dispatch (P10: pinned, its job in its queue) whose job the cluster lists running
    (RUNNING, or COMPLETING for as long as SLURM takes to clean up) becomes started: from then
    on its record is read and its end seen by its exit code, not when squeue forgets the job.
    Still queued, it stays held."""
    handle = Handle("fellows", LaneKind.SLURM, "7", HIGH.key, qos="high-eur", state=HandleState.PENDING)
    v = view(DispatchState.HELD, attempt(1, HIGH, AttemptState.PENDING, "7"), handle=handle, pinned=True)
    s = settle(v, [slurm_item("7", "high-eur", seen)], blind=frozenset(), resuming=False)
    assert (s.verdict, s.dispatch_state) == (Verdict.KEEP, becomes)
    assert s.keep is not None and s.keep.handle.id == "7"
