"""Object storage from the real SLURM cluster (issue 33): a job with ``[storage]`` set (moto's
S3 behind the logging proxy of tests/storage_support.py), on fellows (its first lane), writes its
outputs on the cluster's shared filesystem; the job's wrapper on the node uploads them with
rclone (the proxy's log names the machine's agent, never eps's), nothing of them reaches the
state directory until ``eps pull``, which brings them back from the bucket by hash.  The
wrapper's rclone.conf (the only copy of the credentials on the cluster) is gone from the
shared filesystem once the last upload is done.

eps reads the credentials from the shared credentials file (``~/.aws/credentials``), not from
its environment: the local "login" of this suite runs sbatch with eps's own environment, which
SLURM hands to the job, so a key there would reach the node by another road."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from faults_support import DetachedEps, Eps, GcpTrap, RunpodTrap, assert_no_orphans, squeue
from storage_support import REGION, S3Server, sha256_tree

pytestmark = pytest.mark.slurm


@pytest.fixture
def steps(detached_eps: DetachedEps, slurm_cluster: Path, s3: S3Server, bucket: str) -> Eps:
    """Detached eps on the real cluster with ``[storage]`` on the local S3 server, its keys in
    the shared credentials file and nowhere in its environment."""
    e = detached_eps(slurm=True, caps=(60, 30), storage=(s3, bucket))
    aws = e.tmp / ".aws"  # HOME is tmp_path
    aws.mkdir()
    (aws / "credentials").write_text(f"[default]\naws_access_key_id = {s3.access_key}\n"
                                     f"aws_secret_access_key = {s3.secret_key}\n")  # fmt: skip
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_SHARED_CREDENTIALS_FILE"):  # fmt: skip
        e.env.pop(k, None)
    e.env["AWS_DEFAULT_REGION"] = REGION
    return e


def test_a_slurm_job_stores_its_outputs_from_the_cluster_and_eps_pull_brings_them_back(
    steps: Eps, s3: S3Server, bucket: str, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    eps, d = steps, "f" + uuid.uuid4().hex[:10]
    line = ('o="$EPS_OUTPUT_DIR"; mkdir -p "$o/sub"; head -c 65536 /dev/urandom > "$o/sub/b.bin"; '
            'echo "on $SLURM_JOB_ID" > "$o/a.txt"; stat -c %a ../rclone.conf > "$o/conf-mode"; '
            'env > "$o/env.txt"; echo wrote-all')  # fmt: skip
    rc, out, err = eps.run("execute", "gpu-1", "--duration", "10m", "--dispatch-id", d,
                           "--sync-every", "0", "--wait", "--", "bash", "-c", line, timeout_s=240)  # fmt: skip
    assert rc == 0, (out, err)
    [row] = json.loads(eps.run("status", d, "--json")[1])["dispatches"]
    assert row["handle"]["lane"] == "fellows", row
    assert f"s3://{bucket}/runs/{d}/0/out" in err, err
    assert not (eps.state / "outputs" / d).exists()  # never through the shared VM, until pulled

    root = tmp_path / "shared" / d / "0"  # the dispatch root on the cluster's shared filesystem
    got = s3.digests(bucket, f"runs/{d}/0/out/")
    assert sorted(got) == ["a.txt", "conf-mode", "env.txt", "sub/b.bin"], got
    assert got == sha256_tree(root / "out")  # what the job wrote there, uploaded whole
    assert s3.get(bucket, f"runs/{d}/0/out/a.txt").decode().startswith("on ") and b"wrote-all" in s3.get(
        bucket, f"runs/{d}/0/job.log")  # fmt: skip
    uploads = [r for r in s3.log if r.method in ("PUT", "POST") and f"/runs/{d}/" in r.path]
    assert uploads and {r.agent.split("/")[0] for r in uploads} == {"eps-machine"}, uploads[:3]  # from the node
    # the credentials were a 0600 file in the dispatch root while the job ran, and are gone from it
    assert s3.get(bucket, f"runs/{d}/0/out/conf-mode") == b"600\n"
    assert (root / "stored").read_text() == "0\n" and not (root / "rclone.conf").exists()
    secret = s3.secret_key.encode()
    for path in (tmp_path / "shared").rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 1 << 20:
            assert secret not in path.read_bytes(), path

    rc, out, err = eps.run("pull", d, timeout_s=120)
    assert rc == 0, (out, err)
    assert sha256_tree(eps.state / "outputs" / d) == got  # every byte, by hash, from the bucket
    gets = [r for r in s3.log if r.method == "GET" and f"/runs/{d}/0/out/" in r.path]
    assert gets and {r.agent.split("/")[0] for r in gets} == {"eps"}
    assert squeue(f"eps-{d}") == []
    assert_no_orphans(eps, gtrap, rtrap, slurm_prefix="eps-f")
