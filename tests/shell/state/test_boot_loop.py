"""Boot loops from a real ledger: the machines it remembers as lost soon after they came up
(:mod:`eps.shell.state.lives`) reach ``eps plan``, ``eps.plan()`` and the walk's snapshot
(``gather``), which skip the rung with ``boot_loop`` and its deaths as evidence; a pin is
exempt."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from eps.core.model import CapacitySnapshot, Job, LaneKind, Provisioning, Rung, SkipCode
from eps.core.router import plan
from eps.core.states import AttemptState
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY
from eps.shell.cli import main
from eps.shell.run.supervisor import gather
from eps.shell.state.ledger import Ledger
from eps.shell.state.lives import read_only

LOOPED = "gcp/e2-standard-4/europe-west4-a/spot"
NEXT = "gcp/e2-standard-4/europe-west4-b/spot"
INTENT = ("cpu-small", "--duration", "30m", "--restartable")  # the looped rung would be its first
SCHEMA = Path(__file__).parents[3] / "eps" / "schemas" / "plan.json"


def _rung(zone: str, how: Provisioning = Provisioning.SPOT, lane: str = "gcp") -> Rung:
    kind = LaneKind.RUNPOD if lane == "runpod" else LaneKind.GCP
    return Rung(lane, kind, how, "", machine="e2-standard-4", zone=zone)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _life(ledger: Ledger, clock: _Clock, n: int, rung: Rung, up_at: float, lived_s: float, end: str) -> None:
    """Dispatch ``n``: its machine on ``rung`` came up at ``up_at`` and ``lived_s`` later was
    preempted (``end`` ``preempted``), vanished (``gone``), was released as wedged
    (``wedged``) or ended normally (``ended``)."""
    clock.now = up_at
    ledger.new_dispatch(f"d{n}", Job("cpu-small", 1800, restartable=True))
    a = ledger.begin_attempt(f"d{n}", rung, f"eps-d{n}-1")
    ledger.update_attempt(a.id, AttemptState.RUNNING, handle=f"eps-d{n}-1", outcome="started")
    clock.now = up_at + lived_s
    state = AttemptState.ENDED if end == "ended" else AttemptState.GONE
    ledger.update_attempt(a.id, state, outcome=end)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A ledger in which the machines of LOOPED died 30 s and 31 s after coming up, 2 h and 1 h
    ago; the others lived long, ended normally, or died early only once."""
    return _looped(tmp_path, None)


@pytest.fixture
def state_on(tmp_path: Path, ledger_url: str | None) -> tuple[Path, str | None]:
    """:func:`state` on each backend (``ledger_url``): its directory and its URL."""
    return _looped(tmp_path, ledger_url), ledger_url


def _looped(tmp_path: Path, url: str | None) -> Path:
    clock = _Clock()
    ledger = Ledger(str(tmp_path / "state"), url=url, clock=clock)
    now = time.time()
    _life(ledger, clock, 1, _rung("europe-west4-a"), now - 7200, 30, "preempted")
    _life(ledger, clock, 2, _rung("europe-west4-a"), now - 3600, 31, "gone")
    _life(ledger, clock, 3, _rung("europe-west4-a"), now - 1800, 20, "ended")  # released: no death
    _life(ledger, clock, 4, _rung("europe-west4-b"), now - 5000, 1200, "preempted")  # lived 20 min
    _life(ledger, clock, 5, _rung("europe-west4-b"), now - 900, 40, "preempted")  # one early death
    _life(ledger, clock, 6, _rung("europe-west4-c"), now - 2 * 86_400, 30, "preempted")  # two days ago
    _life(ledger, clock, 7, _rung("europe-west4-c"), now - 2 * 86_400 + 100, 30, "preempted")
    ledger.close()
    return tmp_path / "state"


def _env(state: Path) -> dict[str, str]:
    return {"EPS_STATE_DIR": str(state), "HOME": str(state.parent)}


def _plan_doc(capsys: pytest.CaptureFixture[str], state: Path, *extra: str) -> dict[str, Any]:
    assert main(["plan", *INTENT, *extra, "--json"], env=_env(state)) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()), cls=jsonschema.Draft202012Validator)
    return doc


