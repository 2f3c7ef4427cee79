"""``[state] url`` / ``EPS_STATE_URL``: the ledger in PostgreSQL (tests/pg_support.py's real
server), what eps says when the database cannot be reached, and that no password it was
given is ever shown."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import pytest
from imports import loaded_by
from pg_support import PgServer

from eps.core.model import Job
from eps.core.states import DispatchState
from eps.shell.cli import main
from eps.shell.config.errors import ConfigError
from eps.shell.config.load import load_settings
from eps.shell.config.state_url import redact
from eps.shell.notify import book
from eps.shell.state.ledger import Ledger, StateUnreachable

SECRET = "hunter2-not-shown"  # noqa: S105 (a password eps must never show)
#: A port nothing listens on (the discard port; nothing serves it here).
DOWN = f"postgresql://eps:{SECRET}@127.0.0.1:9/eps"


def _env(tmp_path: Path, url: str | None = None, config: str | None = None) -> dict[str, str]:
    env = {"EPS_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path), "EPS_CONFIG": str(tmp_path / "c.toml")}
    (tmp_path / "c.toml").write_text(config or "")
    if url is not None:
        env["EPS_STATE_URL"] = url
    return env


def test_the_url_comes_from_the_config_and_the_environment_overrides_it(tmp_path: Path) -> None:
    env = _env(tmp_path, config='[state]\nurl = "postgresql://eps@db.example:5432/team"\n')
    assert load_settings(env).state_url == "postgresql://eps@db.example:5432/team"
    assert load_settings({**env, "EPS_STATE_URL": "service=team"}).state_url == "service=team"
    assert load_settings({**env, "EPS_STATE_URL": ""}).state_url is None  # empty: SQLite, as ever
    assert load_settings(_env(tmp_path)).state_url is None


def test_a_url_that_names_no_postgresql_database_is_bad_input_with_its_password_hidden(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError, match=r"@ \$\.state\.url") as info:
        load_settings(_env(tmp_path, config=f'[state]\nurl = "mysql://eps:{SECRET}@db/eps"\n'))
    assert SECRET not in str(info.value) and "***" in str(info.value)
    assert main(["status"], env=_env(tmp_path, f"mysql://eps:{SECRET}@db/eps")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "EPS_STATE_URL" in err and SECRET not in err
    assert not (tmp_path / "state").exists()  # nothing made


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://eps:{SECRET}@db:5432/eps?sslmode=require", "postgresql://eps:***@db:5432/eps?sslmode=require"),
        (f"postgres://eps@db/eps?password={SECRET}&sslmode=require", "postgres://eps@db/eps?password=***&sslmode=require"),
        (f"host=db password='{SECRET} x' dbname=eps", "host=db password=*** dbname=eps"),
        ("postgresql://eps@db/eps", "postgresql://eps@db/eps"),
    ],
)
def test_every_form_of_password_is_redacted(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_an_unreachable_database_is_one_line_exit_1_with_the_url_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(StateUnreachable) as info:
        Ledger(str(tmp_path), url=DOWN)
    assert "unreachable" in str(info.value) and SECRET not in str(info.value)
    env = _env(tmp_path, DOWN)
    assert main(["status"], env=env) == 1  # the environment, not the input (eps.shell.service.errors)
    err = capsys.readouterr().err
    assert err.startswith("eps: error: state database postgresql://eps:***@127.0.0.1:9/eps: unreachable")
    assert err.count("\n") == 1 and SECRET not in err
    assert main(["status", "--json"], env=env) == 1
    doc = json.loads(capsys.readouterr().err)
    assert doc["error"]["code"] == "state_unreachable" and SECRET not in json.dumps(doc)
    assert not list((tmp_path / "state").glob("ledger.sqlite3*"))  # no SQLite ledger in its place


def test_status_reads_the_ledger_in_postgresql_and_makes_no_sqlite_file(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger(str(tmp_path / "state"), url=pg_url)
    ledger.new_dispatch("e-in-pg-1", Job("cpu-small", 60, command=("true",)))
    ledger.close()
    assert main(["status", "--json"], env=_env(tmp_path, pg_url)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "e-in-pg-1" in json.dumps(doc)
    assert not list((tmp_path / "state").glob("ledger.sqlite3*"))


def test_a_password_in_the_url_works_and_is_never_shown(
    tmp_path: Path, pg_server: PgServer, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSFILE")  # no .pgpass: the URL's password or nothing
    name = pg_url.rsplit("/", 1)[1]
    with pytest.raises(StateUnreachable, match=r"password authentication failed|no password supplied") as info:
        Ledger(str(tmp_path), url=pg_server.url(name))
    assert pg_server.password not in str(info.value)
    ledger = Ledger(str(tmp_path), url=pg_server.url(name, password=True))
    assert pg_server.password not in ledger.path and "***" in ledger.path
    ledger.close()


def test_notify_cursors_only_go_forward_on_both_backends(tmp_path: Path, ledger_url: str | None) -> None:
    ledger = Ledger(str(tmp_path), url=ledger_url)
    ledger.new_dispatch("e-n", Job("cpu-small", 60, command=("true",)))
    book.watch(ledger, "e-n", now=5.0)
    book.watch(ledger, "e-n", now=6.0)  # watched anew: one row
    assert book.watched(ledger) == [("e-n", 5.0)] and book.owed(ledger)
    book.advance(ledger, "e-n", "json://127.0.0.1#0", offset=300, pull_done=2.0)
    book.advance(ledger, "e-n", "json://127.0.0.1#0", offset=100, pull_done=3.0)  # a slower writer
    assert book.cursors(ledger, "e-n") == {"json://127.0.0.1#0": book.Cursor(300, 3.0)}
    book.close(ledger, "e-n")
    assert not book.owed(ledger)
    ledger.close()


def test_eps_plan_loads_no_driver_with_a_url_set(tmp_path: Path) -> None:
    """``eps plan`` with ``EPS_STATE_URL`` set: no psycopg, no sqlite3, no attrs (the ledger
    in PostgreSQL is read by execute and status, never by a plan)."""
    env = {"EPS_STATE_DIR": str(tmp_path), "EPS_STATE_URL": DOWN, "HOME": str(tmp_path),
           "PATH": os.environ.get("PATH", "")}  # fmt: skip
    assert loaded_by(("plan", "gpu-1", "--duration", "3h", "--json"), env, ("psycopg", "sqlite3", "attrs")) == []


def test_eps_status_on_postgresql_loads_no_sqlite3(tmp_path: Path, pg_url: str) -> None:
    """``eps status`` on a ledger in PostgreSQL: the SQLite backend (``sqlite3``) is not loaded,
    nor the walk or the job wrapper's render (as on SQLite, tests/cli/test_status_path.py)."""
    state = tmp_path / "state"
    ledger = Ledger(str(state), url=pg_url)
    ledger.new_dispatch("e-shown", Job("cpu-small", 60, command=("true",)))
    ledger.set_dispatch("e-shown", DispatchState.ENDED)  # settled: no supervisor is revived for it
    ledger.close()
    env = {"EPS_STATE_DIR": str(state), "EPS_STATE_URL": pg_url, "HOME": str(tmp_path), "PATH": "",
           "PGPASSFILE": os.environ["PGPASSFILE"]}  # fmt: skip
    assert loaded_by(("status", "--json"), env, ("sqlite3", "eps.core.walk", "eps.core.jobscript")) == []


