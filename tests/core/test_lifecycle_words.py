"""What a job's end is called and the exit status ``eps wait`` leaves with (issue 19 (11),
(12)): only ``eps cancel`` is a cancel (130); a signal eps did not send is ``killed by
signal N`` (128+N); a wrapper gone without its end is an unknown code (1)."""

from __future__ import annotations

import pytest

from eps.core.ends import JobEnd, result_word
from eps.core.lifecycle import exit_status
from eps.core.states import DispatchState

ENDED = DispatchState.ENDED

CASES = [
    (ENDED, JobEnd.EXITED, 0, "succeeded", 0),
    (ENDED, JobEnd.EXITED, 3, "failed (exit 3)", 3),
    (ENDED, JobEnd.TIMED_OUT, 124, "timed out", 124),
    (ENDED, JobEnd.CANCELLED, 143, "cancelled", 130),
    (ENDED, JobEnd.KILLED, 137, "killed by signal 9", 137),
    (ENDED, JobEnd.KILLED, 143, "killed by signal 15", 143),
    (ENDED, JobEnd.KILLED, 78, "failed (exit 78)", 78),
    (ENDED, None, None, "ended (exit code unknown)", 1),
    (DispatchState.CANCELLED, JobEnd.KILLED, 137, "cancelled", 130),
    (DispatchState.CANCELLED, None, None, "cancelled", 130),
]


@pytest.mark.parametrize(("state", "status", "code", "word", "exit"), CASES)
def test_the_end_and_its_exit_status(
    state: DispatchState, status: JobEnd | None, code: int | None, word: str, exit: int
) -> None:
    assert result_word(state, status, code) == word
    assert exit_status(state, status, code) == exit
