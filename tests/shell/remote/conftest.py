"""Fixtures for the remote transport against the real test sshd (tests/shell/ssh/sshd.sh).

``sshd`` (session) starts it: not root -> skip with the reason, under ``CI=true``
-> fail.  ``eps_key`` is eps's own key pair made by ``ensure_key`` in a session
state dir and authorized for root; ``login_target`` reaches 127.0.0.1:2222 and
``vm_target`` 127.0.0.5:22 with it; ``plain_key`` is one whose sessions skip ``~/.bashrc``.
``recorder`` is a runner that runs for real and keeps every argv, stdin and output, for the "no secret in argv" checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_support import Recorder, ssh_support

from eps.shell.remote.keys import KeyPair, ensure_key
from eps.shell.remote.ssh import Remote


@pytest.fixture(scope="session")
def sshd() -> Path:
    """The test sshd is up: 127.0.0.1:2222 and 127.0.0.5:22, keys only."""
    return ssh_support.start_sshd()


@pytest.fixture(scope="session")
def eps_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("eps-state")


@pytest.fixture(scope="session")
def eps_key(sshd: Path, eps_state: Path) -> Iterator[KeyPair]:
    """eps's key pair in the session state dir, authorized for root on the test sshd."""
    key = ensure_key(str(eps_state)).unwrap()
    ssh_support.authorize(key.public_key)
    yield key
    ssh_support.revoke(key.public_key)


@pytest.fixture(scope="session")
def plain_key(sshd: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyPair]:
    """Another eps key pair whose sessions skip this machine's ``~/.bashrc`` (a pod-like login):
    for the tests that compare a command's stderr byte for byte, which ``pyenv init``'s rehash
    may prefix with a lock warning when another worker's login rehashes at the same moment."""
    key = ensure_key(str(tmp_path_factory.mktemp("eps-plain-state"))).unwrap()
    ssh_support.authorize(key.public_key, plain_login=True)
    yield key
    ssh_support.revoke(key.public_key)


@pytest.fixture
def login_target(eps_key: KeyPair) -> Remote:
    return Remote.ssh(ssh_support.LOGIN_HOST, eps_key, user=ssh_support.USER, port=ssh_support.LOGIN_PORT)


@pytest.fixture
def vm_target(eps_key: KeyPair) -> Remote:
    return Remote.ssh(ssh_support.VM_IP, eps_key, user=ssh_support.USER)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
