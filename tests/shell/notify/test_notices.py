"""The fold of a dispatch's event log into notices (pure): which events are told, once,
with the dispatch, what happened, the lane and the next command.  Each case is an event
log (as the supervisor writes it) and the notices it must give."""

from __future__ import annotations

from typing import Any

import pytest

from eps.shell.config.notify import EVENT_NAMES
from eps.shell.notify.notices import fold, unpulled
from eps.shell.state.events import read_placed

ALL = frozenset(EVENT_NAMES)
GCP = {"lane": "gcp", "kind": "gcp", "id": "eps-d-1", "rung": "gcp:e2-standard-4:us-central1-a:spot"}
FELLOWS = {"lane": "fellows", "kind": "slurm", "id": "123", "rung": "fellows:high-eur"}
VM = {"lane": "vm", "kind": "vm", "id": "local", "rung": "vm"}


def ev(event: str, **fields: Any) -> dict[str, Any]:
    return {"schema_version": 1, "event": event, "ts": 100.0, "dispatch": "d", **fields}


def placed(*records: dict[str, Any]) -> list[tuple[int, int, dict[str, Any]]]:
    return [(i * 10, i * 10 + 10, r) for i, r in enumerate(records)]


ENDED_OK = ev("ended", message="succeeded; outputs in /s/outputs/d", exit_code=0, job_status="exited", lane="gcp",
              pulled=True, outputs="/s/outputs/d")  # fmt: skip
ENDED_3 = ev("ended", message="failed (exit 3)", exit_code=3, job_status="exited", lane="gcp", pulled=True,
             outputs="/s/outputs/d")  # fmt: skip

CASES = [
    ("a paid lane's start and its end", [ev("dispatch"), ev("started", handle=GCP), ENDED_OK],
     [("started", "eps d: started on gcp"), ("ended", "eps d: ended 0")]),
    ("the VM lane's start is not told; its failure is", [ev("dispatch"), ev("started", handle=VM), ENDED_3],
     [("failed", "eps d: failed (exit 3)")]),
    ("a cluster start is told only after a park",
     [ev("dispatch"), ev("started", handle=FELLOWS), ev("relaunched", restart=1), ev("parked", rung="fellows:high-eur"),
      ev("started", handle=FELLOWS)],
     [("relaunched", "eps d: relaunched"), ("started", "eps d: started on fellows")]),
    ("parked past the first cap: the first advance of a run only",
     [ev("dispatch"), ev("parked"), ev("advanced", rung="fellows:high-eur", elapsed_s=601),
      ev("advanced", rung="fellows:normal-eur", elapsed_s=300)],
     [("parked", "eps d: parked past its cap on fellows:high-eur")]),
    ("an interruption told once per run, however often a revived supervisor says it",
     [ev("dispatch"), ev("started", handle=GCP), ev("interrupted", message="preempted", lane="gcp"),
      ev("interrupted", message="preempted", lane="gcp"), ev("relaunched", restart=1), ev("started", handle=GCP),
      ev("wedged", handle=GCP, message="wedged")],
     [("started", "eps d: started on gcp"), ("preempted", "eps d: preempted"), ("relaunched", "eps d: relaunched"),
      ("started", "eps d: started on gcp"), ("preempted", "eps d: preempted")]),
    ("a wedge whose release failed is not an interruption", [ev("wedged", message="releasing it failed")], []),
    ("nothing could run it; a cancel is not told",
     [ev("terminal", message="every rung exhausted", reason={"code": "exhausted", "text": "x"}),
      ev("stopped", message="cancelled", reason={"code": "cancelled", "text": "cancelled"}),
      ev("ended", exit_code=130, job_status="cancelled")],
     [("failed", "eps d: nothing could run it")]),
    ("a stall (its event may come later)", [ev("stalled", message="silent for 20s")], [("stalled", "eps d: stalled")]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "records", "want"), CASES, ids=[c[0] for c in CASES])
def test_the_events_give_their_notices(case: str, records: list[dict[str, Any]], want: list[tuple[str, str]]) -> None:
    notices, _ = fold(placed(*records), ALL)
    assert [(n.event, n.title) for n in notices] == want


def test_each_notice_says_what_happened_the_lane_and_the_next_command() -> None:
    notices, _ = fold(placed(ev("started", handle=GCP), ENDED_OK, ENDED_3), ALL)
    started, ended, failed = (n.body for n in notices)
    assert "lane: gcp" in started and "next: eps logs -f d; eps cancel d" in started
    assert "exit code: 0" in ended and "outputs in /s/outputs/d" in ended and "lane: gcp" in ended
    assert "exit code: 3" in failed and "next: eps logs d --tail 50" in failed
    assert [n.end for n in notices] == [10, 20, 30]  # each notice's cursor is its event's end


def test_only_the_wanted_events_are_told() -> None:
    notices, _ = fold(placed(ev("started", handle=GCP), ENDED_OK, ENDED_3), frozenset({"failed"}))
    assert [n.event for n in notices] == ["failed"]


def test_an_end_whose_outputs_did_not_come_back_is_due_after_the_linger() -> None:
    kept = ev("ended", exit_code=0, pulled=False, outputs="/s/outputs/d", lane="gcp", ts=50.0)
    notices, pulls = fold(placed(kept), ALL)
    assert [n.title for n in notices] == ["eps d: ended 0"] and "outputs not pulled yet: eps pull d" in notices[0].body
    [due] = pulls
    assert due.ts == 50.0 and due.dispatch == "d"
    n = unpulled(due, 600)
    assert n.title == "eps d: outputs waiting for eps pull" and "next: eps pull d" in n.body and "10m00s" in n.body


def test_the_log_is_read_with_each_line_s_place_and_a_torn_line_is_skipped(tmp_path: Any) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"event": "a"}\n{torn\n{"event": "b"}\n{"event": "half')
    got = read_placed(str(path))
    assert [(s, e, r["event"]) for s, e, r in got] == [(0, 15, "a"), (21, 36, "b")]
    assert [r["event"] for _s, _e, r in read_placed(str(path), 15)] == ["b"]