def test_an_existing_sqlite_ledger_is_not_read_once_a_url_is_set(tmp_path: Path, pg_url: str) -> None:
    state = tmp_path / "state"
    Ledger(str(state)).close()
    old = Ledger(str(state))
    old.new_dispatch("e-local", Job("cpu-small", 60, command=("true",)))
    old.close()
    ledger = Ledger(str(state), url=pg_url)
    assert ledger.dispatches() == []  # the database's, not the file's
    ledger.close()
    with sqlite3.connect(state / "ledger.sqlite3") as db:  # the file is left as it was
        assert db.execute("SELECT id FROM dispatches").fetchall() == [("e-local",)]


def test_a_cut_connection_is_unreachable_in_one_line_and_the_next_call_connects_again(
    tmp_path: Path, pg_server: PgServer, pg_url: str
) -> None:
    ledger = Ledger(str(tmp_path), url=pg_url)
    ledger.new_dispatch("e-cut", Job("cpu-small", 60, command=("true",)))
    name = pg_url.rsplit("/", 1)[1]
    cut = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'eps' AND datname = "
    pg_server.admin(cut + f"'{name}'")  # the server cuts eps's session
    with pytest.raises(StateUnreachable, match="unreachable") as info:
        ledger.dispatches()
    assert "\n" not in str(info.value) and str(info.value).startswith(pg_url)
    assert [d.id for d in ledger.dispatches()] == ["e-cut"]  # connected again
    ledger.close()


def test_a_team_hosts_name_and_lease_come_from_the_config_and_the_environment_overrides_them(tmp_path: Path) -> None:
    config = '[state]\nurl = "postgresql://eps@db/eps"\nhost = "vm-alice"\nlease = "2m"\n'
    settings = load_settings(_env(tmp_path, config=config))
    assert (settings.state_host, settings.state_lease_s) == ("vm-alice", 120.0)
    settings = load_settings({**_env(tmp_path, config=config), "EPS_STATE_HOST": "vm-bob", "EPS_STATE_LEASE": "5s"})
    assert (settings.state_host, settings.state_lease_s) == ("vm-bob", 5.0)
    assert load_settings(_env(tmp_path)).state_lease_s == 60.0


@pytest.mark.parametrize(
    ("config", "env", "said"),
    [
        ('[state]\nhost = "a b"\n', {}, "'a b' cannot name a host"),
        ('[state]\nlease = "0s"\n', {}, "must be positive @ $.state.lease"),
        ("", {"EPS_STATE_HOST": "no/slash"}, "EPS_STATE_HOST: 'no/slash' cannot name a host"),
        ("", {"EPS_STATE_LEASE": "soon"}, "EPS_STATE_LEASE: bad duration 'soon'"),
    ],
)
def test_a_bad_host_name_or_lease_is_one_line(tmp_path: Path, config: str, env: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_settings({**_env(tmp_path, config=config), **env})
