"""eps's own key pair: made once with ssh-keygen, 0600, refused when loosened."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from returns.result import Failure, Success

from eps.core.outcome import FailureKind
from eps.shell.remote.errors import RemoteErrorKind
from eps.shell.remote.keys import ensure_key, gcp_ssh_keys_entry, load_key, runpod_env
from eps.shell.remote.process import Completed


def test_made_once_private_0600_dir_0700(tmp_path: Path) -> None:
    key = ensure_key(str(tmp_path)).unwrap()
    assert key.private_path == str(tmp_path / "ssh" / "id_ed25519")
    assert stat.S_IMODE(os.stat(key.private_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "ssh").st_mode) == 0o700
    assert key.public_key.startswith("ssh-ed25519 AAAA") and key.public_key.endswith(" eps")
    assert key.known_hosts == str(tmp_path / "ssh" / "known_hosts")
    assert ensure_key(str(tmp_path)).unwrap() == key  # loaded, not remade
    assert sorted(os.listdir(tmp_path / "ssh")) == ["id_ed25519", "id_ed25519.pub"]


def test_public_key_matches_the_private_one(tmp_path: Path) -> None:
    key = ensure_key(str(tmp_path)).unwrap()
    derived = subprocess.run(["ssh-keygen", "-y", "-f", key.private_path], capture_output=True, text=True, check=True)
    assert derived.stdout.split()[:2] == key.public_key.split()[:2]


def test_a_readable_private_key_is_refused_in_one_line(tmp_path: Path) -> None:
    key = ensure_key(str(tmp_path)).unwrap()
    os.chmod(key.private_path, 0o644)
    for result in (load_key(str(tmp_path)), ensure_key(str(tmp_path))):
        assert isinstance(result, Failure)
        failure = result.failure()
        assert failure.kind is RemoteErrorKind.KEY
        assert "mode 0644" in failure.message and "chmod 600" in failure.message
        assert "\n" not in failure.message
        assert failure.lane_failure().kind is FailureKind.AUTH
    assert stat.S_IMODE(os.stat(key.private_path).st_mode) == 0o644  # refused, not silently changed


def test_missing_public_half_is_derived(tmp_path: Path) -> None:
    key = ensure_key(str(tmp_path)).unwrap()
    os.unlink(key.public_path)
    again = load_key(str(tmp_path)).unwrap()
    assert again.public_key.split()[:2] == key.public_key.split()[:2]
    assert Path(key.public_path).read_text().strip() == again.public_key


def test_no_key_yet(tmp_path: Path) -> None:
    assert load_key(str(tmp_path)).failure().kind is RemoteErrorKind.KEY


def test_no_ssh_keygen_is_a_missing_tool(tmp_path: Path) -> None:
    def runner(argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float | None = None) -> Completed:
        return Completed(127, "", "ssh-keygen: command not found")

    failure = ensure_key(str(tmp_path), runner=runner).failure()
    assert failure.kind is RemoteErrorKind.MISSING_TOOL
    assert not (tmp_path / "ssh" / "id_ed25519").exists()


def test_racing_processes_end_with_one_key(tmp_path: Path) -> None:
    code = (
        "import sys; from eps.shell.remote.keys import ensure_key; print(ensure_key(sys.argv[1]).unwrap().public_key)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(6)
    ]
    keys = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(keys) == 1
    assert isinstance(load_key(str(tmp_path)), Success)
    assert not [n for n in os.listdir(tmp_path / "ssh") if n.endswith(".tmp")]


def test_metadata_and_pod_env(tmp_path: Path) -> None:
    key = ensure_key(str(tmp_path)).unwrap()
    assert gcp_ssh_keys_entry(key, "eps") == f"eps:{key.public_key}"
    assert runpod_env(key) == {"PUBLIC_KEY": key.public_key}
    assert "PRIVATE" not in key.public_key
