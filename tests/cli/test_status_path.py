"""``eps status`` is called in loops (by agents, by ``watch``): the modules only a launch, a
transfer or a thread pool need stay off its path, so a status against a long history stays
fast (``benchmarks/scale.py``: 100,000 dispatches)."""

from __future__ import annotations

from pathlib import Path

import pytest
from imports import loaded_by

from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.core.outcome import Handle
from eps.core.states import DispatchState
from eps.shell.state.ledger import Ledger

#: What a status (reconcile of the active dispatches, inventory of the usable lanes, the rows)
#: does without: ssh and rsync and the job shipping, the workdir's ignore rules, a thread pool
#: (``concurrent.futures`` brings ``logging``), starting processes, the MCP server, and cattrs
#: (the ledger's rows take the codec's direct path).  With no unsettled dispatch no lane is
#: asked: no lane's module, and not ``returns`` (the lanes' results).  Nor the walk and the
#: router (an attempt's record is :mod:`eps.core.outcome`'s), nor the job wrapper's render and
#: the job's lifecycle (the status words are :mod:`eps.core.ends`').
STATUS_PATH_SPARES = ("eps.shell.remote.ssh", "eps.shell.remote.sync", "eps.shell.lanes.jobs", "pathspec",
                      "concurrent.futures", "logging", "subprocess", "eps.shell.run.finish", "mcp",
                      "cattrs", "returns", "eps.shell.lanes.vm", "eps.shell.lanes.slurm.lane",
                      "eps.shell.lanes.gcp.lane", "eps.shell.lanes.runpod.lane", "eps.core.walk",
                      "eps.core.router", "eps.core.jobscript", "eps.core.lifecycle")  # fmt: skip


def _status_path_modules(state: Path, home: Path) -> list[str]:
    return loaded_by(["status", "--json"], {"EPS_STATE_DIR": str(state), "HOME": str(home), "PATH": ""},
                     STATUS_PATH_SPARES)  # fmt: skip


def test_status_imports_no_launch_or_transfer_machinery(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "state"))
    for i in range(3):
        ledger.new_dispatch(f"e-done-{i}", Job("cpu-small", 60, command=("true",)))
        ledger.set_dispatch(f"e-done-{i}", DispatchState.WALKING)
        if i == 0:  # one that ran somewhere: its handle is read and shown
            handle = Handle("gcp", LaneKind.GCP, "eps-e-done-0", "gcp/e2-standard-4/us-central1-a/spot")
            ledger.set_dispatch(f"e-done-{i}", DispatchState.STARTED, handle=handle)
        ledger.set_dispatch(f"e-done-{i}", DispatchState.ENDED)
    ledger.close()
    assert _status_path_modules(tmp_path / "state", tmp_path) == []


def test_status_asks_only_the_lanes_its_unsettled_dispatches_are_on(tmp_path: Path) -> None:
    """A walk that died on the VM lane (its attempt recorded, nothing running): status's
    reconcile settles it as before (interrupted), with RunPod set up here (a key) and yet not
    built (so not imported): only the lanes the unsettled rows' handles and attempts are on
    are asked.  Without the restriction (every other reconcile) RunPod is built and asked."""
    from eps.shell.config.load import load_settings
    from eps.shell.lanes import LaneOptions, Lanes
    from eps.shell.run.reconcile import Reconciler
    from eps.shell.state.events import Silent

    state = tmp_path / "state"
    env = {"EPS_STATE_DIR": str(state), "HOME": str(tmp_path), "PATH": "", "RUNPOD_API_KEY": "rp-test-key"}
    ledger = Ledger(str(state))
    ledger.new_dispatch("e-vm", Job("cpu-small", 30, command=("true",)))
    ledger.set_dispatch("e-vm", DispatchState.WALKING)
    ledger.begin_attempt("e-vm", Rung("vm", LaneKind.VM, Provisioning.ON_DEMAND, "trivial"), "eps-e-vm-1")
    closed = b'[runpod]\nbase_url = "http://127.0.0.1:9"\n'  # nothing listens: never the real API
    lanes = Lanes(load_settings(env, text=closed), LaneOptions(env=env))
    assert lanes.down("runpod") is None  # set up here: a reconcile of every lane builds it
    report = Reconciler(ledger, lanes, Silent(), answer_within_s=5.0, used_lanes_only=True).reconcile()
    assert sorted(lanes._built) == ["vm"], lanes._built
    assert report["interrupted"] == ["e-vm"], report
    row = ledger.dispatch("e-vm")
    assert row is not None and row.state is DispatchState.INTERRUPTED, row
    assert [a.state.value for a in ledger.attempts("e-vm")] == ["gone"]
    Reconciler(ledger, lanes, Silent(), answer_within_s=1.0).reconcile()
    assert sorted(lanes._built) == ["runpod", "vm"], lanes._built  # the full inventory asks every usable lane
    lanes.close()
    ledger.close()


