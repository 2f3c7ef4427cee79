"""An eps process that is stopped takes what it started with it (issue 19): a SIGTERM of
``eps logs -f`` ends its ssh client and the ``tail`` on the machine; a SIGKILL of ``eps pull``
(or any eps process) leaves no rsync running.  eps runs as child processes; the GCP VM is the real test sshd, so
the machine's processes are this machine's and can be looked for."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from faults_support import Eps, GcpTrap, RunpodTrap, wait_until
from procs import live


def _running(needle: str) -> list[str]:
    """Command lines of the live (not zombie) processes that mention ``needle``."""
    return [f"{p.pid}: {p.cmdline}" for p in live(lambda p: needle in p.cmdline)]


def test_sigterm_of_logs_follow_ends_ssh_and_the_remote_tail(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    rc, out, err = eps.run("execute", "cpu-small", "--duration", "30m", "--", "echo started; sleep 300")
    assert rc == 0, (out, err)
    d = out.split()[0]
    log = str(tmp_path / "gcp-runs" / d / "0" / "job.log")
    follower = eps.start("logs", d, "-f")
    wait_until(lambda: "started\n" in "".join(follower.lines), 30, "the log to be followed")
    wait_until(lambda: [p for p in _running(log) if " tail " in f" {p.split(': ', 1)[1]}"], 10, "the remote tail")
    os.kill(follower.pid, signal.SIGTERM)
    follower.wait(10)
    wait_until(lambda: not _running(log), 10, f"the ssh client and remote tail to end: {_running(log)}")


def test_sigkill_of_eps_takes_its_rsync_with_it(tmp_path: Path) -> None:
    """Every rsync (and ssh) eps runs goes through ``run_process``: SIGKILL the eps process
    that waits for one, and it ends too."""
    import subprocess
    import sys

    marker = f"307.{os.getpid()}"
    script = f"from eps.shell.remote.process import run_process; run_process(['sleep', '{marker}'])"
    eps = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_until(lambda: [p for p in _running(marker) if p.split(": ", 1)[1].startswith("sleep ")], 30, "the sleep")
        eps.kill()
        eps.wait(10)
        wait_until(lambda: not _running(marker), 10, f"the child to end with eps: {_running(marker)}")
    finally:
        if eps.poll() is None:
            eps.kill()
