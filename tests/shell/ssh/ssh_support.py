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


#: The key option that makes a login pod-like: bash, run by sshd for a command, reads
#: ``~/.bashrc`` only as a top-level shell (``SHLVL`` below 2).  This machine's root
#: ``~/.bashrc`` runs ``pyenv init`` (about 0.1 CPU-s and 100 processes per session); a
#: pod's or a cloud image's stock ``.bashrc`` returns at once for a shell that is not
#: interactive.  Login shells (``bash -l``, a job's shell line) still read it.
PLAIN_LOGIN = 'environment="SHLVL=1" '


def authorize(public_key: str, *, plain_login: bool = False) -> None:
    """Let ``public_key`` log in as root (appended once; safe across concurrent sessions).
    ``plain_login``: its sessions' commands skip this machine's ``~/.bashrc`` (:data:`PLAIN_LOGIN`)."""
    line = (PLAIN_LOGIN if plain_login else "") + public_key.strip()
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
        kept = [k for k in fh.read().splitlines() if k.strip().removeprefix(PLAIN_LOGIN) != line]
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


# --- eps's key for the fake providers' machines ----------------------------------------------------

#: One key pair for every test session on this machine (made once by eps's own ensure_key),
#: authorized for root; each test's state dir gets a copy (see :func:`give_key`).
SHARED_KEY_STATE = STATE / "eps-client"


def give_key(state_dir: Path) -> str:
    """Put eps's key pair into ``state_dir`` (as eps would have made it there) and make sure the
    test sshd lets it in as root: the fake GCP VMs and RunPod pods (whose address is this sshd)
    are then reachable the way real ones are.  Returns the public key line."""
    from eps.shell.remote.keys import PRIVATE_NAME, ensure_key, key_dir

    shared = ensure_key(str(SHARED_KEY_STATE)).unwrap()
    authorize(shared.public_key)
    target = Path(key_dir(str(state_dir)))
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(target, 0o700)
    for name, mode in ((PRIVATE_NAME, 0o600), (PRIVATE_NAME + ".pub", 0o644)):
        dest = target / name
        if not dest.exists():
            data = Path(shared.private_path if name == PRIVATE_NAME else shared.public_path).read_bytes()
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
    return shared.public_key


def machine_keys(root: Path) -> tuple[str, str]:
    """The ``[gcp]`` and ``[runpod]`` lines (no headers) that make eps reach the fake providers'
    machines on this sshd: GCP logs in as root (the test sshd's only user); dispatch roots go
    under ``root`` (not /root)."""
    return (
        f'ssh_user = "{USER}"\nwork_root = "{root}/gcp-runs"\n',
        f'work_root = "{root}/runpod-runs"\n',
    )


def machines_here(gcp: object, runpod: object, state_dir: Path) -> None:
    """Make the fake providers' machines this sshd (GCP ``natIP``, RunPod ``ssh.direct``), and
    give eps in ``state_dir`` the key it lets in: each job is shipped and launched for real."""
    gcp.nat_ip = VM_IP  # type: ignore[attr-defined]
    runpod.public_ip, runpod.ssh_port = VM_IP, VM_PORT  # type: ignore[attr-defined]
    give_key(state_dir)


def stop_machine_jobs(root: Path) -> None:
    """After a test: stop every job and watcher eps launched on the fake providers' machines
    under ``root`` (on a real provider they die with their VM or pod; here they are processes
    of this machine)."""
    import signal

    from eps.core.jobscript import render_cancel

    for script in [*root.glob("*-runs/*/*/run.sh")]:
        run_root = script.parent
        subprocess.run(["bash", "-c", render_cancel(str(run_root))], capture_output=True, timeout=30, check=False)
        try:
            pid = int((run_root / "watch.pid").read_text().strip())
        except (OSError, ValueError):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                mine = str(run_root).encode() in fh.read()
            if mine:
                os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
