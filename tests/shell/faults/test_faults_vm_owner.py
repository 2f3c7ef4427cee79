"""Two state directories on one VM may give a dispatch the same id (``--dispatch-id``): each
finds, adopts and stops only its own job.  Found by the golden record of the front doors:
``eps cancel D`` in one state directory killed the VM job of the same id in another."""

from __future__ import annotations

import json
import os
from pathlib import Path

from faults_support import Eps, GcpTrap, RunpodTrap, wait_until


def _pid_of(eps: Eps, d: str) -> int:
    rc, out, err = eps.run("status", d, "--json")
    assert rc == 0, err
    [row] = [r for r in json.loads(out)["dispatches"] if r["dispatch"] == d]
    return int(row["handle"]["id"])


def test_a_cancel_stops_only_its_own_state_dirs_job_of_that_id(tmp_path: Path, gtrap: GcpTrap,
                                                               rtrap: RunpodTrap) -> None:  # fmt: skip
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = (Eps(tmp_path / n, gtrap.fake, rtrap.fake, detached=True) for n in ("a", "b"))
    try:
        for e in (a, b):
            rc, out, err = e.run("execute", "--detach", "--dispatch-id", "sameid7", "cpu-small", "--duration", "20s",
                                 "--pin", "vm", "--", "sleep 60")  # fmt: skip
            assert rc == 0, (out, err)
        wait_until(lambda: all(e.dispatch("sameid7")["state"] == "started" for e in (a, b)), 30, "both to start")
        pid_b = _pid_of(b, "sameid7")
        rc, out, err = a.run("cancel", "sameid7")
        assert rc == 0 and "cancelled sameid7" in out, (out, err)
        rc, out, err = a.run("reconcile", "--json")
        assert rc == 0, err
        report = json.loads(out)
        assert not any("sameid7" in str(x) for x in (*report["foreign"], *report["adopted"])), report  # not a's
        os.kill(pid_b, 0)  # b's job runs on
        assert b.dispatch("sameid7")["state"] == "started"
        rc, out, err = b.run("cancel", "sameid7")
        assert rc == 0, (out, err)
        wait_until(lambda: not Path(f"/proc/{pid_b}").exists() or _zombie(pid_b), 15, "b's job to stop")
    finally:
        a.close()
        b.close()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
