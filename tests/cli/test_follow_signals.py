"""A caller following a dispatch leaves on SIGTERM, SIGHUP or Ctrl-C wherever the signal
lands, even inside library code that swallows every ``Exception`` (cattrs building a
converter did, and ``eps execute --wait`` then never left: the fault suite caught it)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
from pathlib import Path

import pytest

from eps.core.model import Job
from eps.shell.render.progress import Reporter
from eps.shell.service import attach as A
from eps.shell.state.ledger import DispatchRow, Ledger


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_inside_code_that_swallows_exceptions_still_stops_the_follower(
    tmp_path: Path, signum: int
) -> None:
    ledger = Ledger(str(tmp_path / "state"))
    ledger.new_dispatch("d1", Job("cpu-small", 60, command=("true",)))
    looks = []

    def done(_row: DispatchRow) -> bool:
        looks.append(1)
        if len(looks) == 1:
            with contextlib.suppress(Exception):  # what a library's broad except does to a handler's raise
                os.kill(os.getpid(), signum)
        return False

    before = signal.getsignal(signum)
    out = io.StringIO()
    stopped = KeyboardInterrupt if signum == signal.SIGINT else A.Detached
    with pytest.raises(stopped):
        A.follow(ledger, Reporter(json_lines=True, out=out), "d1", {}, done=done, history=True, timeout_s=5)
    assert len(looks) == 1  # it left at the next safe point, not at the timeout
    assert signal.getsignal(signum) == before  # the caller's own handlers are back
    ledger.close()
