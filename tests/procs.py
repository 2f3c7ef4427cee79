"""What the tests ask of this machine's processes (``/proc``), in one place."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple


class Proc(NamedTuple):
    """A live (not zombie) process: its pid, command line (words joined by spaces) and the
    fields of ``/proc/PID/stat`` after its name (``[0]`` the state, ``[3]`` the group)."""

    pid: int
    cmdline: str
    stat: list[str]

    def environ(self) -> list[bytes]:
        """Its environment (``NAME=VALUE``); empty once it is gone."""
        try:
            with open(f"/proc/{self.pid}/environ", "rb") as fh:
                return fh.read().split(b"\0")
        except OSError:
            return []

    @property
    def leads_its_group(self) -> bool:
        return int(self.stat[3]) == self.pid


def live(keep: Callable[[Proc], bool]) -> list[Proc]:
    """The live processes of this machine (this one aside) that ``keep`` keeps."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        proc = Proc(int(entry), cmdline, stat)
        if stat and stat[0] != "Z" and keep(proc):
            found.append(proc)
    return found


def pids_with(token: str) -> list[int]:
    """Live processes whose command line holds ``token`` (pytest itself aside)."""
    return [p.pid for p in live(lambda p: token in p.cmdline and "pytest" not in p.cmdline)]
