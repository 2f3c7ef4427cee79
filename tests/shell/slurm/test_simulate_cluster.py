"""``eps simulate`` on the real SLURM cluster: a small history made here, read back through sacct.

Two dispatches walk the ladder with the production walker (park caps 8 s, then 8 s) while a
blocker holds every GPU: A parks its whole cap on high-eur, moves to normal-eur and starts
there when the blocker is released; B starts on high-eur after a short wait (its blocker is
released 2.5 s into its park).  ``eps simulate`` then reads sacct and must replay the recorded
setting as it happened (each dispatch's tier and time to start), and a rung-1 cap of 1 s must
move B off high-eur while A still starts on normal-eur."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from slurm_support import fill_node, ladder, run, wait_until

from eps.core.model import Job, QosGrants, evolve
from eps.core.tables import DEFAULT_POLICY, FELLOWS
from eps.shell.cli import main
from eps.shell.lanes.slurm.cli import SlurmClient

pytestmark = pytest.mark.slurm

CAP_S = 8
SLEEP = ("sleep", "300")


def _release_when_parked(job_id: str, qos: str, after_s: float = 0.0) -> Any:
    """A walk hook that cancels the blocker the first time the walk parks on ``qos``."""
    done: list[bool] = []

    def hook(record: dict[str, object]) -> None:
        if record["event"] == "parked" and record.get("qos") == qos and not done:
            done.append(True)
            time.sleep(after_s)  # setup, not a measurement: sacct records the wait that results
            run("scancel", job_id)

    return hook


def _sacct(job_ids: list[str], since_at: str) -> dict[str, tuple[str, str, str]]:
    """Submit, Start, End of ``job_ids`` as the window eps reads lists them (``-S``, not ``-j``)."""
    out = run("sacct", "-n", "-P", "-X", "-S", since_at, "-o", "JobID,Submit,Start,End")
    return {p[0]: (p[1], p[2], p[3]) for p in (line.split("|") for line in out.splitlines()) if p[0] in job_ids}


def _s(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def test_simulate_replays_the_recorded_history(
    client: SlurmClient, grants: QosGrants, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t0 = time.time()
    policy = evolve(DEFAULT_POLICY, clusters=(evolve(FELLOWS, first_park_cap_s=CAP_S, next_park_cap_s=CAP_S),))
    workdir, state = str(tmp_path / "%j.out"), tmp_path / "state"
    a, b = ("s" + uuid.uuid4().hex[:10] for _ in range(2))
    job = Job(intent="gpu-1", duration_s=600, command=SLEEP)

    blocker = fill_node(client, policy, workdir, "simblocker")
    walk_a = ladder(state, policy, grants, hook=_release_when_parked(blocker, "normal-eur"), poll_interval_s=0.2)
    got_a = walk_a.walk(job, a)
    assert got_a.handle is not None and got_a.handle.qos == "normal-eur"
    run("scancel", got_a.handle.id)
    assert client.wait_gone(got_a.handle.id, 20)

    blocker = fill_node(client, policy, workdir, "simblocker")
    walk_b = ladder(state, policy, grants, hook=_release_when_parked(blocker, "high-eur", 2.5), poll_interval_s=0.2)
    got_b = walk_b.walk(job, b)
    assert got_b.handle is not None and got_b.handle.qos == "high-eur"
    run("scancel", got_b.handle.id)

    ids = {d: [x.handle for x in walk_b.ledger.attempts(d) if x.handle] for d in (a, b)}
    a_high, a_normal = ids[a]
    (b_high,) = ids[b]
    every = [a_high, a_normal, b_high]
    since_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0 - 5))

    def recorded_all() -> bool:
        found = _sacct(every, since_at)
        return len(found) == len(every) and all(v[2] not in ("Unknown", "None", "") for v in found.values())

    wait_until(recorded_all, 20, "slurmdbd to record the jobs and their ends")
    seen = _sacct(every, since_at)
    happened = {
        a: ("normal-eur", _s(seen[a_normal][1]) - _s(seen[a_high][0])),
        b: ("high-eur", _s(seen[b_high][1]) - _s(seen[b_high][0])),
    }

    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"], "EPS_STATE_DIR": str(state),
           "EPS_FELLOWS_QUEUE_WAIT_SECONDS": str(CAP_S), "EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": str(CAP_S)}  # fmt: skip
    since = f"{int(time.time() - t0) + 5}s"
    rc = main(["simulate", "--since", since, "--caps", f"{CAP_S},{CAP_S}", "--caps", f"1,{CAP_S}", "--json"],
              env=env)  # fmt: skip
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["recorded"] == {"first_s": CAP_S, "next_s": CAP_S}
    assert doc["source"]["ledger_waits"] == 0, doc["source"]  # sacct held every job: the figures are its own
    recorded, tight = ({o["dispatch"]: o for o in s["dispatches"]} for s in doc["settings"])

    for d, (lane, _) in happened.items():
        assert recorded[d]["lane"] == lane, recorded[d]
    assert recorded[b]["drawn"] is False  # its own wait decided it
    # B's own wait is the replay; A's is its cap plus its wait on normal-eur (the walk's few
    # hundred milliseconds between cancel and resubmit are not a wait on any tier)
    assert recorded[b]["start_s"] == happened[b][1], (seen, recorded[b])
    assert abs(recorded[a]["start_s"] - happened[a][1]) <= 3
    a_normal_wait = _s(seen[a_normal][1]) - _s(seen[a_normal][0])
    assert recorded[a]["start_s"] == CAP_S + a_normal_wait

    assert tight[a]["lane"] == "normal-eur" and tight[a]["start_s"] == 1 + a_normal_wait
    assert tight[b]["lane"] != "high-eur"  # waited longer than 1 s there: moved on
    tiers = {t["tier"]: t for t in doc["history"]["tiers"]}
    assert tiers["high-eur"]["censored"] >= 1 and tiers["normal-eur"]["started"] >= 1
