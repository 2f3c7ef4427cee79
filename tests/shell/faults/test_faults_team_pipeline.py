"""A pipeline on a team's ledger (issues 36 and 37): its record is in the shared PostgreSQL
(:mod:`eps.shell.state.phases`), so another host keeps its order.  The two hosts, the GCP
fake and moto's S3 are the team tests' own (tests/shell/faults/test_faults_team.py).

Host A executes a two-phase pipeline (prep, then train that needs it), both on the GCP fake
with ``[storage]``; while prep runs, A's supervisor is SIGKILLed and A's HOME and state dir
deleted.  Host B's ``eps supervise`` takes the pipeline over, adopts prep (never launched
again: one attempt, one machine), then starts train, whose own machine copies prep's outputs
from storage into ``$EPS_INPUT_DIR/prep/`` (by hash; nothing of prep's passes through B).
"""

from __future__ import annotations

import json
import os
import time

import pytest
from faults_support import Eps, GcpTrap, lose_host, owner_of, supervise_until_taken, wait_until
from storage_support import S3Server

pytestmark = pytest.mark.usefixtures("sshd")

PIPELINE = """\
[[phases]]
name = "prep"
cpu = true
intent = "cpu-small"
duration = "30m"
backend = "gcp"
command = {write}

[[phases]]
name = "train"
needs = ["prep"]
cpu = true
intent = "cpu-small"
duration = "30m"
backend = "gcp"
setup = "test -f .eps-inputs/prep/data/blob"
command = {seen}
"""
#: prep: about 8 s (long enough to lose its host while it runs), then one output.
WRITE = 'sleep 8; mkdir -p "$EPS_OUTPUT_DIR/data" && head -c 100000 /dev/urandom > "$EPS_OUTPUT_DIR/data/blob"'
SEEN = '( cd "$EPS_INPUT_DIR" && find . -type f | sort | xargs sha256sum ) > "$EPS_OUTPUT_DIR/seen"'


def test_a_lost_hosts_pipeline_is_finished_in_order_by_another_host(
    team_s3: tuple[Eps, Eps],
    gtrap: GcpTrap,
    s3: S3Server,
    bucket: str,
) -> None:
    a, b = team_s3
    d = "fpipe" + os.urandom(3).hex()
    path = a.tmp / "pipeline.toml"  # lost with host A: B needs nothing of A's files
    path.write_text(PIPELINE.format(write=json.dumps(WRITE), seen=json.dumps(SEEN)))
    rc, out, err = a.run("execute", "--job", str(path), "--dispatch-id", d, "--detach", timeout_s=120)
    assert rc == 0, (out, err)
    ids = a.phases(d)
    assert list(ids) == ["prep", "train"], ids
    wait_until(lambda: a.dispatch(ids["prep"])["state"] == "started", 90, "prep to start on host A")
    assert owner_of(a, d) == "host-a" and a.attempts(ids["train"]) == []
    a.kill_supervisor()
    killed_at = time.time()
    lose_host(a)
    supervise_until_taken(b, d, 30)
    wait_until(lambda: b.dispatch(d)["state"] == "ended", 120, "the pipeline to end under host B")
    rows = {name: b.dispatch(i) for name, i in ids.items()}
    said = "\n".join(f"{n}: {r['state']} {r['exit_code']} {r['message']}" for n, r in rows.items())
    assert b.dispatch(d)["exit_code"] == 0, (said, (b.state / "logs" / "supervisor.log").read_text()[-3000:])
    assert all(r["state"] == "ended" and r["exit_code"] == 0 for r in rows.values()), rows
    assert rows["prep"]["ended_at"] > killed_at, (rows["prep"], killed_at)  # A was lost while prep ran
    # in order: train's machine was asked for only after prep's job had ended
    [prep_try], [train_try] = b.attempts(ids["prep"]), b.attempts(ids["train"])
    assert train_try["started_at"] >= rows["prep"]["ended_at"], (train_try, rows["prep"])
    # prep never launched again: one insert, one machine; train one of each; both released
    for i in ids.values():
        assert len([r for r in gtrap.inserts() if i in json.dumps(r.body)]) == 1, i
        assert len([k for k in gtrap.materialized if i in k[1]]) == 1, i
    assert prep_try["state"] == train_try["state"] == "ended"
    # train's inputs: prep's outputs from storage, by hash, on train's own machine
    prep = s3.digests(bucket, f"runs/{ids['prep']}/0/out/")
    assert sorted(prep) == ["data/blob"], prep
    seen = s3.get(bucket, f"runs/{ids['train']}/0/out/seen").decode().split()
    assert seen == [prep["data/blob"], "./prep/data/blob"], seen
    assert not (b.state / "outputs" / ids["prep"]).exists() and not (b.state / "pipelines").exists()
    rc, out, err = b.run("status", d, "--json")
    [row] = json.loads(out)["dispatches"]
    assert [(p["phase"], p["state"]) for p in row["phases"]] == [("prep", "succeeded"), ("train", "succeeded")], row
    assert row["owner"]["host"] == "host-b" and row["started_by"]["host"] == "host-a", (row, err)
    wait_until(lambda: all(gtrap.live(i) == [] for i in ids.values()), 60, "both machines to be released")
