"""What the tests ask of this machine's processes (``/proc``), in one place."""

from __future__ import annotations

import os


def pids_with(token: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``token`` (pytest itself aside)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token in argv and state != "Z" and "pytest" not in argv:
            found.append(int(entry))
    return found
