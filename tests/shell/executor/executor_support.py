"""Helpers shared by the executor tests (imported by name, unlike conftest modules): the
real GCP client against the local Compute server, real httpx against the local RunPod
server, the VM lane for real, a ledger in a temp dir.

``eps`` runs through ``main(argv, env, lane_options=...)``; SLURM is left out here
(its own suite runs the real cluster) by pointing the fellows lane at a login prefix
that fails, so it reports unavailable and the walk goes on to the paid lanes."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import ModuleType
from typing import Any

from eps.shell.lanes import LaneOptions
from eps.shell.remote.ssh import Patience
from eps.shell.util.retry import RetryPolicy

HERE = Path(__file__).parent
KEY = "rpa_EXECUTORTESTKEY_93c1d0e2f4"
PROJECT = "test-project"


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gcp_fake = _load("gcp_fake_server_for_executor", HERE.parent / "gcp" / "fake_server.py")
runpod_fake = _load("runpod_fake_server", HERE.parent / "runpod" / "fake_server.py")
ssh_support = _load("ssh_support", HERE.parent / "ssh" / "ssh_support.py")


def _no_slurm(argv: Any, stdin: Any = None, **_: Any) -> tuple[int, str, str]:
    return 127, "", "slurm: not on this test machine"


class Eps:
    """Run eps commands in-process against the fakes; returns (rc, stdout, stderr)."""

    def __init__(self, tmp: Path, gcp: Any, runpod: Any) -> None:
        self.tmp = tmp
        self.state = tmp / "state"
        self.config = tmp / "config.toml"
        gcp_machines, runpod_machines = ssh_support.machine_keys(tmp)
        self.config.write_text(
            "[jobs]\nsupervise = 'inline'\nwait_poll_s = 0.05\n"
            f'[gcp]\nproject = "{PROJECT}"\nendpoint = "{gcp.endpoint}"\nzones = ["us-central1-a", "us-central1-b"]\n'
            + gcp_machines
            + f'[runpod]\nbase_url = "{runpod.url}"\n'
            + runpod_machines
        )
        ssh_support.machines_here(gcp, runpod, self.state)  # each job runs on the test sshd, for real
        self.env = {
            "EPS_STATE_DIR": str(self.state),
            "EPS_CONFIG": str(self.config),
            "RUNPOD_API_KEY": KEY,
            "HOME": str(tmp),
        }
        fast = RetryPolicy(attempts=2, timeout_s=5.0, wait_initial_s=0.0, wait_max_s=0.0, wait_jitter_s=0.0)
        self.options = LaneOptions(
            machine_patience=Patience(within_s=20.0, first_delay_s=0.2, max_delay_s=1.0, retry_auth=True),
            slurm_runner=_no_slurm,
            gcp_options={"retry": fast, "poll_interval_s": 0.05, "request_timeout_s": 10.0},
            runpod_options={
                "poll_interval_s": 0.02,
                "retry": RetryPolicy(attempts=2, wait_initial_s=0.0, wait_max_s=0.0, wait_jitter_s=0.0),
                "default_retry_after_s": 0.01,
            },
        )

    def __call__(self, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        from eps.shell.cli import main

        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(list(argv), env={**self.env, **(env or {})}, lane_options=self.options)
        return rc, out.getvalue(), err.getvalue()

    def events(self, *argv: str) -> tuple[int, list[dict[str, Any]]]:
        rc, out, err = self("execute", "--json", *argv)
        assert "Traceback" not in err, err
        return rc, [json.loads(line) for line in out.splitlines() if line.strip()]

    def status(self, dispatch: str | None = None) -> list[dict[str, Any]]:
        rc, out, err = self("status", "--json", *([dispatch] if dispatch else []))
        assert rc == 0, err
        doc = json.loads(out)
        assert doc["schema_version"] == 1
        data: list[dict[str, Any]] = doc["dispatches"]
        return data


def fakes() -> Iterator[tuple[Any, Any]]:
    """The GCP and RunPod test servers; after use, every RunPod answer checked against its
    API document."""
    gcp = gcp_fake.FakeCompute(PROJECT).start()
    runpod = runpod_fake.FakeRunpod(api_key=KEY, gets_to_running=1).start()
    yield gcp, runpod
    gcp.stop()
    runpod.stop()
    found = [
        f"{a.method} {a.path} -> {a.status}: {problem}"
        for a in list(runpod.answers)
        for problem in runpod_fake.openapi.answer_violations(a.method, a.path, a.status, a.headers, a.body)
    ]
    assert found == [], "the RunPod test server answered outside its API document:\n" + "\n".join(found[:20])
