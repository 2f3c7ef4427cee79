"""CPU cost of one poll of a running job: ``probe_job`` over the machine's ssh master (eps hands
the command to the master's socket itself: no ``ssh`` process), then over the master with an
``ssh`` process per poll (as before eps spoke the master's protocol), and over a connection of
its own (a full handshake each time).

    python benchmarks/poll_cpu.py [--polls 200] [--machine-rc]

A job (``sleep``) is staged and started on the test sshd (tests/shell/ssh/sshd.sh, root)
the way a lane does it, with a key of this run's own; then it is probed ``--polls`` times.
Printed per poll: this machine's CPU (user + system of the ssh clients, of the master while
it carries them, and of this Python process), and wall time; the sshd's CPU is not counted (it is
another machine's in life).  The login is pod-like (the command's bash skips this machine's root
``~/.bashrc``, which runs ``pyenv init``); ``--machine-rc`` keeps it (only the wall time changes).
Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from attrs import evolve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "shell" / "ssh"))
import ssh_support  # noqa: E402  (the test sshd)

from eps.core.jobscript import JobSpec, render_cancel  # noqa: E402
from eps.shell.remote import mux  # noqa: E402
from eps.shell.remote.job import probe_job, stage_job, start_job  # noqa: E402
from eps.shell.remote.keys import ensure_key  # noqa: E402
from eps.shell.remote.process import Completed, Runner, run_process  # noqa: E402
from eps.shell.remote.ssh import Remote, check_remote  # noqa: E402


def cpu() -> tuple[float, float]:
    """(CPU seconds of waited-for children, of this process)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = resource.getrusage(resource.RUSAGE_SELF)
    return kids.ru_utime + kids.ru_stime, me.ru_utime + me.ru_stime


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) a live process has used so far (the master: not our child)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def exec_ssh(argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float | None = None) -> Completed:
    """The production runner under another name: eps then starts ``ssh`` for each command."""
    return run_process(argv, stdin=stdin, timeout_s=timeout_s)


def measure(remote: Remote, root: str, polls: int, runner: Runner = run_process) -> tuple[float, float, float]:
    """Per poll: ssh CPU on this machine (the clients, and the master when there is one),
    this process's CPU, wall (seconds)."""
    master = mux.master_pid(remote.control_path) if remote.control_path else None
    kids0, me0, m0 = *cpu(), process_cpu(master)
    began = time.perf_counter()
    for _ in range(polls):
        probe_job(remote, root, runner=runner).unwrap()
    wall = time.perf_counter() - began
    kids1, me1, m1 = *cpu(), process_cpu(master)
    return (kids1 - kids0 + m1 - m0) / polls, (me1 - me0) / polls, wall / polls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=200)
    parser.add_argument("--machine-rc", action="store_true", help="the login runs this machine's ~/.bashrc")
    args = parser.parse_args(argv)

    ssh_support.start_sshd()
    with tempfile.TemporaryDirectory(prefix="eps-poll") as tmp:
        key = ensure_key(str(Path(tmp) / "state")).unwrap()
        ssh_support.authorize(key.public_key, plain_login=not args.machine_rc)
        remote = Remote.ssh(ssh_support.VM_IP, key, user=ssh_support.USER, machine=f"bench-{uuid.uuid4().hex[:8]}")
        root = f"{tmp}/run"
        try:
            stage_job(remote, root, JobSpec(("sleep 600",), "dbench", 900)).unwrap()
            start_job(remote, root).unwrap()
            check_remote(remote, "true", "warm up").unwrap()  # the master is open
            shared = measure(remote, root, args.polls)
            spawned = measure(remote, root, args.polls, exec_ssh)
            alone = measure(evolve(remote, control_path=None), root, max(5, args.polls // 5))
        finally:
            check_remote(evolve(remote, control_path=None), render_cancel(root), "cancel")
            if remote.control_path is not None:
                mux.close(remote.control_path)
            ssh_support.revoke(key.public_key)
    print(f"one poll of a running job (probe_job), {args.polls} polls, client side of ssh + this process:")
    rows = (("over the master", shared), ("master, ssh process", spawned), ("own connection", alone))
    for label, (kids, me, wall) in rows:
        print(f"  {label:19s} ssh CPU {kids * 1000:6.1f} ms + eps CPU {me * 1000:5.1f} ms"
              f" = {(kids + me) * 1000:6.1f} ms per poll; wall {wall * 1000:6.1f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
