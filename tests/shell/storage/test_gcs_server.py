"""The GCS server gs:// is tested against (tests/gcs_support.py) answers rclone's
``google cloud storage`` backend as GCS does where it matters: a service account key's JWT
grant gets a token, a wrong key or none is refused, uploads of every kind (one request; a
resumable one in several chunks) and downloads go through, each logged by its client."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from gcs_support import GcsServer


def _conf(tmp_path: Path, gcs: GcsServer, **keys: str) -> str:
    path = tmp_path / "rclone.conf"
    keys = {"type": "google cloud storage", "bucket_policy_only": "true", "endpoint": gcs.endpoint, **keys}
    path.write_text("[gs]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()))
    return str(path)


def _rclone(conf: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ["rclone", "--config", conf, "--retries", "1", "--low-level-retries", "1", "--user-agent", "probe/1", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_a_key_gets_a_token_and_uploads_of_each_kind_come_back_whole(
    gcs: GcsServer, gcs_bucket: str, tmp_path: Path
) -> None:
    conf = _conf(tmp_path, gcs, service_account_credentials=json.dumps(gcs.key(), separators=(",", ":")))
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "small.txt").write_text("small\n")
    big = os.urandom(40_000_000)  # over rclone's 8 MiB cutoff and 16 MiB chunks: a resumable upload of 3
    (src / "sub" / "big.bin").write_bytes(big)
    done = _rclone(conf, "copy", str(src), f"gs:{gcs_bucket}/p")
    assert done.returncode == 0, done.stderr
    assert gcs.keys(gcs_bucket) == ["p/small.txt", "p/sub/big.bin"]
    assert hashlib.sha256(gcs.get(gcs_bucket, "p/sub/big.bin")).digest() == hashlib.sha256(big).digest()
    chunks = [r for r in gcs.log if r.path == f"/upload/storage/v1/b/{gcs_bucket}/o" and r.received >= 1 << 20]
    assert len(chunks) == 3 and [r.status for r in chunks] == [308, 308, 200], chunks  # 200 + override to rclone
    done = _rclone(conf, "copy", f"gs:{gcs_bucket}/p", str(tmp_path / "back"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "back" / "sub" / "big.bin").read_bytes() == big
    assert {r.agent for r in gcs.log} == {"probe/1"}
    assert [r.status for r in gcs.log if r.path == "/token"] == [200, 200]


def test_a_wrong_key_or_none_is_refused(gcs: GcsServer, gcs_bucket: str, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    gcs.put(gcs_bucket, "p/x", b"x")
    wrong = _conf(tmp_path, gcs, service_account_credentials=json.dumps(gcs.key(other.decode())))
    done = _rclone(wrong, "lsf", f"gs:{gcs_bucket}/p")
    assert done.returncode != 0 and "Invalid JWT Signature" in done.stderr, done.stderr
    anonymous = _conf(tmp_path, gcs, anonymous="true")
    done = _rclone(anonymous, "lsf", f"gs:{gcs_bucket}/p")
    assert done.returncode != 0 and "Error 401: Invalid Credentials" in done.stderr, done.stderr
    assert {r.status for r in gcs.log} == {400, 401}  # nothing reached the emulator


def test_its_process_ends_with_it() -> None:
    server = GcsServer()
    pid = server.pid
    assert pid is not None and os.path.exists(f"/proc/{pid}")
    server.stop()
    assert not os.path.exists(f"/proc/{pid}")
