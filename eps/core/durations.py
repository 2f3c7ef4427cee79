"""Pure parsing and formatting of durations: the one human form eps reads and writes,
and SLURM's ``[D-]HH:MM:SS`` (as ``sacctmgr``/``squeue`` print it and ``sbatch --time`` takes it).

Human durations, :func:`parse_duration` (what users type: ``--duration``, ``--park``)
and :func:`format_duration` (what plans, skips and tables print):

- a plain number is seconds: ``90``, ``1.5``;
- a number with a unit: ``45s``, ``30m``, ``3h``, ``2d``, ``1.5h``.  Units are
  case-insensitive (``2H``) and may be words: ``s sec secs second seconds``,
  ``m min mins minute minutes``, ``h hr hrs hour hours``, ``d day days``;
- several such parts, largest unit first, each unit at most once, blanks
  allowed between them: ``1h30m``, ``90min``, ``1d 2h``, ``2h 15min 10s``;
- a clock ``H:MM:SS`` (``01:30:00``, ``36:00:00``): any number of hours, then
  minutes and seconds of two digits below 60.  A two-part clock (``1:30``) is
  refused: it could be h:mm or m:ss (SLURM reads minutes:seconds), and a guess
  is worse than an error.

Fractions round to the nearest whole second (half to even).  Refused, each with
a one-line ``ValueError``: empty text, negatives, anything not in the forms
above, and anything longer than :data:`MAX_DURATION_S` (365 days), so that a
400-digit number is a clear error, never an ``OverflowError``.  Zero is a valid
duration here; where zero makes no sense, the caller refuses it.

:func:`format_duration` writes the compact exact form that :func:`parse_duration`
reads back to the same number: ``0s``, ``45s``, ``10m``, ``1h30m``, ``7d``,
``1d2h3m4s``.
"""

from __future__ import annotations

#: The longest duration eps accepts: 365 days.  A job or a park longer than a year is a typo.
MAX_DURATION_S = 365 * 86_400

_SECOND, _MINUTE, _HOUR, _DAY = 1, 60, 3600, 86_400
_UNIT_WORDS: dict[str, int] = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), _SECOND),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), _MINUTE),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), _HOUR),
    **dict.fromkeys(("d", "day", "days"), _DAY),
}
# The forms, read by hand rather than by ``re`` (compiling the three patterns cost about half a
# millisecond of every ``eps plan --duration``).  As patterns, each read whole:
#   number  [0-9]+(\.[0-9]*)?|\.[0-9]+
#   parts   (number[ \t]*[a-z]+[ \t]*)+      (each part: its number and its unit word)
#   clock   ([0-9]+):([0-5][0-9]):([0-5][0-9])
# ASCII digits and letters only, as the patterns have it (``str.isdigit`` takes any digit).
_DIGITS = frozenset("0123456789")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")
_BLANKS = frozenset(" \t")
_HELP = "use seconds, a number with a unit (45s, 30m, 3h, 2d, 1.5h, 1h30m, 90min) or H:MM:SS"
_LONGEST_INPUT = 1000  # characters; longer text is refused before any arithmetic


def parse_duration(text: str) -> int:
    """A human duration (forms in the module docstring) -> whole seconds, 0 to 365 days.

    Raises ``ValueError`` with a one-line message for anything else, negatives included."""
    t = text.strip()
    shown = _shown(t)
    if t.startswith("-"):
        raise ValueError(f"duration must not be negative, got {shown}")
    if not t or len(t) > _LONGEST_INPUT:
        raise ValueError(f"bad duration {shown}: {_HELP}")
    low = t.lower()  # units are case-insensitive
    parts: list[tuple[str, int]]  # (number as written, seconds per unit)
    if ":" in low:
        clock = _clock(low)
        if clock is None:
            raise ValueError(f"bad duration {shown}: {_HELP}")
        parts = [(clock[0], _HOUR), (clock[1], _MINUTE), (clock[2], _SECOND)]
    elif _number_end(low, 0) == len(low):
        parts = [(low, _SECOND)]
    else:
        words = _words(low)
        if words is None:
            raise ValueError(f"bad duration {shown}: {_HELP}")
        parts = _unit_parts(words, shown)
    # Exact arithmetic on whole numbers (no float, no Decimal import): a part "1.25" is 125 / 10**2.
    total: int = 0  # the duration is total / 10**scale seconds
    scale = 0
    for number, unit in parts:
        n, k = _digits(number)
        if k > scale:
            total *= 10 ** (k - scale)
            scale = k
        total += n * unit * 10 ** (scale - k)
    den: int = 10**scale
    if total > MAX_DURATION_S * den:
        raise ValueError(f"duration {shown} is longer than the limit of 365 days ({MAX_DURATION_S} s)")
    seconds, rest = divmod(total, den)
    if 2 * rest > den or (2 * rest == den and seconds % 2):  # round half to even
        seconds += 1
    return seconds


