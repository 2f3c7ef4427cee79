"""Pure parsing and formatting of durations: the CLI's ``45s/30m/3h/2d`` and SLURM's
``[D-]HH:MM:SS`` (as ``sacctmgr``/``squeue`` print it and ``sbatch --time`` takes it)."""

from __future__ import annotations

import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_HUMAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_SLURM = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+)(?::(\d+))?$")


def parse_duration(text: str) -> int:
    """``45s``, ``30m``, ``3h``, ``2d``, ``1.5h`` or plain seconds -> whole seconds.

    Raises ``ValueError`` with a one-line message for anything else, negatives included."""
    if text.strip().startswith("-"):
        raise ValueError(f"duration must not be negative, got {text!r}")
    m = _HUMAN.match(text)
    if m is None:
        raise ValueError(f"bad duration {text!r}: use seconds or a number with s, m, h or d (e.g. 45s, 30m, 3h, 2d)")
    value = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    return round(value)


def parse_slurm_time(text: str) -> int | None:
    """SLURM time (``7-00:00:00``, ``1-12``, ``30:00``, ``90``) -> seconds; ``None`` for no limit.

    Follows sbatch(1): "minutes", "minutes:seconds", "hours:minutes:seconds",
    "days-hours", "days-hours:minutes" and "days-hours:minutes:seconds"."""
    t = text.strip()
    if t in ("", "UNLIMITED", "INFINITE", "Partition_Limit", "NONE"):
        return None
    if "-" in t:
        days_s, rest = t.split("-", 1)
        parts = rest.split(":")
        if not days_s.isdigit() or not all(p.isdigit() for p in parts) or len(parts) > 3:
            raise ValueError(f"bad SLURM time {text!r}")
        h, m, s = ([int(p) for p in parts] + [0, 0])[:3]
        return int(days_s) * 86_400 + h * 3600 + m * 60 + s
    parts = t.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise ValueError(f"bad SLURM time {text!r}")
    nums = [int(p) for p in parts]
    if len(nums) == 1:
        return nums[0] * 60
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]


def format_slurm_time(seconds: int) -> str:
    """Seconds -> ``D-HH:MM:SS`` (rounded up to the next whole minute, at least one minute)."""
    minutes = max(1, -(-seconds // 60))
    days, rem = divmod(minutes, 1440)
    hours, mins = divmod(rem, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00"


def human(seconds: int) -> str:
    """A short human form: ``1200 s (20m)`` style pieces for tables."""
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        m, s = divmod(seconds, 60)
        return f"{m}m{s:02d}s" if s else f"{m}m"
    if seconds < 86_400:
        h, rem = divmod(seconds, 3600)
        return f"{h}h{rem // 60:02d}m" if rem else f"{h}h"
    d, rem = divmod(seconds, 86_400)
    return f"{d}d{rem // 3600}h" if rem else f"{d}d"
