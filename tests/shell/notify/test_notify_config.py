"""``[notify]`` read from the config (one line per mistake, never the URL), ``eps notify
test`` against a real SMTP server, a real HTTP receiver and a dead port, the kept config
without the URLs, the ledger's new rows, and ``eps plan`` loading none of it.  No sshd, no
cluster: these need no lock."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from notify_support import TOKEN, HttpReceiver, SmtpReceiver, dead_url, notify_config, wait_for

from eps.shell.cli import main
from eps.shell.config.notify import EVENT_NAMES, NotifyDoc, NotifySettings, notify_settings, safe_name
from eps.shell.config.settings import ConfigError

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))

from imports import loaded_by  # noqa: E402


def env_with(tmp: Path, config: str) -> dict[str, str]:
    (tmp / "config.toml").write_text(config)
    (tmp / "bin").mkdir(exist_ok=True)
    return {"HOME": str(tmp), "PATH": str(tmp / "bin"), "EPS_STATE_DIR": str(tmp / "state"),
            "EPS_CONFIG": str(tmp / "config.toml")}  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    rc = main(argv, env=env)
    out, err = capsys.readouterr()
    return rc, out, err


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "eps" / "schemas" / "notify.json").read_text())
    jsonschema.Draft202012Validator.check_schema(data)
    return data


# --- the section -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        (NotifyDoc(urls=[" "]), "may not be blank @ $.notify.urls[0]"),
        (NotifyDoc(urls=["json://127.0.0.1:1/ok", f"no url {TOKEN}"]), "urls[1] (not scheme://...) is not an apprise"),
        (NotifyDoc(urls=[f"json://127.0.0.1:1/a b/{TOKEN}"]), "urls[0] (json://127.0.0.1:1) is not an apprise URL"),
        (NotifyDoc(events=["ended", "faild"]), "no event 'faild'; did you mean failed?"),
        (NotifyDoc(retry_for="soon"), "@ $.notify.retry_for"),
        (NotifyDoc(timeout=0), "must be positive @ $.notify.timeout"),
    ],
)
def test_a_bad_notify_section_is_one_line_naming_the_place_never_the_url(doc: NotifyDoc, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        notify_settings(NotifySettings(), doc, "cfg.toml")
    text = str(err.value)
    assert says in text and "\n" not in text and TOKEN not in text, text


def test_the_defaults_send_every_event_and_a_list_narrows_them() -> None:
    s = notify_settings(NotifySettings(), NotifyDoc(urls=["json://h.example/x"]), "c")
    assert s.wanted() == frozenset(EVENT_NAMES) and s.retry_for_s == 3600 and s.timeout_s == 10
    s = notify_settings(NotifySettings(), NotifyDoc(events=["failed", "ended", "failed"], timeout="3s"), "c")
    assert s.events == ("failed", "ended") and s.wanted() == {"failed", "ended"} and s.timeout_s == 3


@pytest.mark.parametrize(
    ("url", "name"),
    [
        (f"json://127.0.0.1:8080/hook/{TOKEN}?x=1", "json://127.0.0.1:8080"),
        (f"mailto://me:{TOKEN}@smtp.example.com:587?to=a@b.c", "mailto://smtp.example.com:587"),
        (f"tgram://123456789:{TOKEN}/42", "tgram://***"),
        (f"slack://{TOKEN}/B1/C1", "slack://***"),
        (f"ntfy://{TOKEN}", "ntfy://***"),
        (f"https://hooks.slack.com/services/{TOKEN}", "https://hooks.slack.com"),
        (f"json://[::1]:9/{TOKEN}", "json://[::1]:9"),
    ],
)
def test_a_target_is_named_by_scheme_and_host_only(url: str, name: str) -> None:
    assert safe_name(url) == name


def test_a_url_apprise_cannot_read_stops_execute_with_one_line_and_nothing_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = env_with(tmp_path, notify_config([f"jsno://127.0.0.1:9/hook/{TOKEN}"]))
    rc, out, err = run(capsys, ["plan", "cpu-small", "--duration", "10m"], env)
    assert rc == 0  # eps plan does not load apprise: its check is the hand-over's
    rc, out, err = run(capsys, ["execute", "cpu-small", "--duration", "10m", "--detach", "--", "true"], env)
    assert rc == 2, (out, err)
    assert err.count("\n") == 1 and "urls[0] (jsno://127.0.0.1:9): apprise cannot read this URL" in err, err
    assert TOKEN not in out + err
    ledger = tmp_path / "state" / "ledger.sqlite3"
    if ledger.exists():
        with sqlite3.connect(ledger) as db:
            assert db.execute("SELECT count(*) FROM dispatches").fetchone()[0] == 0
    assert not (tmp_path / "state" / "inputs").exists() or not any((tmp_path / "state" / "inputs").iterdir())


def test_a_malformed_url_or_event_fails_every_command_at_config_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = env_with(tmp_path, notify_config(["json://127.0.0.1:9/x"], events='["ended", "stalld"]'))
    rc, _out, err = run(capsys, ["plan", "cpu-small", "--duration", "10m"], env)
    assert rc == 2 and err.count("\n") == 1 and "did you mean stalled?" in err, err
    env = env_with(tmp_path, notify_config([f"127.0.0.1/{TOKEN}"]))
    rc, _out, err = run(capsys, ["status"], env)
    assert rc == 2 and err.count("\n") == 1 and "is not an apprise URL" in err and TOKEN not in err, err


# --- eps notify test -------------------------------------------------------------------------


def test_notify_test_reaches_the_smtp_server_and_the_webhook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], http: HttpReceiver, smtp: SmtpReceiver
) -> None:
    env = env_with(tmp_path, notify_config([http.url, smtp.url]))
    rc, out, err = run(capsys, ["notify", "test", "--json"], env)
    assert rc == 0, (out, err)
    doc = json.loads(out)
    jsonschema.validate(doc, schema(), cls=jsonschema.Draft202012Validator)
    assert [t["target"] for t in doc["targets"]] == [f"json://127.0.0.1:{http.port}", f"mailto://127.0.0.1:{smtp.port}"]
    assert doc["answered"] == doc["total"] == 2 and all(t["answered"] for t in doc["targets"])
    assert http.titles() == ["eps: test notification"] and http.got[0]["path"] == f"/hook/{TOKEN}"
    wait_for(lambda: smtp.titles() == ["eps: test notification"], 5, "the test e-mail")
    assert TOKEN not in out + err


def test_notify_test_names_the_target_that_did_not_answer_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], http: HttpReceiver
) -> None:
    dead = dead_url()
    env = env_with(tmp_path, notify_config([http.url, dead], timeout='"2s"'))
    rc, out, err = run(capsys, ["notify", "test"], env)
    assert rc == 1, (out, err)
    port = dead.split(":")[2].split("/")[0]
    assert f"json://127.0.0.1:{http.port}  answered" in out
    assert f"json://127.0.0.1:{port}  did not answer" in out and "1 of 2 target(s) answered" in out, out
    assert TOKEN not in out + err
    http.mode = "hang"  # a target that takes the request and never answers: bounded by the timeout
    rc, out, err = run(capsys, ["notify", "test", "--json"], env)
    doc = json.loads(out)
    assert rc == 1 and doc["answered"] == 0, doc
    assert all(t["seconds"] is None or t["seconds"] < 10 for t in doc["targets"]), doc


def test_notify_test_without_targets_is_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _out, err = run(capsys, ["notify", "test"], env_with(tmp_path, "[notify]\nevents = ['ended']\n"))
    assert rc == 2 and "no [notify] urls" in err


# --- what is kept; the ledger; eps plan ----------------------------------------------------------


def test_the_kept_config_has_the_urls_taken_out_and_reads_the_same_otherwise(tmp_path: Path) -> None:
    from eps.shell.notify.keep import PLACEHOLDER, kept_config

    text = (f'# see json://127.0.0.1:9/hook/{TOKEN}\n[jobs]\nlinger_s = 5\n'
            + notify_config([f"json://127.0.0.1:9/hook/{TOKEN}", f"json://127.0.0.1:9/hook/{TOKEN}/more"]))  # fmt: skip
    kept = kept_config(text.encode(), "c").decode()
    assert TOKEN not in kept and PLACEHOLDER.format(i=1) in kept and "linger_s = 5" in kept
    escaped = notify_config(["json://127.0.0.1:9/\\u0074ok"])
    with pytest.raises(ConfigError, match="plain TOML string"):
        kept_config(escaped.encode(), "c")


def test_an_older_ledger_is_upgraded_with_the_notify_tables(tmp_path: Path) -> None:
    from eps.shell.notify import book
    from eps.shell.state.ledger import Ledger
    from eps.shell.state.migrations import MIGRATIONS

    path = tmp_path / "ledger.sqlite3"
    db = sqlite3.connect(path)
    for v in range(1, 7):
        MIGRATIONS[v](db)
    db.execute("PRAGMA user_version = 6")
    db.commit()
    db.close()
    ledger = Ledger(str(tmp_path))
    try:
        assert not book.owed(ledger)
        book.watch(ledger, "d1", now=1.0)
        book.advance(ledger, "d1", "json://127.0.0.1:9#0", offset=120)
        book.advance(ledger, "d1", "json://127.0.0.1:9#0", offset=80, pull_done=5.0)  # never back
        assert book.owed(ledger) and book.watched(ledger) == [("d1", 1.0)]
        assert book.cursors(ledger, "d1") == {"json://127.0.0.1:9#0": book.Cursor(120, 5.0)}
        book.close(ledger, "d1")
        assert not book.owed(ledger)
    finally:
        ledger.close()


def test_eps_plan_loads_no_part_of_notifications(tmp_path: Path) -> None:
    env = env_with(tmp_path, notify_config([f"json://127.0.0.1:9/hook/{TOKEN}"]))
    among = ["apprise", "eps.shell.notify", "eps.shell.notify.pump", "eps.shell.notify.targets", "aiosmtpd"]
    assert loaded_by(["plan", "cpu-small", "--duration", "10m"], env, among) == []
