"""``[ssh] key_exchange``: the key exchange eps's own ssh offers to the machines it makes
(ssh's ``KexAlgorithms``), checked strictly when the config is read; unset, ssh's own default."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_usability import bare_env, run

from eps.shell.config.load import load_settings
from eps.shell.lanes import LaneOptions
from eps.shell.lanes.registry import Lanes
from eps.shell.remote.keys import ensure_key
from eps.shell.remote.ssh import Remote, ssh_options


def _env(tmp_path: Path, text: str) -> dict[str, str]:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    return bare_env(tmp_path, EPS_CONFIG=str(cfg))


def test_unset_is_sshs_own_default(tmp_path: Path) -> None:
    assert load_settings(bare_env(tmp_path)).ssh_kex == ""
    key = ensure_key(str(tmp_path / "state")).unwrap()
    assert not any(o.startswith("KexAlgorithms") for o in ssh_options(Remote.ssh("10.0.0.1", key, machine="m-1")))


def test_the_names_reach_ssh_in_order(tmp_path: Path) -> None:
    env = _env(tmp_path, '[ssh]\nkey_exchange = ["curve25519-sha256", "sntrup761x25519-sha512@openssh.com"]\n')
    settings = load_settings(env)
    assert settings.ssh_kex == "curve25519-sha256,sntrup761x25519-sha512@openssh.com"
    key = ensure_key(str(tmp_path / "state")).unwrap()
    opts = ssh_options(Remote.ssh("10.0.0.1", key, machine="m-1", kex=settings.ssh_kex))
    assert opts[opts.index("KexAlgorithms=curve25519-sha256,sntrup761x25519-sha512@openssh.com") - 1] == "-o"


def test_every_lane_that_makes_machines_offers_them(tmp_path: Path) -> None:
    env = {**_env(tmp_path, '[ssh]\nkey_exchange = ["curve25519-sha256"]\n'), "RUNPOD_API_KEY": "k"}
    lanes = Lanes(load_settings(env), LaneOptions(env=env))
    for name in ("gcp", "runpod"):
        assert lanes.get(name).access.kex == "curve25519-sha256"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("key_exchange = []", "name at least one algorithm, or leave key_exchange out @ $.ssh.key_exchange"),
        ('key_exchange = ["Curve25519 sha256"]', "is not an algorithm name @ $.ssh.key_exchange[0]"),
        ('key_exchange = ["curve25519-sha256", "curve25519-sha256"]', "named twice @ $.ssh.key_exchange[1]"),
        ('key_exchange = ["made-up-kex@example.com"]', "this ssh has no key exchange made-up-kex@example.com"),
        ('key_exchange = "curve25519-sha256"', "$.ssh.key_exchange"),
        ('kex = ["curve25519-sha256"]', "kex"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, said: str
) -> None:
    env = _env(tmp_path, f"[ssh]\n{text}\n")
    rc, out, err = run(capsys, ["plan", "cpu-small", "--duration", "1h"], env)
    assert (rc, out) == (2, "")
    assert len(err.strip().splitlines()) == 1 and said in err, err
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").rglob("*.db"))
