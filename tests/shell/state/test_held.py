"""Outputs held back for lack of disk (issue 33, item 4): the Finisher's guarded pull on this
machine (real rsync, a local site), the record ``eps status`` reads, and its gating."""

from __future__ import annotations

import json
import os
from pathlib import Path

from returns.result import Failure, Success

from eps.core.model import Job
from eps.core.room import Room
from eps.core.states import DispatchState
from eps.shell.config.load import load_settings
from eps.shell.lanes import LaneOptions, Lanes
from eps.shell.lanes.jobs import Site
from eps.shell.remote.ssh import Remote
from eps.shell.run import held
from eps.shell.run.finish import Finisher
from eps.shell.state.ledger import Ledger


def _finisher(tmp_path: Path, margin_gb: int, url: str | None) -> tuple[Finisher, Ledger]:
    (tmp_path / "config.toml").write_text(f"[thresholds]\nvm_disk_margin_gb = {margin_gb}\n")
    env = {"EPS_STATE_DIR": str(tmp_path / "state"), "EPS_CONFIG": str(tmp_path / "config.toml"),
           "HOME": str(tmp_path)}  # fmt: skip
    ledger = Ledger(str(tmp_path / "state"), url=url)
    ledger.new_dispatch("e-held", Job("cpu-small", 60, command=("true",)))
    return Finisher(ledger, Lanes(load_settings(env), LaneOptions(env=env)), wall=lambda: 1234.5), ledger


def _site(tmp_path: Path) -> Site:
    root = tmp_path / "machine" / "e-held" / "0"
    (root / "out").mkdir(parents=True)
    (root / "out" / "model.bin").write_bytes(os.urandom(3 << 20))
    (root / "job.log").write_text("the log\n")
    return Site(Remote.via([]), str(root), runs_here=True)


def test_a_pull_that_would_leave_less_than_the_margin_is_not_started(tmp_path: Path, ledger_url: str | None) -> None:
    finisher, ledger = _finisher(tmp_path, 10**6, ledger_url)  # no disk here keeps a margin of a petabyte free
    row = ledger.dispatch("e-held")
    assert row is not None
    site, out = _site(tmp_path), finisher.outputs_dir("e-held")
    got = finisher.pull_guarded(row, site, out, finisher.log_path("e-held"), held_as="pull")
    assert isinstance(got, Failure) and isinstance(got.failure(), Room)
    room = got.failure()
    assert not room.fits and room.needed >= 3 << 20 and room.margin == 10**6 * 2**30 and room.where == out
    assert not os.path.exists(out) and not os.path.exists(finisher.log_path("e-held"))  # nothing started
    record = held.held(finisher.state_dir)["e-held"]
    assert record == {**room.as_data(), "during": "pull", "at": 1234.5}
    assert oct(os.stat(Path(finisher.state_dir) / "held" / "e-held.json").st_mode & 0o777) == "0o600"

    finisher.site = lambda _row: Success(site)  # type: ignore[method-assign]  # the job's machine: here
    note = finisher.sync(row)  # the same guard, the same line, while a job runs
    assert note == f"sync of the outputs skipped: {room.line()}"
    assert held.held(finisher.state_dir)["e-held"]["during"] == "sync"
    to = tmp_path / "to"  # a --to elsewhere is guarded too, but is no record of the state dir's
    assert isinstance(finisher.pull_guarded(row, site, str(to), str(to / "job.log"), held_as=None), Failure)
    assert held.held(finisher.state_dir)["e-held"]["during"] == "sync" and not to.exists()


def test_a_pull_that_fits_is_done_and_clears_the_record(tmp_path: Path, ledger_url: str | None) -> None:
    finisher, ledger = _finisher(tmp_path, 0, ledger_url)
    row = ledger.dispatch("e-held")
    assert row is not None
    site = _site(tmp_path)
    held.record(finisher.state_dir, "e-held", Room("/x", 5, 1, 0), 1.0, during="sync")
    got = finisher.pull_guarded(row, site, finisher.outputs_dir("e-held"), finisher.log_path("e-held"), held_as="sync")
    assert got == Success(None)
    assert (Path(finisher.outputs_dir("e-held")) / "model.bin").read_bytes() == (
        Path(site.root) / "out" / "model.bin").read_bytes()  # fmt: skip
    assert held.held(finisher.state_dir) == {}


def test_status_shows_a_record_only_while_its_outputs_wait(tmp_path: Path) -> None:
    state = str(tmp_path)
    for d in ("e-run", "e-kept", "e-over"):
        held.record(state, d, Room(f"/s/{d}", 10, 5, 0), 2.0, during="pull")
    (tmp_path / "held" / "e-bad.json").write_text("{not json")
    rows = [
        {"dispatch": "e-run", "state": DispatchState.STARTED.value, "kept_since": None},
        {"dispatch": "e-kept", "state": DispatchState.ENDED.value, "kept_since": 3.0},
        {"dispatch": "e-over", "state": DispatchState.ENDED.value, "kept_since": None},  # pulled, or lost
        {"dispatch": "e-bad", "state": DispatchState.STARTED.value, "kept_since": None},
        {"dispatch": "e-none", "state": DispatchState.STARTED.value, "kept_since": None},
    ]
    held.annotate(state, rows)
    assert [r["held_back"] is not None for r in rows] == [True, True, False, False, False]
    assert rows[0]["held_back"]["needed_bytes"] == 10
    assert rows[0]["held_back"]["line"] == Room("/s/e-run", 10, 5, 0).line()
    held.clear(state, "e-run")
    held.clear(state, "e-run")  # twice is fine
    assert sorted(held.held(state)) == ["e-kept", "e-over"]
    assert json.loads((tmp_path / "held" / "e-kept.json").read_text())["during"] == "pull"


def test_a_record_that_cannot_be_written_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "held").write_text("a file where the folder would be")
    held.record(str(tmp_path), "e-1", Room("/x", 1, 0, 0), 1.0, during="pull")  # no exception
    assert held.held(str(tmp_path)) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held"]