def _digits(number: str) -> tuple[int, int]:
    """``"1.25"`` -> ``(125, 2)``: the number is ``n / 10**k``."""
    whole, _, fraction = number.partition(".")
    return int(whole + fraction or "0"), len(fraction)


def _number_end(t: str, i: int) -> int:
    """Where the longest number starting at ``t[i]`` ends (``-1``: none starts there)."""
    n, j = len(t), i
    while j < n and t[j] in _DIGITS:
        j += 1
    if j > i:  # digits, then perhaps a dot and more digits
        if j < n and t[j] == ".":
            j += 1
            while j < n and t[j] in _DIGITS:
                j += 1
        return j
    if i + 1 < n and t[i] == "." and t[i + 1] in _DIGITS:  # .5
        j = i + 1
        while j < n and t[j] in _DIGITS:
            j += 1
        return j
    return -1


def _words(t: str) -> list[tuple[str, str]] | None:
    """``t`` as numbers with unit words (``1h 30min`` -> ``[("1", "h"), ("30", "min")]``), or
    ``None`` when it is not only such parts.  Each part is its longest number, blanks, its
    word: the only way to read it, since a number is never followed by a digit or a dot."""
    parts, i, n = [], 0, len(t)
    while i < n:
        j = _number_end(t, i)
        if j < 0:
            return None
        k = j
        while k < n and t[k] in _BLANKS:
            k += 1
        end = k
        while end < n and t[end] in _LETTERS:
            end += 1
        if end == k:
            return None
        parts.append((t[i:j], t[k:end]))
        i = end
        while i < n and t[i] in _BLANKS:
            i += 1
    return parts or None


def _clock(t: str) -> tuple[str, str, str] | None:
    """``H:MM:SS`` -> its three fields (minutes and seconds two digits below 60), else ``None``."""
    fields = t.split(":")
    if len(fields) != 3:
        return None
    h, m, s = fields
    if not h or any(c not in _DIGITS for c in h):
        return None
    for two in (m, s):
        if len(two) != 2 or two[0] not in "012345" or two[1] not in _DIGITS:
            return None
    return h, m, s


def _unit_parts(words: list[tuple[str, str]], shown: str) -> list[tuple[str, int]]:
    parts = []
    last_unit = _DAY + 1
    for number, word in words:
        unit = _UNIT_WORDS.get(word)
        if unit is None:
            raise ValueError(f"bad duration {shown}: unknown unit {word!r}; {_HELP}")
        if unit >= last_unit:
            raise ValueError(f"bad duration {shown}: give each unit once, largest first (e.g. 1h30m)")
        last_unit = unit
        parts.append((number, unit))
    return parts


def _shown(t: str) -> str:
    """The text as an error message quotes it: on one line, and not 400 digits long."""
    one_line = " ".join(t.split())
    return repr(one_line if len(one_line) <= 40 else one_line[:37] + "...")


def format_duration(seconds: int) -> str:
    """Whole seconds -> the compact exact form (``45s``, ``10m``, ``1h30m``, ``7d``, ``1d2h3m4s``).

    ``parse_duration(format_duration(n)) == n`` for every ``0 <= n <= MAX_DURATION_S``.
    Raises ``ValueError`` for a negative number."""
    if seconds < 0:
        raise ValueError(f"duration must not be negative, got {seconds}")
    if seconds == 0:
        return "0s"
    out = []
    rest = seconds
    for unit, size in (("d", _DAY), ("h", _HOUR), ("m", _MINUTE), ("s", _SECOND)):
        n, rest = divmod(rest, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


#: The name the shell's views import; the same one formatter.
human = format_duration


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
