"""What the benchmarks that start real eps processes share: ending what a run left behind."""

from __future__ import annotations

import compileall
import os
import signal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def eps_env(**settings: str) -> dict[str, str]:
    """The environment to start eps in, as an installed eps runs: its modules' bytecode compiled
    and read (pip writes it at install; PYTHONDONTWRITEBYTECODE, set in some shells and sandboxes,
    would have an editable checkout compile every module on every start, about 100 ms more per
    command), plus ``settings``."""
    compileall.compile_dir(str(ROOT / "eps"), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(settings)
    return env


def end_supervisor(state: Path) -> None:
    """End the supervisor a run started for its state dir ``state`` (a run whose machines are
    never released would keep it, and it would reopen the ssh masters the run closes)."""
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        is_supervisor = argv[2].startswith(b"from eps.shell.run.supervisor import main") if len(argv) >= 4 else False
        if is_supervisor and argv[3] == bytes(state):
            os.kill(int(name), signal.SIGKILL)


def close_masters(state: Path) -> None:
    """End the ssh master connections eps left to a run's machines (they would end by
    themselves after their idle time)."""
    from eps.shell.remote import mux

    directory = mux.control_dir(str(state / "ssh"))
    for path in set(mux.masters_under([directory] if directory else []).values()):
        mux.close(path)
