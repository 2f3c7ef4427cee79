"""Running commands on a Remote: the argv eps builds, ssh's failures classified into
one line, bounded retries of a host that is not up yet, and the real sshd."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from returns.result import Failure, Success
from ssh_support import LOGIN_HOST, LOGIN_PORT, USER, VM_IP

from eps.core.outcome import FailureKind
from eps.shell.remote.errors import RemoteErrorKind
from eps.shell.remote.keys import KeyPair, ensure_key
from eps.shell.remote.process import Completed
from eps.shell.remote.ssh import (
    FRESH_MACHINE,
    ONCE,
    Patience,
    Remote,
    check_remote,
    remote_argv,
    run_remote,
    shell_argv,
    wait_reachable,
)
from eps.shell.remote.sync import rsync_rsh

KEY = KeyPair("/state/ssh/id_ed25519", "/state/ssh/id_ed25519.pub", "/state/ssh/known_hosts", "ssh-ed25519 AAAA eps")


class Scripted:
    """A runner that answers from a script and keeps the argv it was given."""

    def __init__(self, *answers: Completed) -> None:
        self.answers = list(answers)
        self.argv: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float | None = None) -> Completed:
        self.argv.append(list(argv))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def __call__(self) -> float:
        return self.now


REFUSED = Completed(255, "", "ssh: connect to host 10.0.0.9 port 22: Connection refused\r\n")
DENIED = Completed(255, "", "root@10.0.0.9: Permission denied (publickey).\r\n")
CHANGED = Completed(
    255, "", "@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n...\nHost key verification failed.\n"
)


# --- argv -------------------------------------------------------------------------------------


def test_ssh_argv_uses_eps_key_and_known_hosts_only() -> None:
    remote = Remote.ssh("10.0.0.9", KEY, user="eps")
    argv = remote_argv(remote, "echo hi")
    assert argv[0] == "ssh" and argv[-2:] == ["eps@10.0.0.9", "echo hi"]
    text = " ".join(argv)
    for option in (
        "-F none",
        "-i /state/ssh/id_ed25519",
        "IdentitiesOnly=yes",
        "UserKnownHostsFile=/state/ssh/known_hosts",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=accept-new",
        "BatchMode=yes",
        "ConnectTimeout=10",
        "ForwardAgent=no",
        "-p 22",
    ):
        assert option in text
    assert "-A" not in argv and "-t" not in argv


def test_login_prefix_and_local_argv() -> None:
    assert remote_argv(Remote.via(["ssh", "fellows-login"]), "squeue") == ["ssh", "fellows-login", "squeue"]
    assert remote_argv(Remote.local(), "ls") == ["bash", "-c", "ls"]
    assert Remote.via([]).is_local


def test_shell_argv() -> None:
    remote = Remote.ssh("10.0.0.9", KEY, user="eps", port=2200)
    argv = shell_argv(remote, "eps-runs/d 1/0/work")
    assert argv[:2] == ["ssh", "-t"] and "2200" in argv
    assert argv[-1] == "cd -- 'eps-runs/d 1/0/work' && exec bash -l"
    slurm = shell_argv(
        Remote.via(["ssh", "fellows-login"]),
        "/home/u/eps-runs/d/0/work",
        ["srun", "--jobid=42", "--overlap", "--pty", "bash"],
    )
    assert slurm == [
        "ssh",
        "-t",
        "fellows-login",
        "cd -- /home/u/eps-runs/d/0/work && exec srun --jobid=42 --overlap --pty bash",
    ]
    assert shell_argv(Remote.local(), "/tmp/w") == ["bash", "-c", "cd -- /tmp/w && exec bash -l"]


@pytest.mark.parametrize("host", ["-oProxyCommand=x", "a b", "h;rm", ""])
def test_hostile_hosts_refused(host: str) -> None:
    with pytest.raises(ValueError, match="host"):
        Remote.ssh(host, KEY)


def test_hostile_user_refused() -> None:
    with pytest.raises(ValueError, match="user"):
        Remote.ssh("h", KEY, user="-oX")


def test_rsync_rsh_quotes_paths_with_spaces() -> None:
    key = KEY._replace(private_path="/st ate/id", known_hosts="/st ate/kh")
    rsh = rsync_rsh(Remote.ssh("h", key))
    assert rsh is not None and "-i '/st ate/id'" in rsh and "'UserKnownHostsFile=/st ate/kh'" in rsh


# --- classification and retries (scripted) ---------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "kind", "lane_kind"),
    [
        (REFUSED, RemoteErrorKind.UNREACHABLE, FailureKind.UNREACHABLE),
        (DENIED, RemoteErrorKind.AUTH, FailureKind.AUTH),
        (CHANGED, RemoteErrorKind.HOST_KEY, FailureKind.AUTH),
        (Completed(255, "", "something new\n"), RemoteErrorKind.UNREACHABLE, FailureKind.UNREACHABLE),
        (Completed(127, "", "ssh: command not found"), RemoteErrorKind.MISSING_TOOL, FailureKind.UNREACHABLE),
        (Completed(-1, "", "", timed_out=True), RemoteErrorKind.UNREACHABLE, FailureKind.UNREACHABLE),
    ],
)
def test_failures_are_one_line(answer: Completed, kind: RemoteErrorKind, lane_kind: FailureKind) -> None:
    result = run_remote(Remote.ssh("10.0.0.9", KEY), "true", patience=ONCE, runner=Scripted(answer))
    failure = result.failure()
    assert failure.kind is kind
    assert "\n" not in failure.message and "\r" not in failure.message
    assert failure.lane_failure().kind is lane_kind


def test_remote_exit_codes_pass_through() -> None:
    done = run_remote(Remote.ssh("h", KEY), "exit 3", runner=Scripted(Completed(3, "out", "err"))).unwrap()
    assert done.returncode == 3
    failure = check_remote(Remote.ssh("h", KEY), "x", "making dirs", runner=Scripted(Completed(1, "", "no space\n")))
    assert failure.failure().kind is RemoteErrorKind.COMMAND
    assert failure.failure().message == "making dirs on h exited 1: no space"


def test_unreachable_is_retried_with_backoff_until_up() -> None:
    runner = Scripted(REFUSED, REFUSED, REFUSED, Completed(0, "ok", ""))
    clock = Clock()
    result = run_remote(
        Remote.ssh("h", KEY), "true", patience=Patience(within_s=60), runner=runner, sleep=clock.sleep, clock=clock
    )
    assert isinstance(result, Success)
    assert clock.slept == [0.5, 1.0, 2.0]


def test_retries_are_bounded() -> None:
    runner = Scripted(REFUSED)
    clock = Clock()
    result = run_remote(
        Remote.ssh("h", KEY), "true", patience=Patience(within_s=20), runner=runner, sleep=clock.sleep, clock=clock
    )
    assert isinstance(result, Failure)
    assert sum(clock.slept) <= 20
    assert len(runner.argv) == len(clock.slept) + 1
    assert clock.slept[-1] == 5.0  # capped


def test_auth_is_retried_only_for_a_fresh_machine() -> None:
    clock = Clock()
    once = Scripted(DENIED, Completed(0, "", ""))
    assert isinstance(run_remote(Remote.ssh("h", KEY), "true", runner=once, sleep=clock.sleep, clock=clock), Failure)
    fresh = Scripted(DENIED, DENIED, Completed(0, "", ""))
    ok = wait_reachable(Remote.ssh("h", KEY), patience=FRESH_MACHINE, runner=fresh, sleep=clock.sleep, clock=clock)
    assert isinstance(ok, Success)
    assert len(fresh.argv) == 3


# --- against the real sshd --------------------------------------------------------------------


def test_runs_on_the_login_port_and_the_vm_address(login_target: Remote, vm_target: Remote) -> None:
    for target in (login_target, vm_target):
        done = run_remote(target, "echo $USER; pwd").unwrap()
        assert done.returncode == 0
        assert done.stdout.split() == [USER, "/root"]
    known = Path(login_target.known_hosts or "").read_text()
    assert f"[{LOGIN_HOST}]:{LOGIN_PORT}" in known and VM_IP in known


def test_remote_exit_code_and_stdin(login_target: Remote) -> None:
    done = run_remote(login_target, "cat; exit 7", stdin=b"through stdin").unwrap()
    assert (done.returncode, done.stdout) == (7, "through stdin")


def test_unreachable_host_is_one_line_and_quick(eps_key: KeyPair) -> None:
    remote = Remote.ssh(LOGIN_HOST, eps_key, user=USER, port=1)  # nothing listens on port 1
    began = time.monotonic()
    failure = run_remote(remote, "true", patience=ONCE).failure()
    assert time.monotonic() - began < 5
    assert failure.kind is RemoteErrorKind.UNREACHABLE
    assert "Connection refused" in failure.message and "\n" not in failure.message


def test_a_key_not_authorized_is_auth(sshd: Path, tmp_path: Path) -> None:
    stranger = ensure_key(str(tmp_path)).unwrap()
    remote = Remote.ssh(LOGIN_HOST, stranger, user=USER, port=LOGIN_PORT)
    failure = run_remote(remote, "true", patience=ONCE).failure()
    assert failure.kind is RemoteErrorKind.AUTH
    assert "Permission denied" in failure.message


def test_a_changed_host_key_is_refused(eps_key: KeyPair, tmp_path: Path) -> None:
    fake_hostkey = tmp_path / "hk"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(fake_hostkey)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(f"[{LOGIN_HOST}]:{LOGIN_PORT} {Path(str(fake_hostkey) + '.pub').read_text()}")
    remote = Remote.ssh(LOGIN_HOST, eps_key._replace(known_hosts=str(known)), user=USER, port=LOGIN_PORT)
    failure = run_remote(remote, "true", patience=ONCE).failure()
    assert failure.kind is RemoteErrorKind.HOST_KEY


def test_login_prefix_reaches_the_login_node(login_target: Remote) -> None:
    from eps.shell.remote.ssh import ssh_options

    prefix = Remote.via(["ssh", *ssh_options(login_target), login_target.destination])
    assert run_remote(prefix, "echo via-prefix").unwrap().stdout == "via-prefix\n"


@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux script is not installed")
def test_interactive_shell_starts_in_the_directory(login_target: Remote, tmp_path: Path) -> None:
    argv = shell_argv(login_target, str(tmp_path), ["bash", "-c", "pwd; tty >/dev/null && echo has-a-tty"])
    # script(1) gives ssh -t a terminal, as a user's terminal would
    out = subprocess.run(
        ["script", "-qec", shlex.join(argv), "/dev/null"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert str(tmp_path) in out.stdout
    assert "has-a-tty" in out.stdout


def test_a_remote_is_a_host_or_a_prefix_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        Remote(host="h", login=("ssh", "login"))


def test_the_configured_key_exchange_is_what_ssh_offers(eps_key: KeyPair) -> None:
    """``[ssh] key_exchange`` reaches the real ssh: a classical one the sshd has connects; one it
    does not offer is refused by the handshake itself, naming the key exchange."""
    import uuid

    fast = Remote.ssh(VM_IP, eps_key, user=USER, machine=f"m-{uuid.uuid4().hex[:8]}", kex="curve25519-sha256")
    assert check_remote(fast, "echo in", "contact", patience=ONCE) == Success("in\n")
    old = Remote.ssh(VM_IP, eps_key, user=USER, machine=f"m-{uuid.uuid4().hex[:8]}", kex="diffie-hellman-group1-sha1")
    refused = run_remote(old, "true", patience=ONCE)
    assert isinstance(refused, Failure) and "key exchange" in refused.failure().message
    from eps.shell.remote import mux

    for remote in (fast, old):
        mux.close(remote.control_path or "")


def test_a_long_failure_keeps_its_cause_at_the_end_on_one_line() -> None:
    """A transfer's failure names long paths first and its cause last: cut to one line of at
    most MAX_MESSAGE characters, it keeps both ends (a deep state dir once pushed rsync's
    "No space left on device" out of the message)."""
    from eps.shell.remote.errors import MAX_MESSAGE, RemoteErrorKind, RemoteFailure

    deep = "/tmp/" + "/".join(f"dir{i:03d}" for i in range(60))
    text = (f"download of {deep}/job.log on root@127.0.0.2 failed:\n"
            f'rsync: write failed on "{deep}/.x.tmp": No space left on device (28)')
    got = RemoteFailure.of(RemoteErrorKind.TRANSFER, text).message
    assert len(got) <= MAX_MESSAGE and "\n" not in got
    assert got.startswith("download of /tmp/dir000/") and got.endswith("No space left on device (28)")
    short = RemoteFailure.of(RemoteErrorKind.TRANSFER, "ssh: connect to host 127.0.0.2 port 1:\n Connection refused")
    assert short.message == "ssh: connect to host 127.0.0.2 port 1: Connection refused"


@pytest.mark.parametrize("first", ["generator", "receiver"])
def test_a_full_disk_is_told_as_such_whichever_rsync_process_speaks_first(first: str) -> None:
    """rsync's generator may write "Broken pipe" before its receiver says the disk filled (the
    order depends on timing): the failure is the full disk's, a transfer failure, never an
    unreachable machine (which would start the wedge clock)."""
    from eps.shell.remote.sync import _classify_rsync

    lines = {"generator": "rsync: [generator] write error: Broken pipe (32)",
             "receiver": 'rsync: [receiver] write failed on "/small/out/b.bin": No space left on device (28)'}
    order = [lines[first], *(v for k, v in lines.items() if k != first)]
    stderr = "\n".join([*order, "rsync error: error in file IO (code 11) at receiver.c(381) [receiver=3.2.7]"])
    remote = Remote.ssh("10.0.0.9", KEY, user="eps")
    got = _classify_rsync(remote, Completed(11, "", stderr), "download of /x", None)
    assert isinstance(got, Failure)
    assert got.failure().kind is RemoteErrorKind.TRANSFER
    assert got.failure().message.endswith("No space left on device (28)"), got.failure().message
