"""What the benchmarks that start real eps processes share: ending what a run left behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def end_supervisor(state: Path) -> None:
    """End the supervisor a run started for its state dir ``state`` (a run whose machines are
    never released would keep it, and it would reopen the ssh masters the run closes)."""
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if len(argv) >= 4 and argv[2].startswith(b"from eps.shell.supervisor import main") and argv[3] == bytes(state):
            os.kill(int(name), signal.SIGKILL)


def close_masters(state: Path) -> None:
    """End the ssh master connections eps left to a run's machines (they would end by
    themselves after their idle time)."""
    from eps.shell.remote import mux

    directory = mux.control_dir(str(state / "ssh"))
    for path in set(mux.masters_under([directory] if directory else []).values()):
        mux.close(path)
