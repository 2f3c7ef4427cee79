"""``eps status`` on a team's ledger (PostgreSQL shared by hosts): every dispatch, each with who
started it and from which host (``started_by``) and the host that holds it now (``owner``;
the table's ``started by`` column, ``user@host``, and ``(now HOST)`` after a takeover; a
SQLite ledger's table has no such column); ``--mine`` this host's alone, ``--host NAME``
that host's (the host holding each now); the two together are a usage error (exit 2).  The
MCP tool and the Python API take the same filters.  A cancel of another user's dispatch
asks for ``--force`` (``force``) at every door and is recorded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import eps
from eps.core.lease import LeaseTerms
from eps.core.model import Job
from eps.core.states import DispatchState
from eps.shell.state.ledger import Ledger
from eps.shell.state.team import Team, others_of, share


def _dispatch(ledger: Ledger, d: str) -> None:
    ledger.new_dispatch(d, Job("cpu-small", 60, command=("true",)))
    share(ledger, d, "{}", 60.0, user=f"user-of-{ledger.host}")
    ledger.set_dispatch(d, DispatchState.FAILED, message="done")  # settled: nothing to revive or reconcile


def _env(tmp_path: Path, url: str | None, host: str) -> dict[str, str]:
    (tmp_path / "none.toml").write_text("")
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "EPS_STATE_DIR": str(tmp_path / host),
            "EPS_CONFIG": str(tmp_path / "none.toml"),
            **({"EPS_STATE_URL": url, "EPS_STATE_HOST": host, "PGPASSFILE": os.environ["PGPASSFILE"]} if url else {})}


def _status(tmp_path: Path, url: str | None, host: str, *args: str, json_out: bool = True) -> tuple[int, str, str]:
    env = _env(tmp_path, url, host)
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
    assert rows == {r["dispatch"]: r["started_by"] for r in json.loads(out)["dispatches"]}  # none taken over
    assert rows == {"eteama0001": {"host": "host-a", "user": "user-of-host-a"},
                    "eteama0002": {"host": "host-a", "user": "user-of-host-a"},
                    "eteamb0001": {"host": "host-b", "user": "user-of-host-b"}}  # fmt: skip
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--mine")
    assert rc == 0 and [r["dispatch"] for r in json.loads(out)["dispatches"]] == ["eteamb0001"], (out, err)
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--host", "host-a", "--limit", "1")
    assert rc == 0 and [r["dispatch"] for r in json.loads(out)["dispatches"]] == ["eteama0002"], (out, err)
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--host", "host-a", json_out=False)  # the table
    assert rc == 0 and "eteama0001" in out and "eteamb0001" not in out, (out, err)
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--wide", json_out=False)  # whose each one is
    head, *lines = out.splitlines()
    assert rc == 0 and head.split()[:3] == ["dispatch", "started", "by"], (out, err)
    owner_of = {line.split()[0]: line.split()[1] for line in lines if line.startswith("eteam")}
    assert owner_of == {"eteama0001": "user-of-host-a@host-a", "eteama0002": "user-of-host-a@host-a",
                        "eteamb0001": "user-of-host-b@host-b"}, out  # fmt: skip
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--mine", "--host", "host-a")
    assert rc == 2 and out == "", (out, err)
    assert json.loads(err)["error"] == {"code": "usage", "text": "eps status: --mine or --host NAME, not both"}


def test_a_dispatch_taken_over_keeps_who_started_it(tmp_path: Path, pg_url: str) -> None:
    """Host A (alice) starts a dispatch; its lease runs out and host B (bob) takes it over as a
    supervisor does (:meth:`Team.take`): ``started_by`` stays alice on A, ``owner`` is bob on
    B; the table says both; ``--mine`` on B (the host holding it now) lists it, on A not."""
    a = Ledger(str(tmp_path / "host-a"), url=pg_url, host="host-a")
    b = Ledger(str(tmp_path / "host-b"), url=pg_url, host="host-b")
    try:
        a.new_dispatch("eteama0001", Job("cpu-small", 60, command=("true",)))
        share(a, "eteama0001", "{}", 0.0, user="alice")  # a lease that has run out: A is lost
        _dispatch(a, "eteama0002")  # A's own, never taken over
        team = Team(b, LeaseTerms(60.0), user="bob")
        assert team.take("eteama0001")
        share(b, "eteama0001", "{}", 60.0, user="bob")  # a later share (B relaunching it) keeps the starter too
        # eps cancel's "another user's dispatch" asks who started it, not who holds it now
        assert [(d, o.starter()) for d, o in others_of(b, ["eteama0001"], {"LOGNAME": "bob"})] == [
            ("eteama0001", ("alice", "host-a"))]  # fmt: skip
        assert others_of(b, ["eteama0001"], {"LOGNAME": "alice"}) == []
        b.set_dispatch("eteama0001", DispatchState.FAILED, message="done")
    finally:
        a.close()
        b.close()
    rc, out, err = _status(tmp_path, pg_url, "host-b")
    assert rc == 0, err
    import jsonschema

    schema = json.loads((Path(eps.__file__).parent / "schemas" / "status.json").read_text())
    jsonschema.validate(json.loads(out), schema)  # started_by and owner are the schema's
    rows = {r["dispatch"]: (r["started_by"], r["owner"]) for r in json.loads(out)["dispatches"]}
    assert rows == {"eteama0001": ({"host": "host-a", "user": "alice"}, {"host": "host-b", "user": "bob"}),
                    "eteama0002": ({"host": "host-a", "user": "user-of-host-a"},
                                   {"host": "host-a", "user": "user-of-host-a"})}, rows  # fmt: skip
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--wide", json_out=False)
    assert rc == 0, err
    cell = {line.split()[0]: re.split(r"\s{2,}", line)[1] for line in out.splitlines() if line.startswith("eteam")}
    assert cell == {"eteama0001": "alice@host-a (now bob@host-b)", "eteama0002": "user-of-host-a@host-a"}, out
    rc, out, err = _status(tmp_path, pg_url, "host-b", "--mine")
    assert rc == 0 and [r["dispatch"] for r in json.loads(out)["dispatches"]] == ["eteama0001"], (out, err)
    rc, out, err = _status(tmp_path, pg_url, "host-a", "--mine")
    assert rc == 0 and [r["dispatch"] for r in json.loads(out)["dispatches"]] == ["eteama0002"], (out, err)


def _tool(env: dict[str, str], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    from eps.shell.mcp.server import build
    from eps.shell.service.operations import Service

    result = anyio.run(build(Service(dict(env))).call_tool, name, arguments)
    doc: dict[str, Any] = result.structured_content
    assert result.is_error == ("error" in doc), doc
    return doc


def test_the_mcp_tool_and_the_python_api_filter_as_the_command_does(tmp_path: Path, pg_url: str) -> None:
    a = Ledger(str(tmp_path / "host-a"), url=pg_url, host="host-a")
    b = Ledger(str(tmp_path / "host-b"), url=pg_url, host="host-b")
    try:
        _dispatch(a, "eteama0001")
        _dispatch(b, "eteamb0001")
    finally:
        a.close()
        b.close()
    env = _env(tmp_path, pg_url, "host-b")
    mine = _tool(env, "status", {"mine": True})
    assert [r["dispatch"] for r in mine["dispatches"]] == ["eteamb0001"], mine
    theirs = _tool(env, "status", {"host": "host-a"})
    assert [(r["dispatch"], r["owner"]) for r in theirs["dispatches"]] == [
        ("eteama0001", {"host": "host-a", "user": "user-of-host-a"})], theirs  # fmt: skip
    both = _tool(env, "status", {"mine": True, "host": "host-a"})
    assert both["error"] == {"code": "usage", "text": "status: mine or host NAME, not both"}, both
    assert [r["dispatch"] for r in eps.status(env=env, mine=True)] == ["eteamb0001"]
    assert [r["dispatch"] for r in eps.status(env=env, host="host-a")] == ["eteama0001"]
    assert len(eps.status(env=env)) == 2


def test_a_ledger_no_other_host_shares_has_no_owner_column(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "solo"))
    try:
        ledger.new_dispatch("esolo00001", Job("cpu-small", 60, command=("true",)))
        ledger.set_dispatch("esolo00001", DispatchState.FAILED, message="done")
    finally:
        ledger.close()
    rc, out, err = _status(tmp_path, None, "solo", "--wide", json_out=False)
    head = out.splitlines()[0].split()
    assert rc == 0 and head[:2] == ["dispatch", "intent"] and "by" not in head, (out, err)
    rc, out, err = _status(tmp_path, None, "solo")
    assert rc == 0 and not {"owner", "started_by"} & set(json.loads(out)["dispatches"][0]), out
    rc, out, err = _status(tmp_path, None, "solo", "--mine")  # on one host every dispatch is this host's
    assert rc == 0 and [r["dispatch"] for r in json.loads(out)["dispatches"]] == ["esolo00001"], (out, err)


def _waiting(ledger: Ledger, d: str, user: str) -> None:
    """A dispatch of ``user`` waiting for capacity (live, and nothing at a provider to release)."""
    ledger.new_dispatch(d, Job("cpu-small", 60, command=("true",)))
    share(ledger, d, "{}", 60.0, user=user)
    ledger.wait_for_capacity(d, 4e9, "no capacity")


def _cancel(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    argv = [sys.executable, "-c", "from eps.shell.cli import entry; entry()", "cancel", *args]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    return p.returncode, p.stdout, p.stderr


def test_cancelling_another_users_dispatch_asks_for_force_and_records_who_did(tmp_path: Path, pg_url: str) -> None:
    a = Ledger(str(tmp_path / "host-a"), url=pg_url, host="host-a")
    b = Ledger(str(tmp_path / "host-b"), url=pg_url, host="host-b")
    try:
        for d in ("eteama0001", "eteama0002", "eteama0003"):
            _waiting(a, d, "alice")
        _waiting(b, "eteamb0001", "bob")
    finally:
        a.close()
        b.close()
    env = {**_env(tmp_path, pg_url, "host-b"), "LOGNAME": "bob", "USER": "bob"}  # host B is bob's
    (tmp_path / "none.toml").write_text('[jobs]\nsupervise = "inline"\n')  # nothing revived by a status here

    def rows() -> dict[str, tuple[str, str | None]]:
        led = Ledger(str(tmp_path / "look"), url=pg_url, host="look")
        try:
            return {str(r[0]): (str(r[1]), r[2]) for r in led.rows("SELECT id, state, cancelled_by FROM dispatches")}
        finally:
            led.close()

    before = rows()
    for args in (("--all",), ("eteama0001", "--json")):
        rc, out, err = _cancel(env, *args)
        assert rc == 2 and out == "" and err.count("\n") == 1, (args, out, err)
        assert "eteama000" in err and "alice on host-a" in err and "--force" in err, err
        assert rows() == before, args  # nothing changed
    assert json.loads(err)["error"]["code"] == "not_yours", err
    rc, out, err = _cancel(env, "eteamb0001", "--json")  # bob's own: no --force needed
    assert rc == 0 and json.loads(out)["cancelled"] == ["eteamb0001"], (out, err)
    rc, out, err = _cancel(env, "eteama0001", "--force", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["cancelled"] == ["eteama0001"], (out, err)
    assert doc["cancelled_by"] == {"user": "bob", "host": "host-b"}, doc
    rc, out, err = _status(tmp_path, pg_url, "host-b", "eteama0001")
    [row] = json.loads(out)["dispatches"]
    assert row["state"] == "cancelled" and row["cancelled_by"] == {"user": "bob", "host": "host-b"}, row
    assert row["owner"] == {"host": "host-a", "user": "alice"}, row  # whose it was stays
    assert rows()["eteama0002"] == ("waiting", None)
    refused = _tool(env, "cancel", {"dispatch": "eteama0002"})  # the MCP tool asks the same
    assert refused["error"]["code"] == "not_yours", refused
    assert rows()["eteama0002"] == ("waiting", None)
    forced = _tool(env, "cancel", {"dispatch": "eteama0002", "force": True})
    assert forced["cancelled"] == ["eteama0002"] and forced["cancelled_by"] == {"user": "bob", "host": "host-b"}
    assert json.loads(rows()["eteama0002"][1] or "{}") == {"user": "bob", "host": "host-b"}
    with pytest.raises(eps.JobError) as refused_here:  # and the Python API
        eps.cancel("eteama0003", env=env)
    assert refused_here.value.code == "not_yours" and rows()["eteama0003"] == ("waiting", None)
    assert eps.cancel("eteama0003", force=True, env=env)["cancelled"] == ["eteama0003"]
    assert rows()["eteama0003"][0] == "cancelled"
