"""A user's jobs on a cluster, counted over every host of a team (eps.shell.state.team
``with_holdings``, eps.core.holdings): two hosts as two Ledgers on one database.

Host A (alice) holds 8 GPUs running and 8 parked under fellows high-eur (its cap: 16 per
user); bob, on host C, holds 8 more.  A walk planned on host B for alice is told high-eur
has no GPUs left under her cap (A's jobs count, bob's do not), and normal-eur is untouched;
``eps simulate``'s ledger history on B holds A's jobs, its park still running among them.
On SQLite (one host) the same count reads that host's own rows.
"""

from __future__ import annotations

from pathlib import Path

from eps.core.model import CapacitySnapshot, Job, LaneKind, Provisioning, QueueState, Rung
from eps.core.router import plan
from eps.core.states import AttemptState, Outcome
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY
from eps.shell.service.history import read_ledger
from eps.shell.state.ledger import Ledger
from eps.shell.state.team import share, with_holdings


def _slurm_job(ledger: Ledger, d: str, qos: str, *, running: bool, user: str | None) -> None:
    """Dispatch ``d`` (a gpu-8 job) with one live attempt under ``qos``: parked, or running."""
    ledger.new_dispatch(d, Job("gpu-8", 3600, command=("true",)))
    if user is not None:
        share(ledger, d, "{}", 60, user=user)
    attempt = ledger.begin_attempt(d, Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "", qos=qos), f"eps-{d}")
    ledger.update_attempt(attempt.id, AttemptState.PENDING, handle=f"{d}-job")
    if running:
        ledger.update_attempt(attempt.id, AttemptState.RUNNING, handle=f"{d}-job", outcome=Outcome.STARTED)


def _rung_reason(snap: CapacitySnapshot, qos: str) -> str:
    route = plan(Job("gpu-1", 3600, command=("true",)), snap, DEFAULT_GRANTS, None, policy=DEFAULT_POLICY)
    return next(r.reason for r in route.rungs if r.qos == qos)


def test_a_walk_on_host_b_counts_host_as_jobs_of_the_same_user(tmp_path: Path, pg_url: str) -> None:
    a = Ledger(str(tmp_path / "a"), url=pg_url, host="host-a")
    b = Ledger(str(tmp_path / "b"), url=pg_url, host="host-b")
    c = Ledger(str(tmp_path / "c"), url=pg_url, host="host-c")
    try:
        before = with_holdings(CapacitySnapshot(), b, DEFAULT_POLICY, DEFAULT_GRANTS, user="alice")
        assert before.queues == ()  # nothing held yet: the snapshot is left as it was
        assert "expect to park" not in _rung_reason(before, "high-eur")
        _slurm_job(a, "eholdrun01", "high-eur", running=True, user="alice")
        _slurm_job(a, "eholdpark1", "high-eur", running=False, user="alice")
        _slurm_job(c, "eholdbob01", "high-eur", running=True, user="bob")
        _slurm_job(a, "eholdnorm1", "normal-eur", running=True, user="alice")
        snap = with_holdings(CapacitySnapshot(), b, DEFAULT_POLICY, DEFAULT_GRANTS, user="alice")
        assert set(snap.queues) == {QueueState("fellows", "high-eur", free_gpus=0),
                                    QueueState("fellows", "normal-eur", free_gpus=8)}  # fmt: skip
        assert "0 GPUs free under this QoS; expect to park" in _rung_reason(snap, "high-eur")
        assert "expect to park" not in _rung_reason(snap, "normal-eur")  # 8 left: a gpu-1 fits
        # bob's count from host C: alice's jobs are not his
        bobs = with_holdings(CapacitySnapshot(), c, DEFAULT_POLICY, DEFAULT_GRANTS, user="bob")
        assert bobs.queues == (QueueState("fellows", "high-eur", free_gpus=8),)
        # eps simulate on host B reads the team's waits: A's park still running is one (so far)
        waits = {w.dispatch: w for w in read_ledger(b.state_dir, DEFAULT_POLICY, "fellows", 0, url=pg_url)}
        assert set(waits) == {"eholdrun01", "eholdpark1", "eholdbob01", "eholdnorm1"}
        assert not waits["eholdpark1"].started and waits["eholdpark1"].tier == "high-eur"
        assert waits["eholdrun01"].started
    finally:
        for ledger in (a, b, c):
            ledger.close()


def test_on_sqlite_the_count_is_the_one_hosts_rows(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "state"))
    try:
        _slurm_job(ledger, "eholdlite1", "high-eur", running=True, user=None)
        _slurm_job(ledger, "eholdlite2", "high-eur", running=True, user=None)
        snap = with_holdings(CapacitySnapshot(), ledger, DEFAULT_POLICY, DEFAULT_GRANTS, user="alice")
        assert snap.queues == (QueueState("fellows", "high-eur", free_gpus=0),)
    finally:
        ledger.close()
