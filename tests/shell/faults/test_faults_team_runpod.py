"""A team's RunPod pod lets the team in (issue 37, item 2): hosts A and B share one ledger on
the session's throwaway PostgreSQL (``team_of_two``), B with a key of its own that the test
sshd does not know.  A starts a job on the RunPod test server, whose pods are the test sshd
and which, like RunPod's images, lets in each line of a pod's ``PUBLIC_KEY``.  A is lost
mid-run (its supervisor SIGKILLed, its HOME and state dir deleted); B's ``eps supervise``
takes the dispatch over, follows the job and brings its outputs back from the kept pod (no
storage) through B's own key, and exactly one pod was ever created.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from faults_support import (
    TEAM_LEASE_S,
    RunpodTrap,
    Team,
    lose_host,
    owner_of,
    ssh_support,
    supervise_until_taken,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("sshd")

RUNPOD = ("cpu-small", "--duration", "30m", "--pin", "runpod")
#: A job of about 10 s that leaves one output: long enough to lose its host mid-run.
JOB = ("bash", "-c", 'sleep 10; echo from-the-lost-host > "$EPS_OUTPUT_DIR/result"')


def _fingerprint(public_key: str) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", "-"], input=public_key, capture_output=True, text=True, check=True)
    return out.stdout.split()[1]  # "256 SHA256:... comment (ED25519)"


def test_a_lost_hosts_pod_is_reached_by_the_taking_host_through_its_own_key(
    team_of_two: Team, rtrap: RunpodTrap, pg_url: str
) -> None:
    from eps.shell.remote.keys import PRIVATE_NAME, ensure_key, key_dir
    from eps.shell.state.ledger import Ledger
    from eps.shell.state.team import register

    a, b = team_of_two(TEAM_LEASE_S)
    rtrap.fake.authorized_keys = ssh_support.AUTHORIZED_KEYS  # a pod lets its PUBLIC_KEY in, as its image does
    pods_disk = a.tmp.parent / "machines" / "runpod-runs"  # the provider's, not host A's: it outlives A
    for e in (a, b):
        e.config.write_text(e.config.read_text().replace(f'"{e.tmp}/runpod-runs"', f'"{pods_disk}"'))
    # B's own key pair (the fixture gave both hosts the sshd's shared one): only a pod can let it in
    for name in (PRIVATE_NAME, PRIVATE_NAME + ".pub"):
        os.remove(os.path.join(key_dir(str(b.state)), name))
    b_key = ensure_key(str(b.state)).unwrap()
    a_key = ensure_key(str(a.state)).unwrap()
    assert b_key.public_key != a_key.public_key
    assert b_key.public_key not in ssh_support.AUTHORIZED_KEYS.read_text()
    # B registers as its eps does (handing a dispatch over, starting its supervisor)
    ledger = Ledger(str(b.state), url=pg_url, host="host-b")
    register(ledger, b_key.public_key)
    ledger.close()

    d = "fteamrp" + os.urandom(3).hex()
    rc, out, err = a.run("execute", *RUNPOD, "--dispatch-id", d, "--detach", "--json", "--", *JOB, timeout_s=120)
    assert rc == 0, (out, err)
    wait_until(lambda: a.dispatch(d)["state"] == "started", 90, "the job to start on host A")
    assert owner_of(a, d) == "host-a"
    [pod] = rtrap.live(d)
    assert pod["env"]["PUBLIC_KEY"].split("\n") == [a_key.public_key, b_key.public_key]  # A's own, then B's
    bodies = json.dumps(rtrap.fake.created_bodies())
    for private in (a_key.private_path, b_key.private_path):
        secret = "".join(Path(private).read_text().splitlines()[1:-1])
        assert secret[:40] not in bodies  # no private key ever travels
    assert b_key.public_key in ssh_support.AUTHORIZED_KEYS.read_text().splitlines()  # the pod let B in

    log_from = ssh_support.sshd_log_size()
    a.kill_supervisor()
    lose_host(a)
    supervise_until_taken(b, d, 30)
    wait_until(lambda: b.dispatch(d)["state"] == "ended", 60, "the dispatch to end under host B")
    row = b.dispatch(d)
    assert row["exit_code"] == 0 and row["owner_host"] == "host-b", row
    rc, out, err = b.run("pull", d, timeout_s=60)
    assert rc == 0, (out, err)
    assert (b.state / "outputs" / d / "result").read_text() == "from-the-lost-host\n"
    b_print = _fingerprint(b_key.public_key)
    accepted = [ln for ln in ssh_support.sshd_log_since(log_from).splitlines() if "Accepted publickey" in ln]
    assert any(ln.endswith(b_print) for ln in accepted), accepted  # B reached the pod with its own key
    assert [n for n in rtrap.created if d in n] == [pod["name"]]  # exactly one pod, ever
    wait_until(lambda: rtrap.live(d) == [], 30, "its pod to be released")
    assert b_key.public_key not in ssh_support.AUTHORIZED_KEYS.read_text()  # gone with the pod
    attempts = b.attempts(d)
    assert len(attempts) == 1 and attempts[0]["state"] == "ended", attempts
