"""Bad input to the acting commands: one clear line on stderr, exit 2, no traceback, and
nothing submitted anywhere (the GCP and RunPod servers and the SLURM CLI saw nothing)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from executor_support import Eps, fakes, ssh_support

from eps.core.model import Job, evolve
from eps.shell.state.ledger import Ledger


class RecordingSlurm:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: Any, stdin: Any = None, **_: Any) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        return 127, "", "slurm: not on this test machine"


CASES: list[tuple[list[str], str]] = [
    (["execute"], "an intent is needed"),
    (["execute", "tpu-64", "--", "true"], "unknown intent"),
    (["execute", "cpu-small", "--duration", "5m"], "no command to run"),
    (["execute", "cpu-small", "--duration", "5m", "--"], "no command to run"),
    (["execute", "cpu-small", "--duration", "-1h", "--", "true"], "must not be negative"),
    (["execute", "cpu-small", "--duration", "abc", "--", "true"], "bad duration"),
    (["execute", "cpu-small", "--duration", "", "--", "true"], "bad duration"),
    (["execute", "cpu-small", "--duration", "1w", "--", "true"], "bad duration"),
    (["execute", "gpu-1", "--pin", "vm", "--", "true"], "has none"),
    (["execute", "cpu-small", "--pin", "fellows", "--", "true"], "GPU cluster"),
    (["execute", "cpu-small", "--pin", "aws", "--", "true"], "unknown lane"),
    (["execute", "gpu-1", "--count", "3", "--", "true"], "no machine has 3"),
    (["execute", "gpu-2", "--count", "8", "--", "true"], "no machine has 16"),
    (["execute", "gpu-1", "--env", "CUDA_VISIBLE_DEVICES=0", "--", "true"], "SLURM sets it"),
    (["execute", "cpu-small", "--count", "0", "--", "true"], "at least 1"),
    (["execute", "cpu-small", "--count", "-2", "--", "true"], "at least 1"),
    (["execute", "cpu-small", "--count", "x", "--", "true"], "whole number"),
    (["execute", "cpu-small", "--footprint-gb", "-1", "--", "true"], "finite number >= 0"),
    (["execute", "cpu-small", "--footprint-gb", "inf", "--", "true"], "finite number"),
    (["execute", "cpu-small", "--snapshot", "/nonexistent/s.json", "--", "true"], "cannot read"),
    (["execute", "cpu-small", "--grants", "/nonexistent/g.json", "--", "true"], "cannot read"),
    (["execute", "cpu-small", "--snapshot", "@BAD_SNAPSHOT@", "--", "true"], "$.gcp[0].state"),
    (["execute", "cpu-small", "--snapshot", "@BINARY@", "--", "true"], "not UTF-8"),
    (["execute", "cpu-small", "--snapshot", "@LATIN1@", "--", "true"], "not UTF-8"),
    (["execute", "cpu-small", "--snapshot", "@DEEP@", "--", "true"], "nested too deeply"),
    (["execute", "cpu-small", "--snapshot", "@HUGE_INT@", "--", "true"], "not valid JSON"),
    (["execute", "cpu-small", "--snapshot", "/dev/zero", "--", "true"], "not a regular file"),
    (["execute", "cpu-small", "--snapshot", "/dev/urandom", "--", "true"], "not a regular file"),
    (["execute", "cpu-small", "--snapshot", "@FIFO@", "--", "true"], "not a regular file"),
    (["execute", "cpu-small", "--snapshot", "@NOT_BOOL@", "--", "true"], "expected bool @ $.clusters[0].reachable"),
    (["execute", "cpu-small", "--snapshot", "@STR_INT@", "--", "true"], "$.queues[0].free_gpus"),
    (["execute", "cpu-small", "--duration", "9" * 400, "--", "true"], "limit of 365 days"),
    (["execute", "gpu-1", "--grants", "@BAD_GRANTS@", "--", "true"], ".priority"),
    # issue 19 (10): what the job wrapper refuses is refused before a machine is made
    (["execute", "cpu-small", "--pin", "runpod", "--", ""], "is a blank shell line"),
    (["execute", "cpu-small", "--pin", "gcp", "--", " "], "is a blank shell line"),
    (["execute", "cpu-small", "--", "\t\n"], "is a blank shell line"),
    (["execute", "cpu-small", "--pin", "gcp", "--env", "EPS_OUTPUT_DIR=/x", "--", "true"], "set by eps itself"),
    (["execute", "cpu-small", "--pin", "runpod", "--env", "EPS_TASK_INDEX=3", "--", "true"], "set by eps itself"),
    (["execute", "cpu-small", "--pin", "runpod", "--env", "_eps_child=1", "--", "true"], "set by eps itself"),
    (["execute", "cpu-small", "--pin", "gcp", "--", "echo", "a\x00b"], "holds a NUL byte"),
    (["execute", "--resume", "enosuch000"], "no dispatch"),
    (["execute", "--resume", "enosuch000", "cpu-small", "--", "true"], "takes no intent"),
    (["execute", "cpu-small", "--bogus", "--", "true"], "unrecognized arguments"),
    (["execute", "cpu-small", "--park", "high-eur=1", "--", "true"], "unrecognized arguments"),
    (["execute", "cpu-small", "--restartable=yes", "--", "true"], "ignored explicit argument"),
    (["execute", "cpu-small", "--dispatch-id", "Bad Id!", "--", "true"], "lowercase letters and digits"),
    (["execute", "cpu-small", "--dispatch-id", "x", "--", "true"], "lowercase letters and digits"),
    (["execute", "cpu-small", "--dispatch-id", "eexisting01", "--", "true"], "already exists"),
    (["status", "enosuch000"], "no dispatch"),
    (["status", "Bad!"], "no dispatch"),
    (["status", "a", "b"], "unrecognized arguments"),
    (["cancel"], "name a dispatch or --all"),
    (["cancel", "enosuch000"], "no dispatch"),
    (["reconcile", "extra"], "unrecognized arguments"),
    (["launch", "cpu-small"], "invalid choice"),
]

ENV_CASES: list[tuple[list[str], dict[str, str], str]] = [
    (["execute", "cpu-small", "--", "true"], {"EPS_CONFIG": "/nonexistent/config.toml"}, "no such file"),
    (["execute", "cpu-small", "--", "true"], {"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "soon"}, "bad duration"),
    (["execute", "gpu-1", "--", "true"], {"EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": "-1"}, "must not be negative"),
    (["status"], {"EPS_CONFIG": "@BAD_CONFIG@"}, "not valid TOML"),
    (["cancel", "--all"], {"EPS_CONFIG": "@EXTRA_CONFIG@"}, "extra fields"),
    (["execute", "cpu-small", "--", "true"], {"EPS_CONFIG": "@STRING_BOOL@"}, "$.clusters[0].dev_qos_for_debug"),
    (["execute", "cpu-small", "--", "true"], {"EPS_CONFIG": "@STRING_ZONES@"}, "list[str] | None @ $.gcp.zones"),
    (["execute", "cpu-small", "--", "true"], {"EPS_CONFIG": "@INF_POLL@"}, "$.runpod.poll_interval_s"),
    (["execute", "cpu-small", "--", "true"], {"EPS_CONFIG": "@NEG_POLL@"}, "$.gcp.poll_interval_s"),
    (["execute", "cpu-small", "--", "true"], {"EPS_CONFIG": "@HUGE_CONCURRENCY@"}, "$.runpod.concurrency"),
    (["execute", "cpu-small", "--", "true"], {"EPS_CONFIG": "@PLAIN_HTTP@"}, "https://"),
]

LEDGER_CASES = [["execute", "cpu-small", "--", "true"], ["status"], ["cancel", "--all"], ["reconcile"]]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, sshd: Path) -> Iterator[tuple[Any, RecordingSlurm, Any, Any]]:
    """One state for every case (made once: it starts a real job on a VM): the bad files, a
    finished dispatch, and a finished VM that any reconcile would delete."""
    tmp = tmp_path_factory.mktemp("bad-input")
    for gcp, runpod in fakes():
        eps = Eps(tmp, gcp, runpod)
        slurm = RecordingSlurm()
        eps.options = evolve(eps.options, slurm_runner=slurm)
        _bad_files(tmp, eps.config.read_text())
        led = Ledger(str(eps.state))
        led.new_dispatch("eexisting01", Job("cpu-small", 60, command=("true",)))
        led.set_dispatch("eexisting01", "ended")
        led.close()
        rc, _, err = eps("execute", "cpu-small", "--duration", "5h", "--", "true")
        assert rc == 0, err
        [(zone, name)] = gcp.instances
        gcp.set_status(zone, name, "TERMINATED")
        yield eps, slurm, gcp, runpod
        ssh_support.stop_machine_jobs(tmp)


@pytest.fixture
def recorded(seeded: tuple[Any, RecordingSlurm, Any, Any]) -> Iterator[tuple[Any, RecordingSlurm, Any, Any]]:
    """The shared state as it was before this case (its ledger restored after it: some cases
    break it on purpose), with what the providers had seen so far."""
    eps, slurm, gcp, runpod = seeded
    assert len(gcp.instances) == 1  # the finished VM of the seed: no case may have reconciled it away
    kept = {p.name: p.read_bytes() for p in eps.state.glob("ledger.sqlite3*")}
    slurm.calls.clear()
    eps.seeded = (dict(gcp.instances), len(gcp.requests), len(runpod.requests))
    yield seeded
    for p in eps.state.glob("ledger.sqlite3*"):
        p.unlink()
    for name, data in kept.items():
        (eps.state / name).write_bytes(data)


def _bad_files(tmp: Path, base: str) -> None:
    (tmp / "bad-snapshot.json").write_text('{"gcp": [{"machine": "e2-standard-4", "zone": "z", "state": "?"}]}')
    (tmp / "bad-grants.json").write_text('{"fellows": [{"name": "high-eur", "priority": "top"}]}')
    (tmp / "bad-config.toml").write_text("this = = not toml")
    (tmp / "extra-config.toml").write_text("[gcp]\nbudget_usd = 100\n")
    (tmp / "binary.json").write_bytes(bytes(range(256)) * 4)
    (tmp / "latin1.json").write_bytes('{"runpod": [{"id": "cpu3g", "stock": "\u00e9"}]}'.encode("latin-1"))
    (tmp / "deep.json").write_text("[" * 50_000 + "]" * 50_000)
    huge = "9" * 5000
    (tmp / "huge-int.json").write_text('{"queues": [{"cluster": "f", "qos": "q", "free_gpus": ' + huge + "}]}")
    os.mkfifo(tmp / "fifo.json")
    (tmp / "not-bool.json").write_text('{"clusters": [{"cluster": "fellows", "reachable": "no"}]}')
    (tmp / "str-int.json").write_text('{"queues": [{"cluster": "fellows", "qos": "high-eur", "free_gpus": "7"}]}')
    (tmp / "string-bool.toml").write_text(base + '[[clusters]]\nname = "fellows"\ndev_qos_for_debug = "false"\n')
    zones = base.replace('zones = ["us-central1-a", "us-central1-b"]', 'zones = "us-central1-a"')
    (tmp / "string-zones.toml").write_text(zones)
    (tmp / "inf-poll.toml").write_text(base + "poll_interval_s = inf\n")
    (tmp / "neg-poll.toml").write_text(base.replace("[runpod]", "poll_interval_s = -1\n[runpod]"))
    (tmp / "huge-concurrency.toml").write_text(base + "concurrency = 100000\n")
    (tmp / "plain-http.toml").write_text(base.replace("[runpod]", "[fanout]\n[runpod]").replace(
        "base_url = \"http://127.0.0.1", "base_url = \"http://runpod.example.com"))  # fmt: skip


def _subst(argv: list[str], tmp: Path) -> list[str]:
    names = {"@BAD_SNAPSHOT@": "bad-snapshot.json", "@BAD_GRANTS@": "bad-grants.json",
             "@BAD_CONFIG@": "bad-config.toml", "@EXTRA_CONFIG@": "extra-config.toml", "@BINARY@": "binary.json",
             "@LATIN1@": "latin1.json", "@DEEP@": "deep.json", "@HUGE_INT@": "huge-int.json", "@FIFO@": "fifo.json",
             "@NOT_BOOL@": "not-bool.json", "@STR_INT@": "str-int.json", "@STRING_BOOL@": "string-bool.toml",
             "@STRING_ZONES@": "string-zones.toml", "@INF_POLL@": "inf-poll.toml", "@NEG_POLL@": "neg-poll.toml",
             "@HUGE_CONCURRENCY@": "huge-concurrency.toml", "@PLAIN_HTTP@": "plain-http.toml"}  # fmt: skip
    return [str(tmp / names[a]) if a in names else a for a in argv]


def _nothing_submitted(eps: Any, slurm: RecordingSlurm, gcp: Any, runpod: Any) -> None:
    """Nothing changed anywhere: no provider saw a call after the seed (not even a listing:
    no reconcile ran), the finished VM a reconcile would delete is still there."""
    instances, gcp_calls, runpod_calls = eps.seeded
    assert not [c for c in slurm.calls if any(word in part for part in c for word in ("sbatch", "scancel"))]
    assert gcp.instances.keys() == instances.keys()
    assert gcp.requests[gcp_calls:] == []
    assert runpod.requests[runpod_calls:] == []


def _one_line(rc: int, out: str, err: str) -> None:
    assert rc == 2, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("eps: error: ")


@pytest.mark.parametrize(("argv", "needle"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input(recorded: Any, argv: list[str], needle: str) -> None:
    eps, slurm, gcp, runpod = recorded
    rc, out, err = eps(*_subst(argv, eps.tmp))
    _one_line(rc, out, err)
    assert needle in err, err
    _nothing_submitted(eps, slurm, gcp, runpod)


@pytest.mark.parametrize(("argv", "env", "needle"), ENV_CASES, ids=[f"{a[0]} {e}" for a, e, _ in ENV_CASES])
def test_bad_settings(recorded: Any, argv: list[str], env: dict[str, str], needle: str) -> None:
    eps, slurm, gcp, runpod = recorded
    rc, out, err = eps(*argv, env={k: _subst([v], eps.tmp)[0] for k, v in env.items()})
    _one_line(rc, out, err)
    assert needle in err, err
    _nothing_submitted(eps, slurm, gcp, runpod)


@pytest.mark.parametrize("argv", LEDGER_CASES, ids=[" ".join(a) for a in LEDGER_CASES])
def test_corrupt_ledger(recorded: Any, argv: list[str]) -> None:
    eps, slurm, gcp, runpod = recorded
    (eps.state / "ledger.sqlite3").write_bytes(b"\x00garbage" * 512)
    for extra in ("-wal", "-shm"):
        (eps.state / f"ledger.sqlite3{extra}").unlink(missing_ok=True)
    rc, out, err = eps(*argv)
    _one_line(rc, out, err)
    assert "corrupt" in err
    _nothing_submitted(eps, slurm, gcp, runpod)


def test_ledger_from_a_newer_eps(recorded: Any) -> None:
    eps, slurm, gcp, runpod = recorded
    with sqlite3.connect(eps.state / "ledger.sqlite3") as db:
        db.execute("PRAGMA user_version = 99")
    rc, out, err = eps("execute", "cpu-small", "--", "true")
    _one_line(rc, out, err)
    assert "schema 99" in err
    _nothing_submitted(eps, slurm, gcp, runpod)


def test_state_dir_is_a_file(recorded: Any, tmp_path: Path) -> None:
    eps, slurm, gcp, runpod = recorded
    f = tmp_path / "plain-file"
    f.write_text("")
    for argv in (["execute", "cpu-small", "--", "true"], ["status"]):
        rc, out, err = eps(*argv, env={"EPS_STATE_DIR": str(f)})
        _one_line(rc, out, err)
        assert "state directory" in err
    _nothing_submitted(eps, slurm, gcp, runpod)


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) + len(ENV_CASES) + len(LEDGER_CASES) + 2 >= 40
    json.dumps(CASES)  # plain data
