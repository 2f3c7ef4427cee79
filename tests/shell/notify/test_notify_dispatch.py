"""A dispatch's notifications, sent by its supervisor to a real HTTP receiver (``json://``)
and a real SMTP server (``mailto://``) on loopback, for jobs run for real on the test sshd
behind the local GCP server: started (a paid lane), ended with its code and outputs, failed,
preempted and relaunched, each once; a supervisor killed while a target was down sends the
end after its revival, once; a target that hangs or refuses never delays the dispatch's end
and is tried again; the URL's token is nowhere in the state directory, the processes' argv
or the output.

Uses the test sshd: run under ``flock /tmp/eps-slurm-tests.lock``."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

from notify_support import TOKEN, HttpReceiver, SmtpReceiver, dead_url, notify_config, token_nowhere, wait_for


def _id() -> str:
    return "n" + uuid.uuid4().hex[:10]


def _configure(eps: Any, section: str) -> None:
    eps.config.write_text(eps.config.read_text() + section)


def _gone(eps: Any, within_s: float = 60.0) -> None:
    """The supervisor left by itself (nothing owed any more)."""
    wait_for(lambda: eps.supervisor_pid() is None, within_s, "the supervisor to leave")


def _no_token_anywhere(eps: Any, *outputs: str) -> None:
    token_nowhere(eps.state, *outputs)


def _count(titles: list[str], title: str) -> int:
    return sum(1 for t in titles if t == title)


def test_a_dispatch_that_ends_and_one_that_fails_are_told_once_each_by_webhook_and_email(
    eps: Any, http: HttpReceiver, smtp: SmtpReceiver
) -> None:
    _configure(eps, notify_config([http.url, smtp.url]))
    ok, bad = _id(), _id()
    rc, events, err = eps.execute("--wait", "--dispatch-id", ok, "cpu-small", "--duration", "10m", "--pin", "gcp",
                                  "--", 'echo done > "$EPS_OUTPUT_DIR/result"', timeout_s=180)  # fmt: skip
    assert rc == 0, (events, err)
    ended_at = time.time()
    rc2, events2, err2 = eps.execute("--wait", "--dispatch-id", bad, "cpu-small", "--duration", "10m", "--pin", "gcp",
                                     "--", "echo oops; exit 3", timeout_s=180)  # fmt: skip
    assert rc2 == 3, (events2, err2)
    want = [f"eps {ok}: started on gcp", f"eps {ok}: ended 0", f"eps {bad}: started on gcp",
            f"eps {bad}: failed (exit 3)"]  # fmt: skip
    for r in (http, smtp):
        wait_for(lambda r=r: all(w in r.titles() for w in want), 20, f"every notice at {type(r).__name__}")
    first = next(g for g in http.got if g["title"] == f"eps {ok}: ended 0")
    assert first["path"] == f"/hook/{TOKEN}"
    body = first["message"]
    assert "exit code: 0" in body and f"outputs in {eps.state / 'outputs' / ok}" in body and "lane: gcp" in body, body
    assert (eps.state / "outputs" / ok / "result").read_text() == "done\n"
    failed = next(g for g in http.got if g["title"] == f"eps {bad}: failed (exit 3)")["message"]
    assert "exit code: 3" in failed and f"eps logs {bad} --tail 50" in failed, failed
    mail = next(m for m in smtp.got if m["Subject"] == f"eps {ok}: ended 0")
    assert "exit code: 0" in mail.get_payload(0).get_payload(decode=True).decode()  # type: ignore[union-attr]
    assert time.time() - ended_at < 120
    _no_token_anywhere(eps, err, err2, *(str(e) for e in events + events2))
    _gone(eps)
    for r in (http, smtp):
        assert sorted(r.titles()) == sorted(want), r.titles()  # once each, and nothing else
    _no_token_anywhere(eps)


def test_a_supervisor_killed_while_the_target_was_down_sends_the_end_once_after_its_revival(
    eps: Any, http: HttpReceiver
) -> None:
    _configure(eps, notify_config([http.url]))
    d = _id()
    child = eps.start("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "10m",
                      "--pin", "gcp", "--", "sleep 4")  # fmt: skip
    wait_for(lambda: f"eps {d}: started on gcp" in http.titles(), 90, "the started notice")
    http.mode = "refuse"  # down: every notice is refused from now on
    tried = http.tried
    assert child.wait(120) == 0
    wait_for(lambda: http.tried > tried, 20, "the end's notice to be tried")
    eps.kill_supervisor()  # between the event and a send it could make: its cursor never moved
    time.sleep(1.5)
    assert f"eps {d}: ended 0" not in http.titles()
    http.mode = "ok"
    rc, out, err = eps.run("status", "--json")  # the next eps command revives a supervisor: a notice is owed
    assert rc == 0, err
    wait_for(lambda: f"eps {d}: ended 0" in http.titles(), 30, "the end's notice after the revival")
    _gone(eps)
    assert _count(http.titles(), f"eps {d}: started on gcp") == 1, http.titles()
    assert _count(http.titles(), f"eps {d}: ended 0") == 1, http.titles()
    _no_token_anywhere(eps, out, err)


def test_a_target_that_hangs_or_refuses_never_delays_the_dispatch_and_is_tried_again(
    eps: Any, http: HttpReceiver
) -> None:
    dead = dead_url()
    _configure(eps, notify_config([http.url, dead], timeout='"2s"', retry_for='"25s"'))
    http.mode = "hang"  # takes each request and never answers
    d = _id()
    start = time.monotonic()
    rc, events, err = eps.execute("--wait", "--dispatch-id", d, "cpu-small", "--duration", "10m", "--pin", "gcp",
                                  "--", "true", timeout_s=180)  # fmt: skip
    assert rc == 0, (events, err)
    took = time.monotonic() - start
    row = eps.dispatch(d)
    ended = [e for e in events if e.get("event") == "ended"]
    assert row["state"] == "ended" and ended, events
    # the dispatch ended as soon as its job did (its end read, pulled, released), the sends aside
    assert ended[0]["ts"] - row["ended_at"] < 15, (ended[0]["ts"], row["ended_at"])
    assert http.tried >= 1 and http.got == [], "the hanging target was asked while the job ran"
    http.mode = "ok"
    http.release.set()
    want = [f"eps {d}: started on gcp", f"eps {d}: ended 0"]
    wait_for(lambda: all(w in http.titles() for w in want), 40, "the notices once the target answers again")
    _gone(eps, 150)  # the dead target is given up after retry_for, and the supervisor leaves
    assert sorted(http.titles()) == sorted(want), http.titles()
    log = (eps.state / "logs" / "supervisor.log").read_text()
    port = dead.split(":")[2].split("/")[0]
    assert f"gave up telling json://127.0.0.1:{port}" in log, log
    assert took < 150
    _no_token_anywhere(eps, err, str(events))


def test_a_preempted_restartable_job_is_told_preempted_relaunched_and_ended_once_each(
    eps: Any, http: HttpReceiver, tmp_path: Path, fs: ModuleType
) -> None:
    _configure(eps, notify_config([http.url]))
    d = _id()
    child = eps.start("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "30m",
                      "--restartable", "--pin", "gcp", "--", "sleep 6")  # fmt: skip
    child.wait_event(lambda e: e.get("event") == "started", 90, "the job to start")
    [(zone, name)] = [k for k in eps_gcp(eps).instances if d in k[1]]
    eps_gcp(eps).preempt(zone, name)
    fs.dies_with_its_disk(tmp_path / "gcp-runs" / d)  # as the fault suite's machines do
    wait_for(lambda: f"eps {d}: preempted" in http.titles(), 60, "the preempted notice")
    assert child.wait(180) == 0
    want = [f"eps {d}: started on gcp", f"eps {d}: preempted", f"eps {d}: relaunched", f"eps {d}: started on gcp",
            f"eps {d}: ended 0"]  # fmt: skip
    wait_for(lambda: sorted(http.titles()) == sorted(want), 30, "every notice")
    _gone(eps)
    assert http.titles() == want, http.titles()  # in order, once each (started once per run)
    preempted = next(g for g in http.got if g["title"] == f"eps {d}: preempted")["message"]
    assert "lane: gcp" in preempted and f"eps attach {d}" in preempted, preempted


def eps_gcp(eps: Any) -> Any:
    """The GCP fake this ``eps`` talks to (the fixture's)."""
    return eps._gcp
