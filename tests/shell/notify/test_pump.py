"""The supervisor's sender in this process, against a real ledger and the HTTP receiver on
loopback (no job, no sshd): a refused target is tried again and told once; a sender started
again (a supervisor revived) goes on from the ledger's cursors, sending nothing twice; a
hanging target holds no other back; an end whose outputs wait is told after the linger."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from notify_support import TOKEN, HttpReceiver, notify_config, wait_for

from eps.core.model import Job
from eps.core.states import DispatchState
from eps.shell.config.load import load_settings
from eps.shell.notify import book
from eps.shell.notify.pump import Pump
from eps.shell.run import ownership
from eps.shell.state.events import EventLog
from eps.shell.state.ledger import Ledger


class World:
    def __init__(self, tmp: Path, config: str) -> None:
        (tmp / "c.toml").write_text(config)
        self.env = {"HOME": str(tmp), "EPS_STATE_DIR": str(tmp / "s"), "EPS_CONFIG": str(tmp / "c.toml")}
        self.settings = load_settings(self.env)
        self.ledger = Ledger(self.env["EPS_STATE_DIR"])
        self.pumps: list[Pump] = []
        self.said: list[str] = []

    def dispatch(self, d: str) -> EventLog:
        self.ledger.new_dispatch(d, Job(intent="cpu-small", duration_s=60, command=("true",)))
        ownership.write_inputs(self.env["EPS_STATE_DIR"], d, None, None, self.env)
        return EventLog(self.env["EPS_STATE_DIR"], d)

    def pump(self) -> Pump:
        p = Pump(self.ledger, self.settings, self.env, tick_s=0.05, say=self.said.append)
        p.start()
        self.pumps.append(p)
        return p

    def close(self) -> None:
        for p in self.pumps:
            p.stop()
        self.ledger.close()


@pytest.fixture
def world(tmp_path: Path, http: HttpReceiver) -> Iterator[Any]:
    def make(config: str) -> World:
        w = World(tmp_path, config)
        made.append(w)
        return w

    made: list[World] = []
    yield make
    for w in made:
        w.close()


def _settle(w: World, d: str) -> None:
    w.ledger.set_dispatch(d, DispatchState.STARTED)
    w.ledger.record_end(d, 0, "exited", time.time())
    w.ledger.set_dispatch(d, DispatchState.ENDED, message="succeeded")


def test_a_refused_target_is_tried_again_and_a_revived_sender_sends_nothing_twice(
    world: Any, http: HttpReceiver
) -> None:
    w = world(notify_config([http.url]))
    log = w.dispatch("d1")
    first = w.pump()
    first.watch("d1")
    log.emit("started", dispatch="d1", handle={"lane": "runpod", "id": "p", "rung": "runpod:cpu"})
    wait_for(lambda: http.titles() == ["eps d1: started on runpod"], 5, "the started notice")
    http.mode = "refuse"
    log.emit("ended", dispatch="d1", exit_code=0, pulled=True, outputs="/o", lane="runpod", message="succeeded")
    _settle(w, "d1")
    wait_for(lambda: http.tried >= 3, 10, "tries again after 1 s, then 2 s")
    assert any("did not take it" in s and f"json://127.0.0.1:{http.port}" in s for s in w.said), w.said
    first.stop()  # the supervisor is gone, the end not told: it is owed
    assert book.owed(w.ledger)
    http.mode = "ok"
    second = w.pump()  # a supervisor revived: it watches nothing new, it reads what is owed
    wait_for(lambda: "eps d1: ended 0" in http.titles(), 10, "the end, told by the second")
    wait_for(lambda: not second.owes(), 5, "nothing owed")
    assert http.titles() == ["eps d1: started on runpod", "eps d1: ended 0"]
    assert TOKEN not in "".join(w.said)


def test_a_hanging_target_holds_no_other_back(world: Any, http: HttpReceiver, tmp_path: Path) -> None:
    other = HttpReceiver().start()
    try:
        w = world(notify_config([http.url, other.url], timeout='"3s"'))
        http.mode = "hang"
        log = w.dispatch("d2")
        w.pump().watch("d2")
        start = time.monotonic()
        log.emit("started", dispatch="d2", handle={"lane": "gcp", "id": "v", "rung": "gcp:e2"})
        log.emit("ended", dispatch="d2", exit_code=4, pulled=True, outputs="/o", lane="gcp")
        wait_for(lambda: len(other.titles()) == 2, 5, "both notices at the answering target")
        assert time.monotonic() - start < 3  # the hanging one's bound is 3 s: the other did not wait for it
        assert other.titles() == ["eps d2: started on gcp", "eps d2: failed (exit 4)"]
        http.mode = "ok"
        http.release.set()
        wait_for(lambda: len(http.titles()) == 2, 20, "the hanging target told once it answers")
    finally:
        other.stop()


def test_outputs_still_waiting_after_the_linger_are_told_once(world: Any, http: HttpReceiver) -> None:
    w = world("[jobs]\nlinger_s = 1\n" + notify_config([http.url], events='["unpulled"]'))
    log = w.dispatch("d3")
    w.pump().watch("d3")
    _settle(w, "d3")  # ended, not pulled
    log.emit("ended", dispatch="d3", exit_code=0, pulled=False, outputs=None, lane="gcp")
    wait_for(lambda: http.titles() == ["eps d3: outputs waiting for eps pull"], 10, "the unpulled notice")
    assert "next: eps pull d3" in http.got[0]["message"]
    log2 = w.dispatch("d4")
    w.pumps[0].watch("d4")
    _settle(w, "d4")
    log2.emit("ended", dispatch="d4", exit_code=0, pulled=False, outputs=None, lane="gcp")
    w.ledger.mark_pulled("d4")  # pulled within the linger: nothing to tell
    wait_for(lambda: not w.pumps[0].owes(), 10, "nothing owed")
    assert http.titles() == ["eps d3: outputs waiting for eps pull"]
    assert not any(TOKEN.encode() in Path(p).read_bytes() for p in _files(w.env["EPS_STATE_DIR"]))


def _files(root: str) -> list[str]:
    return [os.path.join(d, f) for d, _s, fs in os.walk(root) for f in fs]