def test_status_asks_no_lane_for_a_dispatch_its_walker_holds(tmp_path: Path) -> None:
    """A dispatch whose walker (its supervisor) holds its lock is skipped by status's reconcile,
    as before, and now its lane is not asked either; once the lock is free it is settled."""
    import fcntl

    from eps.shell.config.load import load_settings
    from eps.shell.lanes import LaneOptions, Lanes
    from eps.shell.run.reconcile import Reconciler
    from eps.shell.state.events import Silent

    state = tmp_path / "state"
    env = {"EPS_STATE_DIR": str(state), "HOME": str(tmp_path), "PATH": ""}
    ledger = Ledger(str(state))
    ledger.new_dispatch("e-held", Job("cpu-small", 30, command=("true",)))
    ledger.set_dispatch("e-held", DispatchState.WALKING)
    ledger.begin_attempt("e-held", Rung("vm", LaneKind.VM, Provisioning.ON_DEMAND, "trivial"), "eps-e-held-1")
    lanes = Lanes(load_settings(env), LaneOptions(env=env))
    with open(state / "locks" / "e-held.lock", "a+") as walker:  # another open file: another process's lock
        fcntl.flock(walker, fcntl.LOCK_EX | fcntl.LOCK_NB)
        report = Reconciler(ledger, lanes, Silent(), used_lanes_only=True).reconcile()
        assert report["skipped"] == ["e-held: being walked by another eps process"], report
        assert lanes._built == {}, lanes._built
        row = ledger.dispatch("e-held")
        assert row is not None and row.state is DispatchState.WALKING
    report = Reconciler(ledger, lanes, Silent(), used_lanes_only=True).reconcile()
    assert report["interrupted"] == ["e-held"], report
    assert sorted(lanes._built) == ["vm"], lanes._built
    lanes.close()
    ledger.close()


def test_a_lane_whose_listing_raises_is_noted_and_nothing_is_judged_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Status asks each lane in a thread of its own; a listing that raises (a late one meets
    its lane's client closed after the command ended: ``RuntimeError`` from httpx) is noted
    on that lane, as one that did not answer, with the exception's type and not its text,
    and never escapes its thread; what the lane holds is shown as the ledger has it."""
    import threading

    from eps.shell.config.load import load_settings
    from eps.shell.lanes import LaneOptions, Lanes
    from eps.shell.lanes.vm import VmLane
    from eps.shell.run.reconcile import Reconciler
    from eps.shell.state.events import Silent

    def closed(self: VmLane, dispatch: str | None) -> None:
        raise RuntimeError("Cannot send a request, as the client has been closed. http://x/?k=secret")

    escaped: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", escaped.append)
    monkeypatch.setattr(VmLane, "inventory", closed)
    state = tmp_path / "state"
    env = {"EPS_STATE_DIR": str(state), "HOME": str(tmp_path), "PATH": ""}
    ledger = Ledger(str(state))
    ledger.new_dispatch("e-vm", Job("cpu-small", 30, command=("true",)))
    ledger.set_dispatch("e-vm", DispatchState.WALKING)
    ledger.begin_attempt("e-vm", Rung("vm", LaneKind.VM, Provisioning.ON_DEMAND, "trivial"), "eps-e-vm-1")
    lanes = Lanes(load_settings(env), LaneOptions(env=env))
    report = Reconciler(ledger, lanes, Silent(), answer_within_s=5.0, used_lanes_only=True).reconcile()
    assert escaped == []
    said = report["unchecked"]["vm"]
    assert said.startswith("could not be listed (RuntimeError)") and "secret" not in said, report
    row = ledger.dispatch("e-vm")
    assert row is not None and row.state is DispatchState.WALKING, row  # not judged: its lane was not read
    assert [a.state.value for a in ledger.attempts("e-vm")] != ["gone"]
    lanes.close()
    ledger.close()
