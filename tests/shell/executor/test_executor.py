"""`eps execute`, `status`, `cancel`, `reconcile` against the real VM lane and the local
GCP and RunPod servers: the walk, the ledger, failover, fan-out, crash recovery."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from executor_support import KEY, gcp_fake, runpod_fake, ssh_support

from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.shell.lanes.gcp.wire import instance_name
from eps.shell.state.ledger import Ledger


def _kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_p2_trivial_op_runs_on_the_vm_and_is_recorded(eps: Any) -> None:
    rc, events = eps.events("cpu-small", "--duration", "20s", "--", "sh", "-c", "echo from-the-vm")
    assert rc == 0
    assert _kinds(events) == ["dispatch", "attempt", "started"]
    d = events[-1]["dispatch"]
    h = events[-1]["handle"]
    assert h["lane"] == "vm"
    record = eps.state / "runs" / d / "0" / "exit-code"  # the job wrapper's own record
    deadline = time.monotonic() + 5
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    [row] = eps.status(d)  # the process has ended: status says so, with its exit code
    assert row["state"] == "ended" and row["message"].startswith("succeeded; outputs in ")
    assert row["attempts"][0]["state"] == "ended"
    assert "from-the-vm" in (eps.state / "logs" / f"{d}.log").read_text()  # the whole log, kept


def test_cancel_stops_a_vm_process(eps: Any) -> None:
    rc, events = eps.events("cpu-small", "--duration", "30s", "--", "sleep", "30")
    assert rc == 0
    d, pid = events[-1]["dispatch"], int(events[-1]["handle"]["id"])
    rc, _out, err = eps("cancel", d)
    assert rc == 0, err
    assert _wait_gone(pid)
    [row] = eps.status(d)
    assert row["state"] == "cancelled"


def test_p3_gcp_zone_failover_then_start(eps: Any, gcp: Any) -> None:
    gcp.program("us-central1-a", gcp_fake.exhausted(gcp.project, "us-central1-a"))
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", "sleep", "300")
    assert rc == 0, events
    failed = [e for e in events if e["event"] == "failed"]
    assert failed[0]["rung"] == "gcp/e2-standard-4/us-central1-a/spot" and failed[0]["kind"] == "zone_exhausted"
    started = events[-1]
    assert started["event"] == "started"
    assert started["handle"]["zone"] == "us-central1-b"
    assert len(gcp.instances) == 1
    [(zone, name)] = gcp.instances
    assert gcp.instances[(zone, name)]["labels"]["eps-dispatch"] == started["dispatch"]
    [row] = eps.status(started["dispatch"])
    assert [a["state"] for a in row["attempts"]] == ["failed", "running"]
    rc, _, err = eps("cancel", started["dispatch"])
    assert rc == 0, err
    assert gcp.instances == {}


def test_p3_gcp_cpu_exhausted_fails_over_to_runpod_cpu_pod(eps: Any, gcp: Any, runpod: Any) -> None:
    for zone in ("us-central1-a", "us-central1-b"):
        gcp.always(zone, gcp_fake.exhausted(gcp.project, zone))
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", "sleep", "300")
    assert rc == 0
    assert [e["kind"] for e in events if e["event"] == "failed"] == ["zone_exhausted"] * 4
    assert events[-1]["handle"]["lane"] == "runpod"
    [body] = runpod.created_bodies()
    assert body["cpu"] == {"id": "cpu3g", "vcpuCount": 4}
    assert len(runpod.live_pods()) == 1
    rc, _, _ = eps("cancel", events[-1]["dispatch"])
    assert rc == 0
    assert (
        all(
            p["desiredStatus"] in ("TERMINATED", "EXITED") or p.get("status") == "TERMINATED"
            for p in runpod.live_pods()
        )
        or runpod.live_pods() == []
    )


def test_cpu_exhausted_everywhere_is_terminal_and_nothing_is_left(eps: Any, gcp: Any, runpod: Any) -> None:
    for zone in ("us-central1-a", "us-central1-b"):
        gcp.always(zone, gcp_fake.exhausted(gcp.project, zone))
    runpod.stock.update({"cpu3g": 0, "cpu5g": 0})
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", "true")
    assert rc == 1
    assert events[-1]["event"] == "terminal" and events[-1]["terminal"] == "cpu_exhausted"
    assert gcp.instances == {} and runpod.live_pods() == []


def test_runpod_402_stops_with_the_providers_own_limit(eps: Any, gcp: Any, runpod: Any) -> None:
    for zone in ("us-central1-a", "us-central1-b"):
        gcp.always(zone, gcp_fake.exhausted(gcp.project, zone))
    runpod.insufficient_balance = True
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", "true")
    assert rc == 1
    stop = [e for e in events if e["event"] == "stopped"]
    assert stop and "RunPod" in stop[0]["message"]
    assert len(runpod.created_bodies()) == 1  # stopped: the second flavor was not tried


def test_gcp_auth_error_stops_the_walk(eps: Any, gcp: Any, runpod: Any) -> None:
    gcp.fail("POST", r"/instances", gcp_fake.forbidden(), times=5)
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", "true")
    assert rc == 1
    assert events[-1]["event"] == "stopped"
    assert runpod.created_bodies() == []


def test_p5_cpu_fan_out_gives_n_independent_dispatches(eps: Any, gcp: Any) -> None:
    rc, events = eps.events("cpu-small", "--duration", "30m", "--count", "3", "--", "sleep", "300")
    assert rc == 0
    started = [e for e in events if e["event"] == "started"]
    assert len(started) == 3
    assert len({e["dispatch"] for e in started}) == 3
    assert len(gcp.instances) == 3
    parent = next(e for e in events if e["event"] == "fanout")["dispatch"]
    rc, _, _ = eps("cancel", parent)
    assert rc == 0
    assert gcp.instances == {}


def _dead_walk_left_a_vm(gcp: Any, state: Path, dispatch: str) -> str:
    """The walk died between the insert and its record, before the job was launched: the
    ledger has the attempt (intent), GCP has the VM (up, with an external address)."""
    ledger = Ledger(str(state))
    job = Job("cpu-small", 1800, command=("echo from-the-adopted-vm",))
    rung = Rung(
        "gcp", LaneKind.GCP, Provisioning.SPOT, "x", machine="e2-standard-4", zone="us-central1-a", vcpus=4, mem_gb=16
    )
    ledger.new_dispatch(dispatch, job)
    name = instance_name(dispatch, rung, 1)
    ledger.begin_attempt(dispatch, rung, name)
    ledger.close()
    gcp.add_instance(
        "us-central1-a",
        {
            "name": name,
            "machineType": "zones/us-central1-a/machineTypes/e2-standard-4",
            "labels": {"eps-dispatch": dispatch},
            "metadata": {"items": [{"key": "eps-rung", "value": rung.key}]},
            "networkInterfaces": [{"accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}],
        },
    )
    return name


def test_a_dead_walks_vm_that_cannot_be_asked_is_kept_but_not_called_started(eps: Any, gcp: Any) -> None:
    """Reconcile cannot tell whether the job is on the VM (it does not answer ssh): the VM is
    kept and adopted, the dispatch is interrupted (not started), and --resume launches the
    job on that very VM once it answers: no second machine."""
    gcp.nat_ip = "127.0.0.9"  # nothing listens there
    name = _dead_walk_left_a_vm(gcp, eps.state, "ecrash00001")
    rc, out, err = eps("reconcile", "--json")
    assert rc == 0, err
    assert "ecrash00001:gcp:" + name in json.loads(out)["adopted"]
    [row] = eps.status("ecrash00001")
    assert row["state"] == "interrupted" and "--resume ecrash00001" in row["message"]
    assert row["attempts"][0]["handle"] == name and len(gcp.instances) == 1
    gcp.nat_ip = ssh_support.VM_IP
    gcp.set_status("us-central1-a", name, "RUNNING")  # its address now leads to a machine that answers
    rc, events = eps.events("--resume", "ecrash00001")
    assert rc == 0 and events[-1]["event"] == "started" and events[-1]["handle"]["id"] == name
    assert len(gcp.recorded("POST", r"/instances$")) == 0  # never submitted twice
    rc, out, err = eps("wait", "ecrash00001")
    assert rc == 0, (out, err)
    assert "from-the-adopted-vm" in (eps.state / "logs" / "ecrash00001.log").read_text()
    assert gcp.instances == {}


def test_a_dead_walks_vm_with_no_job_on_it_is_released(eps: Any, gcp: Any) -> None:
    """The VM answers and has no job: nobody will launch one (no eps owns the dispatch), so
    reconcile releases it rather than let it bill; the rung may be tried again (P7)."""
    name = _dead_walk_left_a_vm(gcp, eps.state, "ecrash00002")
    rc, out, err = eps("reconcile", "--json")
    assert rc == 0, err
    assert "ecrash00002:gcp:" + name in json.loads(out)["released"]
    assert gcp.instances == {}
    [row] = eps.status("ecrash00002")
    assert row["state"] == "interrupted"
    assert [(a["state"], a["outcome"]) for a in row["attempts"]] == [("cancelled", "not_launched")]
    rc, events = eps.events("--resume", "ecrash00002")
    assert rc == 0 and events[-1]["event"] == "started"
    assert events[-1]["handle"]["rung"] == "gcp/e2-standard-4/us-central1-a/spot"  # the same rung again
    assert events[-1]["handle"]["id"] != name


def test_reconcile_releases_what_a_cancelled_dispatch_left(eps: Any, gcp: Any) -> None:
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", "true")
    d = events[-1]["dispatch"]
    ledger = Ledger(str(eps.state))
    ledger.set_dispatch(d, "cancelled")
    ledger.close()
    assert len(gcp.instances) == 1
    rc, _out, err = eps("reconcile", "--json")
    assert rc == 0, err
    assert gcp.instances == {}


def test_a_second_executor_on_one_dispatch_is_refused(eps: Any) -> None:
    ledger = Ledger(str(eps.state))
    ledger.new_dispatch("ebusy000001", Job("cpu-small", 1800, command=("true",)))
    ledger.set_dispatch("ebusy000001", "interrupted")
    ledger.acquire("ebusy000001")  # this test process plays the first executor
    rc, _out, err = eps("execute", "--resume", "ebusy000001")
    ledger.close()
    assert rc == 2
    assert "being walked by another eps process" in err
    assert len(err.strip().splitlines()) == 1


def test_read_only_state_dir_is_one_clear_line_and_submits_nothing(eps: Any, gcp: Any, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root ignores directory modes; a file where the directory should be is read-only for everyone
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("")
        env = {"EPS_STATE_DIR": str(blocker / "state")}
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        env = {"EPS_STATE_DIR": str(ro / "state")}
    rc, _out, err = eps("execute", "cpu-small", "--duration", "30m", "--", "true", env=env)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and "state directory" in err
    assert gcp.recorded("POST", r"/instances") == []


def test_corrupt_ledger_is_one_clear_line(eps: Any, gcp: Any) -> None:
    eps.state.mkdir(parents=True, exist_ok=True)
    (eps.state / "ledger.sqlite3").write_bytes(b"this is not a database" * 100)
    rc, _out, err = eps("execute", "cpu-small", "--duration", "30m", "--", "true")
    assert rc == 2 and "corrupt" in err and len(err.strip().splitlines()) == 1
    assert gcp.recorded("POST", r"/instances") == []


def test_secrets_never_reach_output_or_the_ledger(eps: Any, gcp: Any, runpod: Any) -> None:
    for zone in ("us-central1-a", "us-central1-b"):
        gcp.always(zone, gcp_fake.exhausted(gcp.project, zone))
    runpod.echo_key_in_401 = True
    _, out, err = eps("execute", "--json", "cpu-small", "--duration", "30m", "--", "true")
    _, out2, err2 = eps("status", "--json")
    blob = out + err + out2 + err2
    for f in eps.state.rglob("*"):
        if f.is_file():
            blob += f.read_bytes().decode(errors="replace")
    assert KEY not in blob
    with sqlite3.connect(eps.state / "ledger.sqlite3") as db:
        rows = db.execute("SELECT * FROM attempts").fetchall()
    assert rows and KEY not in repr(rows)


def test_p11_preempted_spot_vm_is_reported_and_resume_goes_on_demand(eps: Any, gcp: Any) -> None:
    """A non-restartable job whose spot VM is taken back re-plans without spot (P11)."""
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", "sleep", "300")
    assert rc == 0
    d, h = events[-1]["dispatch"], events[-1]["handle"]
    assert h["rung"].endswith("/spot")
    [(zone, name)] = gcp.instances
    gcp.preempt(zone, name)  # instanceTerminationAction DELETE: the VM vanishes
    [row] = eps.status(d)
    assert row["state"] == "preempted" and "--resume" in row["message"]
    rc, events = eps.events("--resume", d)
    assert rc == 0, events
    assert events[-1]["event"] == "started"
    assert events[-1]["handle"]["rung"] == "gcp/e2-standard-4/us-central1-a/on-demand"
    assert len(gcp.instances) == 1


def test_p11_preempted_restartable_job_may_use_spot_in_another_zone(eps: Any, gcp: Any) -> None:
    rc, events = eps.events("cpu-small", "--duration", "5h", "--restartable", "--", "sleep", "300")
    assert rc == 0
    d = events[-1]["dispatch"]
    [(zone, name)] = gcp.instances
    gcp.preempt(zone, name)
    eps.status(d)
    rc, events = eps.events("--resume", d)
    assert rc == 0
    assert events[-1]["handle"]["rung"] == "gcp/e2-standard-4/us-central1-b/spot"


def test_a_finished_gcp_machine_is_deleted_not_left_billing(eps: Any, gcp: Any) -> None:
    """The job ran on the VM (over ssh, for real); once it ended, status pulls its outputs and
    whole log, records its exit code, and deletes the VM (disk too)."""
    line = 'echo result=42 > "$EPS_OUTPUT_DIR/r.txt"; echo done; exit 3'
    rc, events = eps.events("cpu-small", "--duration", "5h", "--", line)
    assert rc == 0
    d = events[-1]["dispatch"]
    [(zone, name)] = gcp.instances
    script = next(i["value"] for i in gcp.instances[(zone, name)]["metadata"]["items"] if i["key"] == "startup-script")
    assert "eps watcher" in script and "shutdown -h now" in script  # the VM's own guard
    deadline = time.monotonic() + 30
    while True:
        [row] = eps.status(d)
        if row["state"] == "ended" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert row["state"] == "ended" and gcp.instances == {}
    assert row["exit_code"] == 3 and "failed (exit 3)" in row["message"]
    assert (eps.state / "outputs" / d / "r.txt").read_text() == "result=42\n"
    assert "done" in (eps.state / "logs" / f"{d}.log").read_text()


def _ended_on_its_machine(eps: Any, d: str, lane_root: str) -> None:
    """Wait until the job wrote its end on its machine (this sshd, under ``lane_root``)."""
    done = eps.tmp / lane_root / d / "0" / "exit-code"
    deadline = time.monotonic() + 30
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.exists()


def test_a_vm_its_watcher_stopped_keeps_its_disk_and_eps_pull_brings_the_outputs_back(eps: Any, gcp: Any) -> None:
    """The linger passed with nobody pulling: the watcher powered the VM off (TERMINATED, its
    disk kept).  eps status answers at once: it says so and keeps the VM; eps pull starts it
    again, brings the outputs back, then deletes it."""
    line = 'echo kept > "$EPS_OUTPUT_DIR/r.txt"; exit 4'
    rc, events = eps.events("cpu-small", "--duration", "5h", "--", line)
    assert rc == 0
    d = events[-1]["dispatch"]
    [(zone, name)] = gcp.instances
    _ended_on_its_machine(eps, d, "gcp-runs")
    gcp.set_status(zone, name, "TERMINATED")  # the watcher: "the job ended and the linger has passed"
    [row] = eps.status(d)
    assert row["state"] == "ended" and "stopped, outputs not pulled" in row["message"], row
    assert f"eps pull {d}" in row["message"]
    assert gcp.instances[(zone, name)]["status"] == "TERMINATED"  # kept: only its disk bills
    assert gcp.recorded("POST", "/start$") == [] and gcp.recorded("DELETE", name) == []
    [row] = eps.status(d)  # asked again: still kept, still not started
    assert gcp.instances[(zone, name)]["status"] == "TERMINATED"
    rc, _, err = eps("pull", d)
    assert rc == 0, err
    assert len(gcp.recorded("POST", f"/instances/{name}/start$")) == 1
    assert gcp.instances == {}  # pulled, then deleted
    assert (eps.state / "outputs" / d / "r.txt").read_text() == "kept\n"
    [row] = eps.status(d)
    assert row["state"] == "ended" and row["exit_code"] == 4


def test_a_stopped_vm_that_cannot_boot_again_stays_stopped_until_a_later_pull(eps: Any, gcp: Any) -> None:
    rc, events = eps.events("cpu-small", "--duration", "5h", "--", 'echo x > "$EPS_OUTPUT_DIR/x"')
    d = events[-1]["dispatch"]
    [(zone, name)] = gcp.instances
    _ended_on_its_machine(eps, d, "gcp-runs")
    gcp.set_status(zone, name, "TERMINATED")
    gcp.program_starts(zone, gcp_fake.exhausted(gcp.project, zone))  # no capacity to boot it now
    rc, _, err = eps("pull", d)
    assert rc == 2 and "starting it again failed" in err and "resources" in err, err
    assert gcp.instances[(zone, name)]["status"] == "TERMINATED"  # its disk, and the outputs, kept
    rc, _, err = eps("pull", d)
    assert rc == 0, err
    assert gcp.instances == {} and (eps.state / "outputs" / d / "x").read_text() == "x\n"


def test_a_finished_spot_machine_is_not_mistaken_for_a_preemption(eps: Any, gcp: Any) -> None:
    _, events = eps.events("cpu-small", "--duration", "30m", "--", "true")
    d = events[-1]["dispatch"]
    [(zone, name)] = gcp.instances
    assert gcp.instances[(zone, name)]["scheduling"]["instanceTerminationAction"] == "DELETE"
    _ended_on_its_machine(eps, d, "gcp-runs")
    gcp.set_status(zone, name, "TERMINATED")  # preemption would delete it; this is the job's own shutdown
    [row] = eps.status(d)
    assert row["state"] == "ended" and "stopped, outputs not pulled" in row["message"]
    rc, _, err = eps("pull", d)
    assert rc == 0, err
    assert gcp.instances == {}


def test_an_exited_pod_is_started_again_pulled_and_terminated(eps: Any, gcp: Any, runpod: Any) -> None:
    for zone in ("us-central1-a", "us-central1-b"):
        gcp.always(zone, gcp_fake.exhausted(gcp.project, zone))
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", 'echo pod > "$EPS_OUTPUT_DIR/p"')
    assert rc == 0 and events[-1]["handle"]["lane"] == "runpod"
    d = events[-1]["dispatch"]
    _ended_on_its_machine(eps, d, "runpod-runs")
    with runpod.lock:
        [pod] = runpod.pods.values()
        runpod_fake._set_status(pod.doc, "EXITED")  # its watcher stopped it
    [row] = eps.status(d)
    assert row["state"] == "ended" and "stopped, outputs not pulled" in row["message"]
    assert [p["status"] for p in runpod.live_pods()] == ["EXITED"]
    rc, _, err = eps("pull", d)
    assert rc == 0, err
    assert runpod.count("POST", "/v2/pods/{id}/action") == 1
    assert runpod.live_pods() == []
    assert (eps.state / "outputs" / d / "p").read_text() == "pod\n"


def test_one_unreadable_ledger_row_does_not_stop_status_or_reconcile(eps: Any) -> None:
    rc, events = eps.events("cpu-small", "--duration", "30s", "--", "true")
    assert rc == 0
    good = events[-1]["dispatch"]
    rc, events = eps.events("cpu-small", "--duration", "30s", "--", "true")
    bad = events[-1]["dispatch"]
    deadline = time.monotonic() + 30  # its job (and wrapper) gone: nothing of it is live any more
    while not (eps.state / "runs" / bad / "0" / "exit-code").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    with sqlite3.connect(eps.state / "ledger.sqlite3") as db:
        db.execute("UPDATE dispatches SET handle='{\"half' WHERE id=?", (bad,))
    rc, out, err = eps("status", "--json")
    assert rc == 0, err
    assert [r["dispatch"] for r in json.loads(out)["dispatches"]] == [good]
    assert f"dispatch {bad}: its ledger row cannot be read" in err
    rc, out, err = eps("reconcile")
    assert rc == 0, (out, err)


def test_a_vm_job_does_not_inherit_eps_secrets(eps: Any) -> None:
    rc, events = eps.events(
        "cpu-small", "--duration", "30s", "--", "sh", "-c", 'echo "key=[${RUNPOD_API_KEY:-}] path=[${PATH:+set}]"'
    )
    assert rc == 0
    d = events[-1]["dispatch"]
    log = eps.state / "runs" / d / "0" / "job.log"
    deadline = time.monotonic() + 10
    while "path=" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "key=[] path=[set]" in log.read_text()


def test_a_runpod_key_with_a_control_character_is_refused_and_never_shown(eps: Any) -> None:
    bad = "rpa_SECRETKEY123\nX-Injected: 1"
    rc, out, err = eps("execute", "--json", "cpu-small", "--duration", "30m", "--pin", "runpod", "--", "true",
                       env={"RUNPOD_API_KEY": bad})  # fmt: skip
    assert rc == 1
    assert "control character" in out
    for text in (out, err, *(p.read_text() for p in (eps.state / "logs").glob("*"))):
        for form in (bad, "rpa_SECRETKEY123", repr(bad)[1:-1]):
            assert form not in text
    import sqlite3

    with sqlite3.connect(eps.state / "ledger.sqlite3") as db:
        dump = "\n".join(db.iterdump())
    assert "SECRETKEY" not in dump
