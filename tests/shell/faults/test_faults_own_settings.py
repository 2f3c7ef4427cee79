"""A dispatch carries its own settings, and a cancel keeps a result that was already there
(issue 32's two defects, found tried as a new user would):

- with a supervisor already serving the state directory under config A, a dispatch handed
  over under config B (a partition the cluster does not have) or with another
  ``EPS_FELLOWS_QUEUE_WAIT_SECONDS`` is walked with B's settings on the real SLURM cluster,
  not the supervisor's: plan equals execute;
- a job that ended 0 before ``eps cancel`` reached it keeps its result: ``eps wait`` exits 0
  and its outputs come back (on the GCP fake, the job running on the test sshd)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from faults_support import DetachedEps, Eps, GcpTrap, RunpodTrap, squeue, wait_until

from eps.core.contract import Exit


@pytest.fixture
def deps(detached_eps: DetachedEps, slurm_cluster: Path) -> Eps:
    return detached_eps(slurm=True, caps=(60, 30))


def _supervisor_pid(eps: Eps) -> int | None:
    path = eps.state / "supervisor.pid"
    return int(path.read_text()) if path.exists() else None


@pytest.mark.slurm
def test_a_dispatch_handed_to_a_running_supervisor_is_walked_with_its_own_settings(deps: Eps) -> None:
    keep = "f" + uuid.uuid4().hex[:10]  # keeps the supervisor (config A) serving meanwhile
    rc, out, err = deps.run("execute", "--detach", "--dispatch-id", keep, "gpu-1", "--duration", "10m", "--",
                            "sleep 120")  # fmt: skip
    assert rc == 0, (out, err)
    wait_until(lambda: _supervisor_pid(deps) is not None, 30, "the supervisor to serve")
    pid = _supervisor_pid(deps)

    other = deps.tmp / "other.toml"  # config B: a partition the cluster does not have
    other.write_text(deps.config.read_text() + 'partition = "nosuchpart"\n')
    rc, out, err = deps.run("plan", "gpu-1", "--duration", "10m", "--json", env={"EPS_CONFIG": str(other)})
    assert rc == 0 and "nosuchpart" not in out, out  # plan cannot know before the cluster says so
    d = "f" + uuid.uuid4().hex[:10]
    rc, out, err = deps.run("execute", "--dispatch-id", d, "gpu-1", "--duration", "10m", "--wait", "--", "true",
                            env={"EPS_CONFIG": str(other)})  # fmt: skip
    assert rc == Exit.MISCONFIGURED, (rc, out, err)  # B's partition, not the supervisor's A
    assert _supervisor_pid(deps) == pid  # the same supervisor walked it
    assert deps.dispatch(d)["terminal"] == "misconfigured"

    # another park cap in the caller's environment: the supervisor parks the job on B's cap
    d2 = "f" + uuid.uuid4().hex[:10]
    rc, out, err = deps.run("execute", "--detach", "--dispatch-id", d2, "gpu-8", "--duration", "10m", "--",
                            "sleep 60", env={"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "7"})  # fmt: skip
    assert rc == 0, (out, err)
    log = deps.state / "events" / f"{d2}.jsonl"

    def parked() -> dict | None:
        for line in log.read_text().splitlines() if log.exists() else []:
            ev = json.loads(line)
            if ev.get("event") == "parked":
                return ev
        return None

    ev = wait_until(parked, 60, "the gpu-8 job to park (the node holds the first job)")
    assert ev["cap_s"] == 7 and ev["rung"] == "fellows/high-eur/-/queue", ev  # not the supervisor's 60
    assert _supervisor_pid(deps) == pid
    for dispatch in (d2, keep):
        rc, out, err = deps.run("cancel", dispatch, "--json")
        assert rc == 0, (out, err)
    assert squeue(f"eps-{d2}") == [] and squeue(f"eps-{keep}") == []


def test_a_cancel_that_finds_the_job_already_ended_keeps_its_result(tmp_path: Path, gtrap: GcpTrap,
                                                                    rtrap: RunpodTrap, sshd: Path) -> None:  # fmt: skip
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, detached=True)
    try:
        # a slow follow: the job's end is there well before the supervisor looks again
        e.config.write_text(e.config.read_text().replace("wait_poll_s = 0.05", "wait_poll_s = 30"))
        d = "f" + uuid.uuid4().hex[:10]
        rc, out, err = e.run("execute", "--detach", "--dispatch-id", d, "cpu-small", "--duration", "10m", "--",
                             'echo done > "$EPS_OUTPUT_DIR/result.txt"')  # fmt: skip
        assert rc == 0, (out, err)
        wait_until(lambda: e.dispatch(d)["state"] == "started", 60, "the job to start")
        machine = gtrap.live(d)
        assert machine, "the job runs on a (fake) GCP VM"
        runs = tmp_path / "gcp-runs" / d  # its dispatch root on the (sshd) machine
        wait_until(lambda: list(runs.rglob("exit-code")), 60, "the job to end on its machine")
        rc, out, err = e.run("cancel", d, "--json")
        assert rc == 0, (out, err)
        doc = json.loads(out)
        assert d not in doc["cancelled"] and any("already ended" in f for f in doc["finished"]), doc
        rc, out, err = e.run("wait", d, "--timeout", "60s")
        assert rc == 0, (rc, out, err)  # the job's own exit code, not 130
        assert (e.state / "outputs" / d / "result.txt").read_text() == "done\n"
        assert e.dispatch(d)["state"] == "ended"
    finally:
        e.close()
