"""`eps execute` option combinations that cannot mean anything: one line, exit 2, and nothing
is read or made (not even the state directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eps.shell.cli import main


@pytest.mark.parametrize("stay", ["--wait", "--follow"])
def test_detach_with_wait_or_follow_is_refused_before_the_state_dir_is_made(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, stay: str
) -> None:
    state = tmp_path / "state"
    env = {"EPS_STATE_DIR": str(state), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "HOME": str(tmp_path)}
    rc = main(["execute", "cpu-small", "--duration", "10m", "--detach", stay, "--", "true"], env=env)
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and "--detach" in err and stay in err, err
    assert not state.exists()


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["plan", "gpu-1", "gpu-2"], "eps plan"),
        (["execute", "gpu-1", "--bogus", "--", "true"], "eps execute"),
        (["status", "a", "b"], "eps status"),
        (["--bogus"], "eps"),
    ],
)
def test_an_unrecognized_argument_points_at_its_own_subcommands_help(
    capsys: pytest.CaptureFixture[str], argv: list[str], prog: str
) -> None:
    rc = main(argv, env={})
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and f"unrecognized arguments: {argv[-1] if prog == 'eps' else argv[2]}" in err
    assert err.rstrip().endswith(f"(see {prog} --help)"), err
