"""The test sshd (``sshd.sh``), for any test directory that needs a real ssh target.

Load it by path, as the executor tests load the fake servers::

    spec = importlib.util.spec_from_file_location("ssh_support", ROOT / "tests/shell/ssh/ssh_support.py")

then call :func:`start_sshd` from a session fixture and :func:`authorize` with the
public key the test's eps state dir uses.  The sshd listens on
``LOGIN_HOST:LOGIN_PORT`` (127.0.0.1:2222: a login node, any ssh target) and on
``VM_IP:22`` (127.0.0.5: a fake GCP VM's natIP or a RunPod pod's public IP), as
``USER`` (root) with keys only.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

SSHD_SH = Path(__file__).with_name("sshd.sh")
STATE = Path(os.environ.get("EPS_SSHD_STATE", "/var/lib/eps-test-sshd"))
AUTHORIZED_KEYS = STATE / "authorized_keys"
SSHD_LOG = STATE / "sshd.log"
LOGIN_HOST = "127.0.0.1"
LOGIN_PORT = 2222
VM_IP = "127.0.0.5"
VM_PORT = 22
USER = "root"


def unavailable(reason: str) -> None:
    """Skip with the reason; under ``CI=true`` fail instead (CI must run these tests)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the test sshd is required under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def start_sshd() -> Path:
    """Start (or re-check) the test sshd; skip or fail with the reason when it cannot run."""
    if os.geteuid() != 0:
        unavailable("the test sshd needs root: tests/shell/ssh/sshd.sh installs openssh-server and binds port 22")
    try:
        proc = subprocess.run(["bash", str(SSHD_SH), "start"], capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        unavailable(f"sshd.sh start did not finish: {exc}")
        raise  # unreachable: unavailable() skips or fails
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        unavailable(f"the test sshd could not be installed or started (sshd.sh start exited {proc.returncode}): {tail}")
    return SSHD_SH


def authorize(public_key: str) -> None:
    """Let ``public_key`` log in as root (appended once; safe across concurrent sessions)."""
    line = public_key.strip()
    with open(AUTHORIZED_KEYS, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        if line not in fh.read().splitlines():
            fh.write(line + "\n")
            fh.flush()


def revoke(public_key: str) -> None:
    """Remove ``public_key`` from the authorized keys again."""
    line = public_key.strip()
    with open(AUTHORIZED_KEYS, "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        kept = [k for k in fh.read().splitlines() if k.strip() != line]
        fh.seek(0)
        fh.truncate()
        fh.write("".join(k + "\n" for k in kept))


def sshd_log_size() -> int:
    try:
        return SSHD_LOG.stat().st_size
    except OSError:
        return 0


def sshd_log_since(offset: int) -> str:
    """What the test sshd logged after ``offset`` (from :func:`sshd_log_size`)."""
    try:
        with open(SSHD_LOG, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode(errors="replace")
    except OSError:
        return ""
