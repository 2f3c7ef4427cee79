"""Which copies of a ``--count``/``--sweep`` parent a resume walks again (``eps/core/fanout.py``):
the copies a walk still owes, or one line saying why none (nothing resumed)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eps.core.fanout import OWED, CopiesOwed, copies_owed
from eps.core.states import DispatchState

W, INT, P, S, H, E, F, C = (DispatchState.WALKING, DispatchState.INTERRUPTED, DispatchState.PREEMPTED,
                          DispatchState.STARTED, DispatchState.HELD, DispatchState.ENDED, DispatchState.FAILED,
                          DispatchState.CANCELLED)  # fmt: skip

NONE_OWED = "dispatch D is {}, no copy to walk; nothing to resume"


@pytest.mark.parametrize(
    ("parent", "copies", "owed"),
    [
        (W, [("D1", W), ("D2", INT), ("D3", P)], CopiesOwed(("D1", "D2", "D3"))),
        (S, [("D1", S), ("D2", INT), ("D3", E)], CopiesOwed(("D2",))),  # started and ended copies are not walked
        (INT, [("D3", P), ("D1", W)], CopiesOwed(("D3", "D1"))),  # in the order given
        (S, [("D1", S), ("D2", H), ("D3", F)], CopiesOwed((), NONE_OWED.format("started"))),
        (C, [("D1", W)], CopiesOwed((), NONE_OWED.format("cancelled"))),  # cancelled: never walked again
        (E, [("D1", INT)], CopiesOwed((), NONE_OWED.format("ended"))),
        (None, [("D1", W)], CopiesOwed((), NONE_OWED.format("gone"))),
        (W, [], CopiesOwed((), NONE_OWED.format("walking"))),
    ],
    ids=["all-owed", "one-owed", "order-kept", "none-owed", "cancelled", "ended", "gone", "no-copies"],
)
def test_a_resume_walks_the_copies_a_walk_still_owes(
    parent: DispatchState | None, copies: list[tuple[str, DispatchState]], owed: CopiesOwed
) -> None:
    assert copies_owed("D", parent, copies) == owed


@settings(max_examples=100, deadline=None)
@given(
    parent=st.one_of(st.none(), st.sampled_from(list(DispatchState))),
    states=st.lists(st.sampled_from(list(DispatchState)), max_size=8),
)
def test_each_copy_is_walked_at_most_once_and_only_when_owed(
    parent: DispatchState | None, states: list[DispatchState]
) -> None:
    """The answer is either copies to walk (each owed, each once, none when the parent is
    over) or one line, never both and never neither."""
    copies = [(f"D{n + 1}", s) for n, s in enumerate(states)]
    got = copies_owed("D", parent, copies)
    assert (got.refusal is None) == bool(got.copies)
    assert len(set(got.copies)) == len(got.copies)
    assert all(dict(copies)[c] in OWED for c in got.copies)
    if parent in (None, C, E):
        assert got.copies == ()
    elif any(s in OWED for s in states):
        assert got.copies == tuple(c for c, s in copies if s in OWED)
