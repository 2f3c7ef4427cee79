"""A misconfigured free cluster is never a silent cost (issue 31), on the real SLURM cluster:
with a partition the cluster does not have, ``eps execute`` stops with the documented code
(78) and the fix and creates nothing on a paid lane (the GCP fake receives no insert),
``eps check`` exits non-zero naming the partition and the fix, ``eps plan`` marks the rungs,
``--fall-through`` goes on to GCP, and a fixed config clears the mark by itself."""

from __future__ import annotations

import datetime
import itertools
import json
import re
import subprocess
import sys
import time
import uuid

import pytest
from faults_support import ENTRY, KEY, Eps, GcpTrap, RunpodTrap, SlurmTrap, assert_no_orphans, squeue

from eps.core.contract import Exit

pytestmark = pytest.mark.slurm


def _wrong_partition(seps: Eps) -> None:
    seps.config.write_text(seps.config.read_text() + 'partition = "gpu"\n')  # the last [[clusters]]: fellows


def test_a_wrong_partition_stops_the_dispatch_with_the_fix_and_pays_for_nothing(
    seps: Eps, strap: SlurmTrap, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    _wrong_partition(seps)
    d = "f" + uuid.uuid4().hex[:10]
    rc, out, err = seps.run("execute", "--dispatch-id", d, "gpu-1", "--duration", "10m", "--wait", "--", "true")
    assert rc == Exit.MISCONFIGURED == 78, (out, err)
    assert "partition" in out and "sinfo -s" in out and "--fall-through" in out, out
    assert gtrap.inserts() == [] and gtrap.live() == []  # nothing on a paid lane
    assert [q for q, _ in strap.sbatches()] == ["high-eur"]  # refused once; no other tier, no other lane
    row = seps.dispatch(d)
    assert (row["state"], row["terminal"]) == ("failed", "misconfigured"), row
    assert squeue(f"eps-{d}") == []

    # eps plan marks the rungs the cluster refused (remembered on this host), and says what execute does
    rc, out, err = seps.run("plan", "gpu-1", "--duration", "10m", "--json")
    assert rc == 0, err
    marked = {r["qos"]: r["misconfigured"] for r in json.loads(out)["rungs"] if r["lane"] == "fellows"}
    assert marked["high-eur"] and "partition" in marked["high-eur"], marked
    rc, out, _ = seps.run("plan", "gpu-1", "--duration", "10m")
    assert "MISCONFIGURED" in out and "eps execute stops at the first of these" in out, out

    # eps check tests every tier with sbatch --test-only of the script eps would submit
    rc, out, err = seps.run("check", "--json")
    assert rc == 1, (out, err)
    [lane] = [r for r in json.loads(out)["lanes"] if r["lane"] == "fellows"]
    assert lane["usable"] is False and lane["problem"]["code"] == "misconfigured", lane
    assert "partition" in lane["fix"] and "sinfo -s" in lane["fix"], lane
    # low-eur has its own partition (general,overflow): only the tiers on the wrong one are refused
    assert [(t["qos"], t["ok"]) for t in lane["tiers"]] == [("high-eur", False), ("normal-eur", False),
                                                              ("low-eur", True)], lane["tiers"]  # fmt: skip
    assert all("Invalid partition" in t["text"] for t in lane["tiers"][:2]), lane["tiers"]
    assert_no_orphans(seps, gtrap, rtrap, slurm_prefix="eps-f")


def test_fall_through_skips_the_misconfigured_cluster_and_a_fixed_config_clears_the_mark(
    seps: Eps, strap: SlurmTrap, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    original = seps.config.read_text()
    _wrong_partition(seps)
    d = "f" + uuid.uuid4().hex[:10]
    rc, out, err = seps.run("execute", "--dispatch-id", d, "gpu-1", "--duration", "10m", "--fall-through", "--json",
                            "--", "sleep 60")  # fmt: skip
    assert rc == 0, (out, err)
    # the refused tiers are skipped; low-eur, on its own partition, takes the job: still free
    assert [q for q, _ in strap.sbatches()] == ["high-eur", "normal-eur", "low-eur"]
    assert seps.dispatch(d)["handle"]["qos"] == "low-eur" and gtrap.inserts() == []
    rc, out, err = seps.run("plan", "gpu-1", "--duration", "10m", "--json")
    assert any(r["misconfigured"] for r in json.loads(out)["rungs"]), out
    seps.run("cancel", d, "--json")

    seps.config.write_text(original)  # fixed: the cluster's answer was about a partition no longer asked for
    rc, out, err = seps.run("plan", "gpu-1", "--duration", "10m", "--json")
    assert rc == 0 and not any(r["misconfigured"] for r in json.loads(out)["rungs"]), out
    rc, out, err = seps.run("check", "--json")
    [lane] = [r for r in json.loads(out)["lanes"] if r["lane"] == "fellows"]
    assert lane["usable"] is True and all(t["ok"] for t in lane["tiers"]), lane


SLURMCTLD_LOG = "/var/lib/eps-test-slurm/log/slurmctld.log"


def _submitted_at(job_ids: set[str]) -> list[float]:
    """When the controller took each of ``job_ids`` (its own log, millisecond stamps)."""
    found = []
    pattern = re.compile(r"^\[(\S+)\] _slurm_rpc_submit_batch_job: JobId=(\d+) ")
    with open(SLURMCTLD_LOG, encoding="utf-8", errors="replace") as log:
        for line in log:
            m = pattern.match(line)
            if m and m[2] in job_ids:
                found.append(datetime.datetime.fromisoformat(m[1]).timestamp())
    return sorted(found)


def test_twenty_dispatches_at_once_reach_the_controller_paced(
    seps: Eps, strap: SlurmTrap, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    """The cluster's rule 4 (never a burst of sbatch): 20 `eps execute` processes started at the
    same moment against one cluster submit one at a time, at least the row's gap apart, as the
    controller's own log shows."""
    gap = 0.5
    seps.config.write_text(seps.config.read_text().replace("submit_gap = 0.2", f"submit_gap = {gap}"))
    ids = ["f" + uuid.uuid4().hex[:10] for _ in range(20)]
    argv = [sys.executable, "-c", ENTRY, "execute", "--json", "gpu-1", "--pin", "fellows", "--duration", "10m"]
    procs = [
        subprocess.Popen([*argv, "--dispatch-id", d, "--", "sleep 30"], env=seps.env, cwd=seps.tmp,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for d in ids
    ]  # fmt: skip
    started = time.time()
    try:
        results = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), [r[1][-300:] for r in results]
    job_ids = {str(seps.dispatch(d)["handle"]["id"]) for d in ids}
    assert len(job_ids) == 20
    stamps = _submitted_at(job_ids)
    assert len(stamps) == 20 and stamps[0] >= started - 1, stamps
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    # the pace is kept from the end of one sbatch to the start of the next: at the controller each
    # is at least the gap apart, less the few milliseconds of one sbatch's own start-up jitter
    assert min(gaps) >= gap - 0.05, [round(g, 3) for g in gaps]
    assert len(strap.sbatches()) == 20  # one submission each, no retry burst
    seps.run("cancel", "--all", "--json")  # one eps start-up, not twenty
    assert_no_orphans(seps, gtrap, rtrap, slurm_prefix="eps-f")


def test_a_local_sbatch_hands_the_job_none_of_eps_credentials(seps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    """sbatch exports the environment of whoever runs it into the job (the cluster's rule 1
    forbids --export=): on a login without ssh, the job must still see none of the credentials
    eps runs with (RunPod's key, the storage keys), nor must the controller keep them."""
    secrets = {"AWS_SECRET_ACCESS_KEY": "awsSECRETfaults0123", "AWS_ACCESS_KEY_ID": "AKIAFAULTSUITE0001"}
    d = "f" + uuid.uuid4().hex[:10]
    rc, out, err = seps.run("execute", "--dispatch-id", d, "gpu-1", "--duration", "10m", "--wait",
                            "--", 'env > "$EPS_OUTPUT_DIR/env.txt"', env=secrets)  # fmt: skip
    assert rc == 0, (out, err)
    seen = (seps.state / "outputs" / d / "env.txt").read_text()
    assert "SLURM_JOB_ID=" in seen  # it ran under sbatch, and its environment was written
    for value in (KEY, *secrets.values()):
        assert value not in seen
    assert_no_orphans(seps, gtrap, rtrap, slurm_prefix="eps-f")


def test_a_pinned_job_that_ends_at_once_is_seen_ended_at_the_polls_pace(
    seps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    """A pinned dispatch (P10) is held on its queue, and only its cluster says when it starts:
    it is asked at the poll's pace, not only at the follow's minute-long reconcile (a job of
    one second waited about 65 s). The bound is generous (45 s), the old pace was over 60 s."""
    d = "f" + uuid.uuid4().hex[:10]
    t0 = time.monotonic()
    rc, out, err = seps.run("execute", "--dispatch-id", d, "gpu-1", "--pin", "fellows", "--duration", "10m",
                            "--wait", "--", 'echo hi > "$EPS_OUTPUT_DIR/x"', timeout_s=120)  # fmt: skip
    took = time.monotonic() - t0
    assert rc == 0, (out, err)
    assert (seps.state / "outputs" / d / "x").read_text() == "hi\n"
    assert took < 45, took
    assert_no_orphans(seps, gtrap, rtrap, slurm_prefix="eps-f")
