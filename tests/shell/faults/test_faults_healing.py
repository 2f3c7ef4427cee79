"""Jobs that heal (issue 20): a restartable job whose spot VM is taken back, or whose VM
stops answering ssh while the provider says it runs (wedged), is relaunched by its
supervisor with no further command, on another rung, from the outputs synced so far.

The fake's "machine" is this test sshd, so the VM's death is played in full: the provider
takes it back (the fake deletes it, as ``instanceTerminationAction: DELETE`` does) and what
ran on it dies with its disk (its processes killed, its dispatch root removed).  A wedged
VM is one whose ``natIP`` the fake points at an address where nothing listens, its status
still RUNNING (eps asks the provider for the address at each look)."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path

import pytest
from faults_support import (
    COUNTER,
    ZONES,
    DetachedEps,
    Eps,
    GcpTrap,
    RunpodTrap,
    assert_counter_resumed,
    assert_no_orphans,
    dies_with_its_disk,
    gcp_fake,
    ssh_support,
    wait_synced,
    wait_until,
)


@pytest.fixture
def eps(detached_eps: DetachedEps) -> Eps:
    return detached_eps()


def test_a_preempted_restartable_job_resumes_elsewhere_from_its_synced_checkpoint(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    child = eps.start("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "30m",
                      "--restartable", "--pin", "gcp", "--sync-every", "1s", "--", COUNTER)  # fmt: skip
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    synced = eps.state / "outputs" / d / "ckpt"
    wait_synced(synced, 3)
    [(zone, name)] = [k for k in gtrap.fake.instances if d in k[1]]
    assert gtrap.fake.instances[(zone, name)]["scheduling"]["provisioningModel"] == "SPOT"
    gtrap.fake.preempt(zone, name)  # DELETE: the VM and its disk are gone
    dies_with_its_disk(tmp_path / "gcp-runs" / d)
    assert child.wait(180) == 0  # no further command: relaunched, resumed, ended
    out = eps.state / "outputs" / d
    assert_counter_resumed((out / "ckpt").read_text(), (out / "starts").read_text())
    row = eps.dispatch(d)
    assert row["state"] == "ended" and row["exit_code"] == 0
    rungs = [(a["rung"], a["state"], a["outcome"]) for a in eps.attempts(d)]
    assert len(rungs) == 2 and rungs[0][2] == "preempted", rungs
    assert rungs[1][0] != rungs[0][0]  # planned again from what the preemption taught (P11: another zone)
    assert gtrap.live(d) == []
    assert_no_orphans(eps, gtrap, rtrap)


def test_a_preempted_job_that_is_not_restartable_is_not_relaunched(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    child = eps.start("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "10m",
                      "--pin", "gcp", "--", "sleep 300")  # fmt: skip
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    [(zone, name)] = [k for k in gtrap.fake.instances if d in k[1]]
    gtrap.fake.preempt(zone, name)
    dies_with_its_disk(tmp_path / "gcp-runs" / d)
    rc = child.wait(120)
    assert rc != 0
    assert eps.dispatch(d)["state"] == "preempted"
    assert len(eps.attempts(d)) == 1


# --- wedged machines ---------------------------------------------------------------------------

#: Where the fake points a wedged VM's natIP: nothing listens there (ssh: connection refused).
NOWHERE = "127.0.0.9"


def _wedge_s(eps: Eps, seconds: int) -> None:
    """``[jobs] wedge_s`` for this test (before the first command starts the supervisor)."""
    _jobs_setting(eps, "wedge_s", seconds)


def _jobs_setting(eps: Eps, key: str, value: int) -> None:
    """``[jobs] key = value`` for this test (before the first command starts the supervisor)."""
    eps.config.write_text(eps.config.read_text().replace("[jobs]\n", f"[jobs]\n{key} = {value}\n", 1))


def _ssh_at(gtrap: GcpTrap, zone: str, name: str, ip: str) -> None:
    """The VM answers ssh at ``ip`` from now on; the provider still says RUNNING."""
    with gtrap.fake._lock:
        instance = gtrap.fake.instances[(zone, name)]
        assert instance["status"] == "RUNNING", instance["status"]
        instance["networkInterfaces"][0]["accessConfigs"][0]["natIP"] = ip


def test_a_machine_that_stops_answering_ssh_is_released_after_wedge_s_and_its_job_relaunched(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    _wedge_s(eps, 5)
    d = "f" + uuid.uuid4().hex[:10]
    first_run_hangs = (
        'if [ "$EPS_RESTART_COUNT" = 0 ]; then sleep 300; fi; echo "run $EPS_RESTART_COUNT" > "$EPS_OUTPUT_DIR/x"'
    )
    child = eps.start("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "30m",
                      "--restartable", "--pin", "gcp", "--", first_run_hangs)  # fmt: skip
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    [(zone, name)] = [k for k in gtrap.fake.instances if d in k[1]]
    # the VM dies with its delete (what ran on it goes with its disk), not before
    gtrap.arm("DELETE", f"/instances/{name}$", "after", lambda: dies_with_its_disk(tmp_path / "gcp-runs" / d))
    cut = time.monotonic()
    _ssh_at(gtrap, zone, name, NOWHERE)
    wedged = child.wait_event(lambda e: e.get("event") == "wedged", 60, "the machine to be found wedged")
    took = time.monotonic() - cut
    assert 5 <= took < 45, took  # two looks that failed (a few seconds each) and a reconcile between
    assert f"its machine {name} was unreachable over ssh for" in wedged["message"], wedged
    assert "while the provider said running; released, handled as an interruption" in wedged["message"], wedged
    assert gtrap.fired and gtrap.fired[0].startswith("after DELETE"), gtrap.fired  # the fake saw the delete
    assert child.wait(120) == 0  # no further command: relaunched elsewhere, ended
    assert (eps.state / "outputs" / d / "x").read_text() == "run 1\n"
    kinds = [e["event"] for e in child.events]
    assert kinds.index("wedged") < kinds.index("relaunched"), kinds
    attempts = eps.attempts(d)
    assert [(a["state"], a["outcome"]) for a in attempts] == [("gone", "wedged"), ("ended", "ended")], attempts
    assert "unreachable over ssh for" in attempts[0]["reason"] and attempts[0]["handle"] == name
    assert attempts[1]["rung"] != attempts[0]["rung"]
    row = eps.dispatch(d)
    assert row["state"] == "ended" and row["exit_code"] == 0
    assert gtrap.live(d) == []
    assert_no_orphans(eps, gtrap, rtrap)


def test_a_machine_that_answers_again_within_wedge_s_is_kept(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    """Unreachable twice for less than ``wedge_s`` (longer than it in all): each time it
    answers again the clock starts again, and the job ends on its first machine."""
    _wedge_s(eps, 20)
    go = tmp_path / "go"
    d = "f" + uuid.uuid4().hex[:10]
    child = eps.start("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "30m",
                      "--restartable", "--pin", "gcp", "--",
                      f'while [ ! -e {go} ]; do sleep 0.2; done; echo done > "$EPS_OUTPUT_DIR/x"')  # fmt: skip
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    [(zone, name)] = [k for k in gtrap.fake.instances if d in k[1]]
    for _ in range(2):  # 11 s each (a look that fails takes up to ~4 s more): never 20 s at once
        _ssh_at(gtrap, zone, name, NOWHERE)
        time.sleep(11)
        _ssh_at(gtrap, zone, name, ssh_support.VM_IP)
        time.sleep(6)  # the supervisor reaches it again: its clock starts again
    assert [k for k in gtrap.fake.instances if d in k[1]] == [(zone, name)] and gtrap.live(d)
    go.touch()
    assert child.wait(60) == 0
    assert (eps.state / "outputs" / d / "x").read_text() == "done\n"
    assert "wedged" not in [e["event"] for e in child.events]
    assert [(a["state"], a["outcome"]) for a in eps.attempts(d)] == [("ended", "ended")]
    assert gtrap.live(d) == []
    assert_no_orphans(eps, gtrap, rtrap)


# --- waiting for capacity ----------------------------------------------------------------------

RUNPOD_CPU_FLAVORS = ("cpu3c", "cpu3g", "cpu3m", "cpu5c", "cpu5g", "cpu5m")


def _no_capacity_anywhere(gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    for zone in ZONES:
        gtrap.fake.always(zone, gcp_fake.exhausted(gtrap.fake.project, zone))
    with rtrap.fake.lock:
        rtrap.fake.stock.update(dict.fromkeys(RUNPOD_CPU_FLAVORS, 0))


def _capacity_back(gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    for zone in ZONES:
        gtrap.fake.always(zone, gcp_fake.Created())
    with rtrap.fake.lock:
        for flavor in RUNPOD_CPU_FLAVORS:
            rtrap.fake.stock.pop(flavor, None)


def test_no_capacity_waits_and_starts_without_a_command_when_capacity_is_back(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    """Every GCP zone and RunPod flavor exhausted, ``--retry no-capacity``: execute says the
    dispatch waits (exit 75, nothing live); its supervisor is SIGKILLed and revived by eps
    status; capacity comes back; within one retry interval the supervisor plans again from
    the top and the job runs to its end."""
    _jobs_setting(eps, "capacity_wait_s", 20)  # the first wait (30 s unless set): the checks below, under load too
    _no_capacity_anywhere(gtrap, rtrap)
    d = "f" + uuid.uuid4().hex[:10]
    rc, out, err = eps.run("execute", "--dispatch-id", d, "cpu-small", "--duration", "10m", "--retry",
                           "no-capacity", "--retry-for", "10m", "--", 'echo back > "$EPS_OUTPUT_DIR/x"',
                           timeout_s=120)  # fmt: skip
    assert rc == 75, (out, err)
    assert f"{d} waiting:" in out, out
    row = eps.dispatch(d)
    assert row["state"] == "waiting" and row["capacity_waits"] == 1 and row["next_try_at"] > time.time()
    first_round = len(eps.attempts(d))
    assert first_round >= len(ZONES) + 1 and all(a["state"] == "failed" for a in eps.attempts(d))
    assert gtrap.live(d) == [] and rtrap.live(d) == []
    rc, doc, _ = eps.run("status", d, "--json")
    [status] = json.loads(doc)["dispatches"]
    assert status["state"] == "waiting" and status["next_try_at"] == pytest.approx(row["next_try_at"])
    eps.kill_supervisor()  # the wait is in the ledger: the next eps command revives it
    rc, _, err = eps.run("status")
    assert rc == 0 and eps.supervisor_pid() is not None, err
    _capacity_back(gtrap, rtrap)
    wait_until(lambda: eps.dispatch(d)["state"] in ("started", "ended"), row["next_try_at"] - time.time() + 30,
               "the dispatch to start on its next try")  # fmt: skip
    rc, out, err = eps.run("wait", d, timeout_s=120)
    assert rc == 0, (out, err)
    assert (eps.state / "outputs" / d / "x").read_text() == "back\n"
    attempts = eps.attempts(d)
    assert len(attempts) == first_round + 1 and attempts[-1]["state"] == "ended"
    assert attempts[-1]["rung"] == attempts[0]["rung"]  # planned again from the top: what it learnt was forgotten
    assert_no_orphans(eps, gtrap, rtrap)


def test_no_capacity_ever_ends_exhausted_when_retry_for_has_passed(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    _jobs_setting(eps, "capacity_wait_s", 3)  # waits of 3, 6, 12 s...
    _no_capacity_anywhere(gtrap, rtrap)
    d = "f" + uuid.uuid4().hex[:10]
    began = time.monotonic()
    rc, out, err = eps.run("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "10m",
                           "--retry", "no-capacity", "--retry-for", "15s", "--", "true", timeout_s=180)  # fmt: skip
    took = time.monotonic() - began
    assert rc == 1, (out, err)
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds.count("waiting") >= 1 and kinds.count("trying_again") == kinds.count("waiting"), kinds
    assert kinds[-1] == "terminal" and events[-1]["terminal"] == "cpu_exhausted"
    row = eps.dispatch(d)
    assert row["state"] == "failed" and row["terminal"] == "cpu_exhausted"
    assert events[kinds.index("waiting")]["seconds"] == 3  # [jobs] capacity_wait_s
    assert 15 <= took < 100, took
    assert gtrap.live(d) == [] and rtrap.live(d) == []


def test_retry_no_capacity_is_refused_for_a_fan_out(eps: Eps) -> None:
    rc, out, err = eps.run("execute", "cpu-small", "--duration", "10m", "--count", "3", "--retry", "no-capacity",
                           "--", "true")  # fmt: skip
    assert rc == 2 and "--retry no-capacity is for one job" in err, (out, err)
    assert eps.dispatch_ids() == []


def test_a_failed_job_retried_on_error_is_relaunched_and_the_wait_gives_the_last_runs_code(eps: Eps) -> None:
    """``--retry error``: the first run exits 3, its outputs come back and go into the
    relaunch, which succeeds; ``execute --wait`` stays attached through the relaunch and
    leaves with the last run's code (0), not the first one's."""
    d = "f" + uuid.uuid4().hex[:10]
    line = ('n=$(cat "$EPS_OUTPUT_DIR/n" 2>/dev/null || echo 0); echo $((n+1)) > "$EPS_OUTPUT_DIR/n"; '
            'echo "run $EPS_RESTART_COUNT" >> "$EPS_OUTPUT_DIR/runs"; [ "$n" -ge 1 ] || exit 3')  # fmt: skip
    rc, out, err = eps.run("execute", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "20s",
                           "--retry", "error", "--max-restarts", "2", "--", line, timeout_s=120)  # fmt: skip
    assert rc == 0, (out, err)
    got = eps.state / "outputs" / d
    assert (got / "n").read_text() == "2\n" and (got / "runs").read_text() == "run 0\nrun 1\n"
    row = eps.dispatch(d)
    assert row["state"] == "ended" and row["exit_code"] == 0
    assert json.loads(row["job"])["restart"] == 1


# --- the supervisor SIGKILLed while it heals ---------------------------------------------------


def _revive(eps: Eps) -> None:
    rc, out, err = eps.run("status")
    assert rc == 0, (out, err)


def test_supervisor_killed_during_a_relaunch(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path) -> None:
    """The preempted job's relaunch is creating its new VM when the supervisor is SIGKILLed
    (the insert applied, its answer never read): the revived supervisor adopts that VM (no
    third one), resumes from the synced checkpoint and ends 0; one machine live at a time."""
    d = "f" + uuid.uuid4().hex[:10]
    rc, out, err = eps.run("execute", "--detach", "--dispatch-id", d, "cpu-small", "--duration", "30m",
                           "--restartable", "--pin", "gcp", "--sync-every", "1s", "--", COUNTER)  # fmt: skip
    assert rc == 0, (out, err)
    synced = eps.state / "outputs" / d / "ckpt"
    wait_until(lambda: synced.exists() and synced.read_text().strip() not in ("", "1", "2"), 60, "a synced checkpoint")
    [(zone, name)] = [k for k in gtrap.fake.instances if d in k[1]]
    gtrap.arm("POST", r"/instances$", "after", eps.kill_supervisor)
    gtrap.fake.preempt(zone, name)
    dies_with_its_disk(tmp_path / "gcp-runs" / d)
    wait_until(lambda: gtrap.fired != [], 60, "the relaunch's insert")
    wait_until(lambda: eps.supervisor_pid() is None, 10, "the supervisor to be gone")
    assert len(gtrap.materialized) == 2 and len(gtrap.live(d)) == 1  # the old one gone, the new one made
    _revive(eps)
    rc, out, err = eps.run("wait", d, timeout_s=120)
    assert rc == 0, (out, err)
    assert (eps.state / "outputs" / d / "ckpt").read_text() == "16\n"
    assert len(gtrap.materialized) == 2 and gtrap.live(d) == []
    assert_no_orphans(eps, gtrap, rtrap)


def test_supervisor_killed_while_it_syncs(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    """SIGKILL in the middle of a checkpoint sync (rsync's temp file half written): nothing is
    lost or made twice; the revived supervisor syncs on, and the final pull is whole."""
    d = "f" + uuid.uuid4().hex[:10]
    job = ('head -c 150000000 /dev/urandom > "$EPS_OUTPUT_DIR/big"; '
           'sha256sum "$EPS_OUTPUT_DIR/big" | cut -d" " -f1 > "$EPS_OUTPUT_DIR/big.sha"; sleep 6')  # fmt: skip
    rc, out, err = eps.run("execute", "--detach", "--dispatch-id", d, "cpu-small", "--duration", "30m",
                           "--restartable", "--pin", "gcp", "--sync-every", "1s", "--", job)  # fmt: skip
    assert rc == 0, (out, err)
    out_dir = eps.state / "outputs" / d
    wait_until(lambda: out_dir.exists() and any(p.name.startswith(".") for p in out_dir.iterdir()), 60,
               "a sync in flight")  # fmt: skip
    eps.kill_supervisor()
    _revive(eps)
    rc, out, err = eps.run("wait", d, timeout_s=120)
    assert rc == 0, (out, err)
    got = hashlib.sha256((out_dir / "big").read_bytes()).hexdigest()
    assert got == (out_dir / "big.sha").read_text().strip()
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".")]  # no half-written file left
    assert len(gtrap.materialized) == 1 and gtrap.live(d) == []
    assert_no_orphans(eps, gtrap, rtrap)
