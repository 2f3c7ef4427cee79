"""Room on this machine's disk for a pull: eps never fills the shared VM's disk with a job's
outputs (the seed's #658: a 139 GB activation store filled ``/`` and stalled the fleet).

Before a pull or a sync of a job's ``$EPS_OUTPUT_DIR`` and log to this machine starts, the
shell learns what it would write (:class:`Incoming`: rsync's dry run of the same transfer)
and how much room each destination's filesystem has (:class:`Disk`); :func:`room_for` says
whether it fits.  It fits when, on every filesystem it writes to, what is free now, less
what it would write, is still at least the margin: the threshold ``vm_disk_margin_gb``
(P2's "free disk the VM keeps"; the same floor, now also against eps's own pulls).  One
that does not fit is not started: :meth:`Room.line` says why, with the sizes.

What a transfer would write is counted generously: every file rsync would send at its full
size (it writes a new copy beside the old one and renames it over, so the old one's blocks
come back only after), plus one filesystem block for each file and each new directory (a
file's last block is a whole block; 100,000 small files take 100,000 blocks, not their bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from eps.core.model import GB


class Incoming(NamedTuple):
    """What one transfer would write into ``where``: ``size`` bytes of file data in ``files``
    files (each sent whole), and ``dirs`` directories it would make."""

    where: str
    size: int
    files: int = 0
    dirs: int = 0


class Disk(NamedTuple):
    """The filesystem a destination is on, as it is now: its identity (``st_dev``), the bytes
    free to this user (``shutil.disk_usage(path).free``) and its block size (``f_frsize``)."""

    device: int
    free: int
    block: int = 4096


class Room(NamedTuple):
    """One filesystem's verdict: ``needed`` bytes into ``where``, ``free`` there now, and the
    ``margin`` that must stay free (all bytes)."""

    where: str
    needed: int
    free: int
    margin: int

    @property
    def fits(self) -> bool:
        return self.free - self.needed >= self.margin

    def line(self) -> str:
        """Why a pull was not started, with the sizes (one line)."""
        return (
            f"held back for lack of disk: they need {size_text(self.needed)} in {self.where}, "
            f"{size_text(self.free)} free there, and {size_text(self.margin)} must stay free "
            "(vm_disk_margin_gb)"
        )

    def as_data(self) -> dict[str, int | str]:
        return {"where": self.where, "needed_bytes": self.needed, "free_bytes": self.free,
                "margin_bytes": self.margin, "line": self.line()}  # fmt: skip


def needed_bytes(incoming: Incoming, block: int) -> int:
    """What ``incoming`` may take on a filesystem of ``block``-byte blocks (see the module)."""
    return incoming.size + (incoming.files + incoming.dirs) * max(block, 0)


def margin_bytes(margin_gb: float) -> int:
    """The margin in bytes (GB = 2**30 bytes, as every size of the tables)."""
    return int(margin_gb * GB)


def room_for(parts: Sequence[tuple[Incoming, Disk]], margin: int) -> Room:
    """Whether the transfers of ``parts`` (each with the filesystem it writes to) fit: what
    they need is summed per filesystem; the first one short of room, else the one that takes
    the most.  No parts: nothing to write, it fits."""
    rooms: dict[int, Room] = {}
    for incoming, disk in parts:
        before = rooms.get(disk.device)
        need = needed_bytes(incoming, disk.block)
        if before is None:
            rooms[disk.device] = Room(incoming.where, need, disk.free, margin)
        else:
            rooms[disk.device] = before._replace(needed=before.needed + need, free=min(before.free, disk.free))
    if not rooms:
        return Room("-", 0, 0, 0)
    short = [r for r in rooms.values() if not r.fits]
    return short[0] if short else max(rooms.values(), key=lambda r: r.needed)


def size_text(n: int) -> str:
    """``n`` bytes for people: ``512 B``, ``1.5 KiB``, ``600.0 MiB``, ``10.0 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
