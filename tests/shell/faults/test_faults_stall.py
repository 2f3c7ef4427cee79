"""Stalled jobs (issue 34 item 2), for real: a job that prints a line and then sleeps, with
``--stall-after 20s``, watched by its own wrapper (:mod:`eps.core.stall`) where it runs.

- on the shared VM (a local job, the real supervisor, notifications to a real HTTP receiver
  on loopback): ``notify`` gives one ``stalled`` event and one message within 20 s plus one
  poll while the dispatch keeps running (``eps status`` says stalled, since when), and the
  job speaking again ends the spell; ``stop`` TERMs the job (its handler's output comes back),
  nothing of it is left running, the dispatch ends ``stalled`` and ``eps wait`` exits 125,
  told as "stopped by its stall watch"; with ``--retry stalled`` it is relaunched once;
- on a GCP VM (the fake's VM is the test sshd) a GPU job: no GPU is here, so a stand-in
  ``nvidia-smi`` first on the test machine's PATH prints NVIDIA's documented format
  (``--query-gpu=utilization.gpu --format=csv,noheader,nounits``: one integer per GPU per
  line) from a file the test writes; 0 % for the whole window is stalled, 80 % with a
  silent log is not;
- on the real SLURM cluster, the wrapper stops a stalled job with no eps process alive.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults_support import SHELL, Eps, GcpTrap, RunpodTrap, scancel_names, wait_until

_spec = importlib.util.spec_from_file_location("notify_support_for_stall", SHELL / "notify" / "notify_support.py")
assert _spec is not None and _spec.loader is not None
notify_support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(notify_support)

#: Prints a line, then is silent; a TERM handler leaves a file in the outputs (it must come back).
SILENT = 'echo hi; trap \'echo term > "$EPS_OUTPUT_DIR/term"; exit 3\' TERM; sleep 300 & wait'
WINDOW_S = 20
POLL_S = 2  # eps.core.stall.poll_s(20)
FOLLOW_S = 0.75  # the supervisor's looks at a job at most this far apart ([jobs] wait_poll_s = 0.05, x15)


@pytest.fixture
def http() -> Iterator[Any]:
    r = notify_support.HttpReceiver().start()
    yield r
    r.stop()


@pytest.fixture
def deps(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, sshd: Path, http: Any) -> Iterator[Eps]:
    """``eps`` with its real supervisor, telling the HTTP receiver."""
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, detached=True)
    with e.config.open("a") as fh:
        fh.write(notify_support.notify_config([http.url]))
    yield e
    e.close()


def _events(state: Path, d: str) -> list[dict[str, Any]]:
    path = state / "events" / f"{d}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _event(state: Path, d: str, name: str, timeout_s: float) -> dict[str, Any]:
    got: dict[str, Any] = wait_until(
        lambda: next((e for e in _events(state, d) if e["event"] == name), None), timeout_s, f"{name} of {d}", 0.1
    )
    return got


def _tagged(root: Path) -> list[int]:
    """Processes still carrying the job's tag (the wrapper's containment): none once it ended."""
    out = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if f"_eps_job={root.resolve()}".encode() in env.read_bytes().split(b"\0"):
                out.append(int(env.parent.name))
    return out


def test_a_silent_vm_job_is_told_stalled_once_stopped_with_exit_125_and_relaunched_once(
    deps: Eps, http: Any
) -> None:
    state = deps.state
    told, stopped, again = ("v" + uuid.uuid4().hex[:9] for _ in range(3))
    common = ("cpu-small", "--duration", "20s", "--time-limit", "90s", "--stall-after", "20s")
    # notify: silent 36 s (16 s past its stall_after: room for two status calls on a busy machine),
    # then it speaks again and ends 0 five seconds later
    for d, more, line in (
        (told, (), 'echo hi; sleep 36; echo again; sleep 5; echo done > "$EPS_OUTPUT_DIR/done"'),
        (stopped, ("--on-stall", "stop"), SILENT),
        (again, ("--on-stall", "stop", "--retry", "stalled", "--max-restarts", "1"),
         'if [ "$EPS_RESTART_COUNT" = 1 ]; then echo second > "$EPS_OUTPUT_DIR/second"; exit 0; fi; ' + SILENT),
    ):  # fmt: skip
        rc, out, err = deps.run("execute", "--detach", "--dispatch-id", d, *common, *more, "--", line)
        assert rc == 0, (out, err)

    started = _event(state, told, "started", 30)
    root = state / "runs" / told / "0"
    t0 = float((root / "started-at").read_text())
    stalled = _event(state, told, "stalled", WINDOW_S + 15)
    # the silence began with the job's first line (soon after it started; later on a loaded
    # machine), and is told within the window plus one poll of the watch (and one look of
    # the supervisor's) after it began, never before the window
    assert t0 - 1 <= stalled["since"] <= t0 + WINDOW_S / 2, (stalled, t0)
    assert stalled["ts"] - stalled["since"] <= WINDOW_S + POLL_S + FOLLOW_S + 2.5, stalled  # 2.5: a busy CI
    assert stalled["ts"] - stalled["since"] >= WINDOW_S - 1, stalled
    assert stalled["on_stall"] == "notify", stalled
    assert "nothing from the job" in stalled["message"] and started["dispatch"] == told
    assert not (root / "exit-code").exists()  # the dispatch keeps running
    rc, out, err = deps.run("status", told, "--json")
    assert rc == 0, err
    [row] = [r for r in json.loads(out)["dispatches"] if r["dispatch"] == told]
    assert (row["result"], row["stalled_since"]) == ("stalled", stalled["since"]), row
    rc, out, err = deps.run("status", told)
    assert rc == 0 and "stalled since" in out, (out, err)
    notify_support.wait_for(lambda: f"eps {told}: stalled" in http.titles(), 5, "the stalled message")

    # stop: the wrapper TERMs it; outputs back, nothing left running, ended stalled, exit 125
    rc, out, err = deps.run("wait", stopped, timeout_s=90)
    assert rc == 125, (out, err)
    assert (state / "outputs" / stopped / "term").read_text() == "term\n"  # what its TERM handler wrote
    sroot = state / "runs" / stopped / "0"
    assert (sroot / "status").read_text().strip() == "stalled"
    assert _tagged(sroot) == []
    assert "eps: stopping the job (on_stall = stop)" in (state / "logs" / f"{stopped}.log").read_text()
    rc, out, err = deps.run("status", stopped, "--json")
    [row] = [r for r in json.loads(out)["dispatches"] if r["dispatch"] == stopped]
    assert (row["state"], row["result"], row["exit_code"]) == ("ended", "stalled", 125), row

    # --retry stalled: relaunched once, and the second run ends by itself
    rc, out, err = deps.run("wait", again, timeout_s=90)
    assert rc == 0, (out, err)
    assert [e["restart"] for e in _events(state, again) if e["event"] == "relaunched"] == [1]
    assert (state / "outputs" / again / "second").read_text() == "second\n"

    # notify: the job spoke again, the spell is over; it ended 0
    rc, out, err = deps.run("wait", told, timeout_s=60)
    assert rc == 0, (out, err)
    assert [e["event"] for e in _events(state, told) if e["event"].startswith("stall")] == ["stalled", "stall_over"]
    assert (state / "outputs" / told / "done").read_text() == "done\n"

    want = {f"eps {told}: stalled", f"eps {told}: ended 0", f"eps {stopped}: stopped by its stall watch (exit 125)",
            f"eps {again}: relaunched", f"eps {again}: ended 0"}  # fmt: skip
    notify_support.wait_for(lambda: want <= set(http.titles()), 20, "the messages")
    titles = http.titles()
    assert titles.count(f"eps {told}: stalled") == 1 and titles.count(f"eps {again}: stalled") == 1, titles
    assert not any("failed" in t for t in titles), titles
    wait_until(lambda: deps.supervisor_pid() is None, 30, "the supervisor to leave")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--stall-after", "soon"), "stall_after"),
        (("--stall-after", "-5"), "negative"),
        (("--on-stall", "kill"), "on_stall must be notify or stop"),
    ],
)
def test_bad_stall_options_are_one_line_exit_2_and_nothing_written(
    eps: Eps, tmp_path: Path, argv: tuple[str, ...], says: str
) -> None:
    rc, out, err = eps.run("execute", "cpu-small", "--duration", "20s", *argv, "--", "true")
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, (rc, out, err)
    assert _dispatches(tmp_path / "state") == [] and not (tmp_path / "state" / "runs").exists()
    job = tmp_path / "job.toml"
    job.write_text('intent = "cpu-small"\nstall_after = "soon"\ncommand = "true"\n')
    rc, out, err = eps.run("execute", "--job", str(job))
    assert rc == 2 and "@ $.stall_after" in err and len(err.strip().splitlines()) == 1, (out, err)
    assert _dispatches(tmp_path / "state") == [] and not (tmp_path / "state" / "runs").exists()


def _dispatches(state: Path) -> list[str]:
    if not (state / "ledger.sqlite3").exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{state / 'ledger.sqlite3'}?mode=ro", uri=True)) as db:
        return [r[0] for r in db.execute("SELECT id FROM dispatches")]


# --- a GPU job on a GCP VM (the test sshd): a stand-in nvidia-smi -------------------------------

#: The test machine's PATH (sshd's for root) starts here; nothing else of this machine is there.
STAND_IN = Path("/usr/local/sbin/nvidia-smi")
#: No GPU is here.  The stand-in prints what NVIDIA documents for
#: ``nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits`` (one integer per GPU
#: per line) from the file ``gpu-util`` the test writes in the job's dispatch root; for any
#: other job (no such file) it fails as nvidia-smi does on a machine without a driver.
STAND_IN_TEXT = """#!/bin/sh
# eps test stand-in (tests/shell/faults/test_faults_stall.py): no GPU is here
f="${EPS_OUTPUT_DIR%/out}/gpu-util"
[ "$1" = --query-gpu=utilization.gpu ] && [ "$2" = --format=csv,noheader,nounits ] && [ -f "$f" ] && exec cat "$f"
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2
exit 9
"""


@pytest.fixture
def nvidia_smi() -> Iterator[Path]:
    if STAND_IN.exists() and "eps test stand-in" not in STAND_IN.read_text():
        pytest.skip(f"{STAND_IN} is a real program here")
    STAND_IN.write_text(STAND_IN_TEXT)
    STAND_IN.chmod(0o755)
    yield STAND_IN
    STAND_IN.unlink(missing_ok=True)


def test_a_gpu_job_at_0_percent_is_stalled_and_one_at_80_with_a_silent_log_is_not(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path, nvidia_smi: Path
) -> None:
    idle, busy = ("f" + uuid.uuid4().hex[:9] for _ in range(2))
    job = ("gpu-1", "--duration", "30s", "--time-limit", "60s", "--stall-after", "20s", "--on-stall", "stop")
    children = [eps.start("execute", "--json", "--dispatch-id", d, *job, "--", "echo hi; sleep 27")
                for d in (idle, busy)]
    for d, util in ((idle, "0\n0\n"), (busy, "0\n80\n")):  # two GPUs each
        root = tmp_path / "gcp-runs" / d / "0"
        wait_until((root / "run.sh").exists, 60, f"the wrapper of {d} on the VM")
        (root / "gpu-util").write_text(util)  # what the stand-in prints, from the watch's first looks on
    for child in children:
        assert child.wait(60) == 0, (child.lines, child.err)
    rc, out, err = eps.run("wait", idle, timeout_s=90)
    assert rc == 125, (out, err)
    log = (eps.state / "logs" / f"{idle}.log").read_text()
    assert "eps: stalled: every GPU at 0 % for 20 s" in log, log  # read from the GPUs, not the log
    rc, out, err = eps.run("wait", busy, timeout_s=90)
    assert rc == 0, (out, err)  # 80 % on one GPU: busy all along, though its log said nothing
    log = (eps.state / "logs" / f"{busy}.log").read_text()
    assert "stalled" not in log.replace("job ended: exited", ""), log
    assert gtrap.live(idle) == [] and gtrap.live(busy) == []


# --- the real SLURM cluster: no eps process alive ---------------------------------------------


@pytest.mark.slurm
def test_a_stalled_slurm_job_is_stopped_by_its_wrapper_with_no_eps_alive(seps: Eps, tmp_path: Path) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    rc, events, err = seps.execute("--dispatch-id", d, "gpu-1", "--pin", "fellows", "--duration", "1m",
                                   "--stall-after", "20s", "--on-stall", "stop", "--", SILENT)  # fmt: skip
    assert rc == 0, (events, err)
    job_id = next(e for e in events if e["event"] == "held")["handle"]["id"]  # a pin: the queued handle (P10)
    assert seps.supervisor_pid() is None  # inline: the caller has left; nothing of eps runs now
    root = tmp_path / "shared" / d / "0"
    wait_until((root / "exit-code").exists, 60, "the wrapper to end the job")
    assert (root / "status").read_text().strip() == "stalled"
    assert (root / "exit-code").read_text().strip() == "125"
    assert (root / "out" / "term").read_text() == "term\n"
    wait_until(lambda: _sacct(job_id) not in ("", "RUNNING", "COMPLETING"), 30, "SLURM to see the end")
    assert _sacct(job_id).startswith("FAILED"), _sacct(job_id)
    rc, out, err = seps.run("status", d, "--json", timeout_s=60)  # reconciles: the held job is found ended
    assert rc == 0, err
    [row] = [r for r in json.loads(out)["dispatches"] if r["dispatch"] == d]
    assert (row["result"], row["exit_code"]) == ("stalled", 125), row
    rc, out, err = seps.run("wait", d, timeout_s=60)
    assert rc == 125, (out, err)
    assert (seps.state / "outputs" / d / "term").read_text() == "term\n"
    scancel_names("eps-f")


def _sacct(job_id: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-j", job_id, "-o", "State"], capture_output=True, text=True,
                         check=False, timeout=30)  # fmt: skip
    return out.stdout.strip()