def test_the_ledger_remembers_the_machines_lost_in_the_last_day(state: Path) -> None:
    lives = read_only(str(state), time.time())
    assert sorted((m.rung, round(m.lost_at - m.up_at)) for m in lives if m.lost_at is not None) == [
        (LOOPED, 30), (LOOPED, 31), (NEXT, 40), (NEXT, 1200)
    ]  # fmt: skip
    assert read_only(str(state.parent / "nowhere"), time.time()) == ()
    assert not (state.parent / "nowhere").exists()  # no ledger is made


def test_a_machine_released_as_wedged_is_a_lost_machine(tmp_path: Path, ledger_url: str | None) -> None:
    clock = _Clock()
    ledger = Ledger(str(tmp_path / "state"), url=ledger_url, clock=clock)
    now = time.time()
    _life(ledger, clock, 1, _rung("europe-west4-a"), now - 3600, 300, "wedged")
    _life(ledger, clock, 2, _rung("europe-west4-a"), now - 1800, 300, "ended")
    clock.now = time.time()
    lives = ledger.remember(CapacitySnapshot()).lives  # what a walk reads, on either backend
    ledger.close()
    assert [(m.rung, round((m.lost_at or 0) - m.up_at)) for m in lives] == [(LOOPED, 300)]
    if ledger_url is None:  # and eps plan's own read of the file
        lives = read_only(str(tmp_path / "state"), time.time())
        assert [(m.rung, round((m.lost_at or 0) - m.up_at)) for m in lives] == [(LOOPED, 300)]


def test_eps_plan_skips_a_boot_looped_rung_with_its_deaths_as_evidence(
    capsys: pytest.CaptureFixture[str], state: Path
) -> None:
    doc = _plan_doc(capsys, state)
    assert LOOPED not in [r["key"] for r in doc["rungs"]]
    assert doc["rungs"][0]["key"] == NEXT  # one early death is no loop
    [skip] = [s for s in doc["skipped"] if s["reason"]["code"] == "boot_loop"]
    assert skip["lane"] == "gcp" and skip["target"] == LOOPED
    text = skip["reason"]["text"]
    assert text.startswith("2 machines died within 10m of coming up in the last 1d: one lost 1h59m")
    assert "30s after it came up; one lost 59m" in text and "31s after it came up; skipped for 22h" in text

    assert main(["plan", *INTENT], env=_env(state)) == 0
    words = " ".join(capsys.readouterr().out.split())  # as wrapped to the width
    assert f"gcp {LOOPED}: boot_loop: 2 machines died within 10m of coming up in the last 1d: one lost" in words


def test_a_pin_still_tries_the_boot_looped_rung(capsys: pytest.CaptureFixture[str], state: Path) -> None:
    doc = _plan_doc(capsys, state, "--pin", "gcp")
    assert doc["rungs"][0]["key"] == LOOPED
    assert not [s for s in doc["skipped"] if s["reason"]["code"] == "boot_loop"]
    assert any(f"{LOOPED} is tried although in a boot loop" in n for n in doc["notes"])


def test_the_python_api_plans_as_eps_plan_does(state: Path) -> None:
    import eps

    p = eps.plan(eps.Job("cpu-small", duration="30m", restartable=True), env=_env(state))
    assert p.route.rungs[0].key == NEXT
    assert [s.target for s in p.route.skipped if s.code is SkipCode.BOOT_LOOP] == [LOOPED]


class _Lanes:
    """What ``gather`` asks of the lanes: every one usable here."""

    policy = DEFAULT_POLICY

    def unavailable(self) -> tuple[()]:
        return ()


def test_the_walks_snapshot_carries_the_lives_so_every_dispatch_skips_the_rung(
    state_on: tuple[Path, str | None],
) -> None:
    ledger = Ledger(str(state_on[0]), url=state_on[1])
    try:
        job = Job("cpu-small", 1800, restartable=True)
        snap, grants = gather(_Lanes(), ledger, job, CapacitySnapshot(), DEFAULT_GRANTS, grants_given=True)
    finally:
        ledger.close()
    assert len(snap.lives) == 4 and abs(snap.lives_at - time.time()) < 60
    route = plan(job, snap, grants, None, policy=DEFAULT_POLICY)
    assert route.rungs[0].key == NEXT
    assert [s.target for s in route.skipped if s.code is SkipCode.BOOT_LOOP] == [LOOPED]
