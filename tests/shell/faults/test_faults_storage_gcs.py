"""``gs://`` for real (issue 33): with ``[storage] url = "gs://..."`` and ``gs_endpoint`` set to a
GCS JSON API server on loopback (gcp-storage-emulator behind a proxy that checks the OAuth
tokens of a service account key as Google does: tests/gcs_support.py), the job's machine (a
VM of the local GCP fake, which is the real test sshd) writes its outputs, checkpoints and
log there itself with rclone's ``google cloud storage`` backend; eps's own reads use the
same backend.

- a job with an ``--input`` gs:// prefix writes outputs (one big enough for a resumable
  upload in several chunks) and rewrites a checkpoint: ended, its machine released, the
  state dir without its outputs; ``eps logs`` reads the log from storage (the machine is
  gone, nothing pulled yet); ``eps pull`` brings every byte back (by hash);
- the key's private part appears nowhere: not in any process's argv while the job runs,
  not in the ledger, events, logs, the output or the state directory;
- no key for gs:// is one line, exit 2, nothing recorded, nothing asked of the server.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from faults_support import (
    DetachedEps,
    Eps,
    GcpTrap,
    RunpodTrap,
    assert_ledger_consistent,
    assert_no_orphans,
    pulled_from_storage,
)
from gcs_support import GcsServer
from storage_support import sha256_tree

CPU = ("cpu-small", "--duration", "30m", "--pin", "gcp")


@pytest.fixture
def gstored(detached_eps: DetachedEps, tmp_path: Path, gcs: GcsServer, gcs_bucket: str) -> Eps:
    """eps with ``[storage]`` on the local GCS server (its key in GOOGLE_APPLICATION_CREDENTIALS)."""
    e = detached_eps()
    e.config.write_text(e.config.read_text()
                        + f'[storage]\nurl = "gs://{gcs_bucket}/runs"\ngs_endpoint = "{gcs.endpoint}"\n')  # fmt: skip
    e.env["GOOGLE_APPLICATION_CREDENTIALS"] = gcs.key_file(tmp_path)
    return e


def test_gs_outputs_go_to_storage_from_the_machine_and_come_back_by_eps_pull(
    gstored: Eps, gcs: GcsServer, gcs_bucket: str, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    eps, d, bucket = gstored, "g" + uuid.uuid4().hex[:10], gcs_bucket
    for i in range(3):
        gcs.put(bucket, f"in/{i}.txt", b"%d\n" % i)
    gcs.clear_log()
    line = (
        'o="$EPS_OUTPUT_DIR"; mkdir -p "$o/data"; cat in/2.txt > "$o/seen"; '
        'head -c 20000000 /dev/urandom > "$o/data/big.bin"; '
        'for i in 1 2 3; do echo "$i" > "$o/ckpt.tmp"; mv "$o/ckpt.tmp" "$o/ckpt"; sleep 1; done; '
        'ps -eo args > "$o/ps.txt"; cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " " >> "$o/ps.txt"; '
        "echo wrote-all"
    )
    rc, out, err = eps.run("execute", *CPU, "--dispatch-id", d, "--sync-every", "1s", "--input", f"gs://{bucket}/in",
                           "--wait", "--", "bash", "-c", line, timeout_s=300)  # fmt: skip
    assert rc == 0, (out, err)
    assert f"gs://{bucket}/runs/{d}/0/out" in err, err
    assert f"[{d}] input gs://{bucket}/in -> in: 3 object(s)" in err, err
    assert not (eps.state / "outputs" / d).exists()  # never through the shared VM
    assert list(eps.state.rglob("big.bin")) == []
    assert gtrap.live(d) == []  # released once the last upload was confirmed
    got = gcs.digests(bucket, f"runs/{d}/0/out/")
    assert sorted(got) == ["ckpt", "data/big.bin", "ps.txt", "seen"], got
    assert gcs.get(bucket, f"runs/{d}/0/out/seen") == b"2\n" and gcs.get(bucket, f"runs/{d}/0/out/ckpt") == b"3\n"
    log = gcs.log
    uploads = [r for r in log if r.method in ("PUT", "POST") and r.path.startswith("/upload/")]
    assert uploads and {r.agent.split("/")[0] for r in uploads} == {"eps-machine"}, uploads[:3]
    assert sum(r.received for r in uploads) >= 20_000_000  # the big one, in chunks, by the machine
    tokens = {r.agent.split("/")[0] for r in log if r.path == "/token"}
    assert tokens == {"eps", "eps-machine"}, tokens  # each side signed its own grant with the key
    assert all(r.status != 401 for r in log), [r for r in log if r.status == 401][:3]

    # the machine is gone and nothing is pulled: the log comes from storage
    gcs.clear_log()
    rc, text, lerr = eps.run("logs", d)
    assert rc == 0 and "wrote-all" in text and f"eps: outputs in gs://{bucket}/runs/{d}/0/out" in text, (text, lerr)
    read = [r for r in gcs.log if r.method == "GET" and r.path.endswith(f"/o/runs/{d}/0/job.log") and r.status == 200]
    assert read and {r.agent.split("/")[0] for r in read} == {"eps"}, gcs.log
    said = pulled_from_storage(eps, d, f"gs://{bucket}/runs/{d}/0/out", got, sha256_tree)

    # the key's private part: nowhere but its own file
    secret = gcs.secret
    ps = (eps.state / "outputs" / d / "ps.txt").read_text()
    assert "ps -eo" in ps and secret not in ps
    assert secret not in out + err + said + text + lerr
    for path in eps.state.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert_no_orphans(eps, gtrap, rtrap)
    assert_ledger_consistent(eps, d)


def test_gs_without_a_key_is_one_line_and_changes_nothing(gstored: Eps, gcs: GcsServer, gtrap: GcpTrap) -> None:
    eps = gstored
    rc, out, err = eps.run("execute", *CPU, "--", "true", env={"GOOGLE_APPLICATION_CREDENTIALS": ""})
    assert rc == 2, (out, err)
    assert "storage gs://: no credentials" in err and len(err.strip().splitlines()) == 1, err
    assert eps.dispatch_ids() == [] and gtrap.inserts() == []
    assert gcs.log == []
