"""parse_duration reads its forms by hand; it reads them exactly as the regular expressions
that define them (kept here as the reference) do: the same seconds, the same errors."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from eps.core import durations
from eps.core.durations import parse_duration

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_PARTS = rf"(?:{_NUMBER}[ \t]*[a-z]+[ \t]*)+"
_PART = rf"({_NUMBER})[ \t]*([a-z]+)"
_CLOCK = r"([0-9]+):([0-5][0-9]):([0-5][0-9])"


def reference(text: str) -> int:
    """parse_duration as it was written with ``re``."""
    t = text.strip()
    shown = durations._shown(t)
    if t.startswith("-"):
        raise ValueError(f"duration must not be negative, got {shown}")
    if not t or len(t) > durations._LONGEST_INPUT:
        raise ValueError(f"bad duration {shown}: {durations._HELP}")
    low = t.lower()
    if ":" in low:
        m = re.fullmatch(_CLOCK, low)
        if m is None:
            raise ValueError(f"bad duration {shown}: {durations._HELP}")
        parts = [(m[1], 3600), (m[2], 60), (m[3], 1)]
    elif re.fullmatch(_NUMBER, low):
        parts = [(low, 1)]
    elif re.fullmatch(_PARTS, low):
        parts = durations._unit_parts(re.findall(_PART, low), shown)
    else:
        raise ValueError(f"bad duration {shown}: {durations._HELP}")
    total, scale = 0, 0
    for number, unit in parts:
        n, k = durations._digits(number)
        if k > scale:
            total *= 10 ** (k - scale)
            scale = k
        total += n * unit * 10 ** (scale - k)
    den = 10**scale
    if total > durations.MAX_DURATION_S * den:
        raise ValueError(f"duration {shown} is longer than the limit of 365 days ({durations.MAX_DURATION_S} s)")
    seconds, rest = divmod(total, den)
    if 2 * rest > den or (2 * rest == den and seconds % 2):
        seconds += 1
    return seconds


def outcome(f: object, text: str) -> tuple[str, object]:
    try:
        return "ok", f(text)  # type: ignore[operator]
    except ValueError as exc:
        return "error", str(exc)


pieces = st.sampled_from(
    ["0", "1", "5", "9", "12", "59", "60", "007", ".", ":", " ", "\t", "\n", "-", "+", "e", "s", "m", "h", "d", "min",
     "sec", "hours", "day", "days", "x", "H", "MIN", "\u212a", "\u0663", "\u00b2", "\u0130", "_", "1.5", ".5", "5."]
)  # fmt: skip
texts = st.lists(pieces, max_size=8).map("".join) | st.text(max_size=12)


@settings(max_examples=3000)
@given(texts)
@example("3h")
@example("1h30m")
@example("1:30:00")
@example("01:5:00")
@example("1.5.5h")
@example("1 h 30 min")
@example("2h 15min 10s")
@example(".5h")
@example("5.h")
@example("1h1h")
@example("30m1h")
@example("\u0661h")
def test_by_hand_as_the_patterns_read(text: str) -> None:
    assert outcome(parse_duration, text) == outcome(reference, text)
