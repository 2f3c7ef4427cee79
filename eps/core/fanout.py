"""A fan-out's copies (a ``--count`` parent's, a ``--sweep``'s tasks): which of them a resume
walks again.  Pure; the shell (``eps/shell/service/inline.py``) reads the rows, asks, and
walks the copies named, or says the one line."""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from eps.core.states import DispatchState

__all__ = ["OWED", "CopiesOwed", "copies_owed"]

#: Copy states a walk still owes: not walked to its end (walking), its walk died
#: (interrupted), or its machine was taken back (preempted).
OWED: frozenset[DispatchState] = frozenset({DispatchState.WALKING, DispatchState.INTERRUPTED, DispatchState.PREEMPTED})

#: Parent states a resume of its copies never walks: the fan-out is over.
_OVER = frozenset({DispatchState.CANCELLED, DispatchState.ENDED})


@frozen
class CopiesOwed:
    """The copies (their dispatch ids, in the order given) a resume walks, or, when it walks
    none, ``refusal``: one line saying why (nothing is resumed)."""

    copies: tuple[str, ...]
    refusal: str | None = None


def copies_owed(parent: str, state: DispatchState | None, copies: Sequence[tuple[str, DispatchState]]) -> CopiesOwed:
    """``--resume`` of fan-out ``parent`` (its row's ``state``, ``None`` when it is gone) whose
    copies are ``copies`` (id, state): the copies a walk still owes (:data:`OWED`); none when
    the parent is gone, cancelled or ended, or no copy is owed, and the line saying so."""
    owed = tuple(c for c, s in copies if s in OWED)
    if state is None or state in _OVER or not owed:
        said = "gone" if state is None else state
        return CopiesOwed((), f"dispatch {parent} is {said}, no copy to walk; nothing to resume")
    return CopiesOwed(owed)
