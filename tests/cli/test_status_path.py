"""``eps status`` is called in loops (by agents, by ``watch``): the modules only a launch, a
transfer or a thread pool need stay off its path, so a status against a long history stays
fast (``benchmarks/scale.py``: 100,000 dispatches)."""

from __future__ import annotations

from pathlib import Path

from imports import loaded_by

from eps.core.model import Job, LaneKind
from eps.core.outcome import Handle
from eps.core.states import DispatchState
from eps.shell.state.ledger import Ledger

#: What a status (reconcile of the active dispatches, inventory of the usable lanes, the rows)
#: does without: ssh and rsync and the job shipping, the workdir's ignore rules, a thread pool
#: (``concurrent.futures`` brings ``logging``), starting processes, the MCP server, and cattrs
#: (the ledger's rows take the codec's direct path).
STATUS_PATH_SPARES = ("eps.shell.remote.ssh", "eps.shell.remote.sync", "eps.shell.lanes.jobs", "pathspec",
                      "concurrent.futures", "logging", "subprocess", "eps.shell.run.finish", "mcp",
                      "cattrs")  # fmt: skip


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
