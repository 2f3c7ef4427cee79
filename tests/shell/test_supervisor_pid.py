"""Which supervisor a state directory has: the lock says whether one lives, its pid file
which one; a pid file a SIGKILLed supervisor left is never taken for the new one's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from eps.shell.run import ownership

HOLD = (
    "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
    "print(1, flush=True); time.sleep(60)"
)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_dead_supervisors_pid_file_is_not_the_live_ones(tmp_path: Path) -> None:
    state = str(tmp_path)
    Path(ownership.pid_path(state)).write_text(f"{_dead_pid()}\n")
    assert ownership.alive_pid(state) is None  # nobody holds the lock: none
    holder = subprocess.Popen([sys.executable, "-c", HOLD, ownership.lock_path(state)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"
        # the lock is taken, the pid file still the dead one's: "not written yet", never that pid
        assert ownership.alive_pid(state) == 0
        Path(ownership.pid_path(state)).write_text(f"{holder.pid}\n")
        assert ownership.alive_pid(state) == holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_supervisor_not_reaped_yet_is_not_the_live_one(tmp_path: Path) -> None:
    """A SIGKILLed supervisor its parent has not reaped (a zombie) still answers kill(pid, 0):
    its pid file must read as "not written yet" to the one that took the lock since (the CI
    failure of test_supervise_is_idempotent_and_cheap_when_idle)."""
    state = str(tmp_path)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    holder = subprocess.Popen([sys.executable, "-c", HOLD, ownership.lock_path(state)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"
        deadline = time.monotonic() + 10
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        Path(ownership.pid_path(state)).write_text(f"{zombie.pid}\n")
        assert ownership.alive_pid(state) == 0
    finally:
        zombie.wait()
        holder.kill()
        holder.wait()
