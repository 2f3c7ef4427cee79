"""The one duration parser and formatter (eps/core/durations.py), and SLURM's own time format."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eps.core.durations import (
    MAX_DURATION_S,
    format_duration,
    format_slurm_time,
    parse_duration,
    parse_slurm_time,
)

seconds = st.integers(0, MAX_DURATION_S)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("45s", 45),
        ("30m", 1800),
        ("3h", 10_800),
        ("2d", 172_800),
        ("1.5h", 5400),
        ("90", 90),
        ("0", 0),
        ("1.5", 2),  # fractions round half to even
        ("2.5", 2),
        (" 7 ", 7),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("90min", 5400),
        ("90 mins", 5400),
        ("2H", 7200),
        ("2Hrs", 7200),
        ("1 hour", 3600),
        ("3 days", 259_200),
        ("1day", 86_400),
        ("10sec", 10),
        ("1d2h3m4s", 93_784),
        ("2h 15min 10s", 8110),
        ("01:30:00", 5400),
        ("1:30:00", 5400),
        ("36:00:00", 129_600),
        ("0:00:59", 59),
        (".5m", 30),
        ("365d", MAX_DURATION_S),
    ],
)
def test_parse_duration_accepts(text: str, want: int) -> None:
    assert parse_duration(text) == want


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("-5", "negative"),
        ("-1h", "negative"),
        ("", "bad duration"),
        ("   ", "bad duration"),
        ("abc", "bad duration"),
        ("5x", "unknown unit"),
        ("1:30", "bad duration"),  # h:mm or m:ss? refused rather than guessed
        ("1:60:00", "bad duration"),
        ("1:00:60", "bad duration"),
        ("30m1h", "largest first"),
        ("1h1h", "largest first"),
        ("1e5", "bad duration"),
        ("nan", "bad duration"),
        ("inf", "bad duration"),
        ("\u0663s", "bad duration"),  # an Arabic-Indic digit is not a number here
        ("366d", "365 days"),
        ("1" * 400, "365 days"),
        ("1" * 400 + "d", "365 days"),
        ("9" * 100 + ":00:00", "365 days"),
        ("1" * 5000, "bad duration"),
        ("1h\n30m", "bad duration"),
    ],
)
def test_parse_duration_refuses_with_one_line(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as info:
        parse_duration(text)
    assert "\n" not in str(info.value)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    ("n", "want"),
    [(0, "0s"), (45, "45s"), (600, "10m"), (5400, "1h30m"), (7 * 86_400, "7d"), (93_784, "1d2h3m4s"), (3600, "1h")],
)
def test_format_duration(n: int, want: str) -> None:
    assert format_duration(n) == want


def test_format_duration_refuses_negatives() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_duration(-1)


@given(seconds)
def test_format_then_parse_round_trips(n: int) -> None:
    assert parse_duration(format_duration(n)) == n


@given(seconds, st.sampled_from([str.upper, str.lower, str.title]))
def test_units_are_case_insensitive(n: int, case: object) -> None:
    assert parse_duration(case(format_duration(n))) == n  # type: ignore[operator]


@given(seconds)
def test_clock_and_plain_seconds_agree(n: int) -> None:
    h, rest = divmod(n, 3600)
    m, s = divmod(rest, 60)
    assert parse_duration(f"{h:02d}:{m:02d}:{s:02d}") == n
    assert parse_duration(str(n)) == n


@given(st.integers(MAX_DURATION_S + 1, 10**500))
def test_too_long_is_a_value_error_never_an_overflow(n: int) -> None:
    with pytest.raises(ValueError, match="365 days"):
        parse_duration(f"{n}s" if n < 10**150 else str(n)[:150])


@given(st.integers(0, 400 * 86_400))
def test_slurm_time_round_trips_to_whole_minutes(n: int) -> None:
    assert parse_slurm_time(format_slurm_time(n)) == max(60, -(-n // 60) * 60)


@pytest.mark.parametrize(
    ("text", "want"),
    [("7-00:00:00", 7 * 86_400), ("1-12", 36 * 3600), ("30:00", 1800), ("90", 5400), ("UNLIMITED", None)],
)
def test_parse_slurm_time(text: str, want: int | None) -> None:
    assert parse_slurm_time(text) == want


@given(st.integers(0, 10**6), st.text("0123456789", max_size=12), st.sampled_from([("s", 1), ("m", 60), ("h", 3600)]))
def test_fractions_round_half_to_even_exactly(whole: int, fraction: str, unit: tuple[str, int]) -> None:
    """Fractions are exact (no float): the result is the nearest second, ties to even."""
    from fractions import Fraction

    text = f"{whole}.{fraction}" if fraction else str(whole)
    exact = Fraction(text) * unit[1]
    if exact <= MAX_DURATION_S:
        assert parse_duration(text + unit[0]) == round(exact)
    else:
        with pytest.raises(ValueError, match="365 days"):
            parse_duration(text + unit[0])
