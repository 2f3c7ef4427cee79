"""``eps status`` on a team's ledger (PostgreSQL shared by hosts): every dispatch, each with its
owner host and user; ``--mine`` this host's alone, ``--host NAME`` that host's; the two
together are a usage error (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from eps.core.model import Job
from eps.core.states import DispatchState
from eps.shell.state.ledger import Ledger
from eps.shell.state.team import share


def _dispatch(ledger: Ledger, d: str) -> None:
    ledger.new_dispatch(d, Job("cpu-small", 60, command=("true",)))
    share(ledger, d, "{}", 60.0, user=f"user-of-{ledger.host}")
    ledger.set_dispatch(d, DispatchState.FAILED, message="done")  # settled: nothing to revive or reconcile


def _status(tmp_path: Path, url: str, host: str, *args: str, json_out: bool = True) -> tuple[int, str, str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "EPS_STATE_DIR": str(tmp_path / host),
           "EPS_STATE_URL": url, "EPS_STATE_HOST": host, "PGPASSFILE": os.environ["PGPASSFILE"],
           "EPS_CONFIG": str(tmp_path / "none.toml")}  # fmt: skip
    (tmp_path / "none.toml").write_text("")
    argv = [sys.executable, "-c", "from eps.shell.cli import entry; entry()", "status", *(["--json"] * json_out), *args]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    return p.returncode, p.stdout, p.stderr


def test_status_shows_each_dispatchs_owner_and_filters_by_host(tmp_path: Path, pg_url: str) -> None:
    a = Ledger(str(tmp_path / "host-a"), url=pg_url, host="host-a")
    b = Ledger(str(tmp_path / "host-b"), url=pg_url, host="host-b")
    try:
        _dispatch(a, "eteama0001")
        _dispatch(a, "eteama0002")
        _dispatch(b, "eteamb0001")
    finally:
        a.close()
        b.close()
    rc, out, err = _status(tmp_path, pg_url, "host-b")
    assert rc == 0, err
    rows = {r["dispatch"]: r["owner"] for r in json.loads(out)["dispatches"]}
    assert rows == {"eteama0001": {"host": "host-a", "user": "user-of-host-a"},
                    "eteama0002": {"host": "host-a", "user": "user-of-host-a"},
                    "eteamb0001": {"host": "host-b", "user": "user-of-host-b"}}  # fmt: skip
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--mine")
    assert rc == 0 and [r["dispatch"] for r in json.loads(out)["dispatches"]] == ["eteamb0001"], (out, err)
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--host", "host-a", "--limit", "1")
    assert rc == 0 and [r["dispatch"] for r in json.loads(out)["dispatches"]] == ["eteama0002"], (out, err)
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--host", "host-a", json_out=False)  # the table
    assert rc == 0 and "eteama0001" in out and "eteamb0001" not in out, (out, err)
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--mine", "--host", "host-a")
    assert rc == 2 and out == "", (out, err)
    assert json.loads(err)["error"] == {"code": "usage", "text": "eps status: --mine or --host NAME, not both"}
