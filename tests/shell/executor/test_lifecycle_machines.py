"""A job runs for real on a GCP VM and on a RunPod pod (issue 12): eps makes the machine at
the provider's test server, whose address leads to the real test sshd; it reaches it with
its own key, ships the workdir (rsync), launches the job under its wrapper, follows it,
pulls the outputs and the whole log, records the job's own exit code, then releases the
machine.  Everything through ``eps`` commands, the way a user runs it."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_lifecycle_vm import _workdir

LANES = ("gcp", "runpod")


def _only(eps: Any, gcp: Any, lane: str) -> tuple[str, ...]:
    """The options that land the job on ``lane``: GCP first for CPU work; RunPod when pinned."""
    if lane == "runpod":
        return ("--pin", "runpod")
    return ()


def _live(gcp: Any, runpod: Any, lane: str) -> int:
    return len(gcp.instances) if lane == "gcp" else len(runpod.live_pods())


@pytest.mark.parametrize("lane", LANES)
def test_a_real_job_on_a_made_machine_end_to_end(eps: Any, gcp: Any, runpod: Any, tmp_path: Path, lane: str) -> None:
    wd = _workdir(tmp_path)
    rc, out, err = eps(
        "execute", "cpu-small", "--duration", "30m", *_only(eps, gcp, lane), "--workdir", str(wd),
        "--env", "MY_TOKEN", "--wait", "--", "python3", "job.py",
        env={"MY_TOKEN": "s3cr3t-value"},
    )  # fmt: skip
    assert rc == 3, (out, err)  # the job's own exit code
    [row] = eps.status()
    d = row["dispatch"]
    assert row["handle"]["lane"] == lane
    assert row["state"] == "ended" and row["message"].startswith("failed (exit 3)"), row
    assert _live(gcp, runpod, lane) == 0  # released after the pull: nothing keeps billing
    # the whole log, every line, from the copy eps pulled before releasing the machine
    rc, log, err = eps("logs", d)
    assert rc == 0, err
    assert [x for x in log.splitlines() if x.startswith("line ")] == [f"line {i}" for i in range(100_000)]
    assert "secret seen: True" in log
    # the outputs came back, byte for byte
    result = eps.state / "outputs" / d / "result.txt"
    assert hashlib.sha256(result.read_bytes()).digest() == hashlib.sha256(b"HELLO FROM THE DATA FILE\n" * 1000).digest()
    # on the machine: the ignore rules held (the dispatch root is under the configured work root)
    shipped = tmp_path / f"{lane}-runs" / d / "0" / "work"
    assert (shipped / "job.py").exists() and not (shipped / "big").exists() and not (shipped / "scratch.tmp").exists()
    # the value of --env is nowhere eps writes
    with sqlite3.connect(eps.state / "ledger.sqlite3") as db:
        assert "s3cr3t-value" not in "\n".join(db.iterdump())
    assert "s3cr3t-value" not in out + err


@pytest.mark.parametrize("lane", LANES)
def test_logs_and_ssh_while_the_job_runs_then_cancel(
    eps: Any, gcp: Any, runpod: Any, tmp_path: Path, lane: str, capfd: pytest.CaptureFixture[str]
) -> None:
    line = 'echo started; echo partial > "$EPS_OUTPUT_DIR/p.txt"; sleep 300'
    rc, out, err = eps("execute", "cpu-small", "--duration", "30m", *_only(eps, gcp, lane), "--", line)
    assert rc == 0, (out, err)
    [row] = eps.status()
    d = row["dispatch"]
    assert row["state"] == "started" and row["handle"]["lane"] == lane
    rc, log, err = eps("logs", d)
    assert rc == 0 and "started" in log, (log, err)
    rc, out, err = eps("pull", d)
    assert rc == 2 and "has not ended yet" in err  # outputs come back once the job ended
    capfd.readouterr()
    rc, _, err = eps("ssh", d, "--", "pwd; cat ../out/p.txt")  # ssh itself writes to the terminal
    assert rc == 0, err
    assert capfd.readouterr().out.splitlines() == [str(tmp_path / f"{lane}-runs" / d / "0" / "work"), "partial"]
    rc, out, err = eps("cancel", d)
    assert rc == 0, err
    assert _live(gcp, runpod, lane) == 0
    [row] = eps.status(d)
    assert row["state"] == "cancelled"


def test_a_machine_that_cannot_take_the_job_is_released_and_the_walk_goes_on(
    eps: Any, gcp: Any, runpod: Any, tmp_path: Path
) -> None:
    """The first GCP VM never lets eps in (its address leads nowhere): the VM is deleted, the
    rest of GCP is not tried (its machines would not let eps in either, P3 moves on), and the
    job starts on a RunPod pod.  Nothing is left billing on GCP."""
    gcp.nat_ip = "127.0.0.9"  # nothing listens there
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", "sleep 300")
    assert rc == 0, events
    failed = [e for e in events if e["event"] == "failed"]
    assert [e["rung"].split("/")[0] for e in failed] == ["gcp"]  # one GCP VM, not one per zone
    assert "the machine never let eps in" in failed[0]["message"] and "VM" in failed[0]["message"]
    assert "released" in failed[0]["message"]
    assert gcp.instances == {} and len(gcp.recorded("POST", r"/instances$")) == 1
    assert events[-1]["event"] == "started" and events[-1]["handle"]["lane"] == "runpod"
    assert len(runpod.live_pods()) == 1
