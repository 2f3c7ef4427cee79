"""A pinned RunPod GPU dispatch does not give up after one data centre (issue 35, item 4).

Through the production walker against the RunPod test server (its pods are the test sshd,
so the job is shipped and launched for real): a pod that never gets a public ssh port is
terminated, confirmed gone, and created again in the next data centre of the list (or, with
no list, in the others RunPod's catalog says stock the type), at most 3 pods per dispatch,
each an attempt in the ledger; ``[runpod] supply`` lets community supply follow secure.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from runpod_testkit import KEY, FakeRunpod, Fault, schema_validator, ssh_support

from eps.core.model import CapacitySnapshot, Job, Policy, evolve
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY
from eps.shell.cli.main import main
from eps.shell.config.settings import RunpodSettings, Settings
from eps.shell.lanes import LaneOptions, Lanes
from eps.shell.remote.ssh import Patience
from eps.shell.render.progress import Reporter
from eps.shell.run.walker import Walker, WalkResult
from eps.shell.state.ledger import Ledger
from eps.shell.util.retry import RetryPolicy

CREATE = schema_validator("CreatePodRequest")
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 PCIe"
JOB = Job("gpu-1", 3600, pin="runpod", command=("sleep", "300"))
pytestmark = pytest.mark.usefixtures("pods_reach_sshd")


def _policy(types: tuple[str, ...] = (A100,), **runpod: Any) -> Policy:
    gpus = tuple(g for g in DEFAULT_POLICY.runpod_gpu if g.id in types)
    return evolve(DEFAULT_POLICY, runpod_gpu=gpus, **runpod)


class Harness:
    """The walker over a temp ledger, RunPod at the local server; a pod without a public ssh
    port is given up after 1.5 s."""

    def __init__(self, tmp: Path, fake: FakeRunpod, policy: Policy) -> None:
        self.settings = Settings(
            policy=policy,
            runpod=RunpodSettings(base_url=fake.url, work_root=str(tmp / "runpod-runs")),
            state_dir=str(tmp / "state"),
        )
        ssh_support.give_key(tmp / "state")
        options = LaneOptions(
            machine_patience=Patience(within_s=1.5, first_delay_s=0.1, max_delay_s=0.3, retry_auth=True),
            runpod_api_key=KEY,
            runpod_options={
                "poll_interval_s": 0.01,
                "poll_timeout_s": 5.0,
                "request_timeout_s": 2.0,
                "retry": RetryPolicy(attempts=3, timeout_s=10.0, wait_initial_s=0.001, wait_max_s=0.005),
            },
            env={},
        )
        self.ledger = Ledger(self.settings.state_dir)
        self.lanes = Lanes(self.settings, options)
        self.out = io.StringIO()
        self.walker = Walker(
            self.settings, self.ledger, self.lanes, Reporter(json_lines=True, out=self.out),
            grants=DEFAULT_GRANTS, snapshot=CapacitySnapshot(),
        )  # fmt: skip

    def run(self, job: Job = JOB) -> WalkResult:
        (result,) = self.walker.execute(job)
        return result

    def attempts(self, dispatch: str) -> list[tuple[str | None, str | None]]:
        return [(a.zone, a.outcome) for a in self.ledger.attempts(dispatch)]

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.getvalue().splitlines()]

    def close(self) -> None:
        self.lanes.close()
        self.ledger.close()


def _bodies(fake: FakeRunpod) -> list[dict[str, Any]]:
    bodies = fake.created_bodies()
    for body in bodies:
        assert [e.message for e in CREATE.iter_errors(body)] == []
    return bodies


def test_a_pod_without_ssh_is_replaced_in_the_next_data_centre(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.no_port_in.add("US-KS-2")
    h = Harness(tmp_path, fake, _policy(runpod_data_centers=("US-KS-2", "US-TX-3")))
    result = h.run()

    assert result.handle is not None and result.handle.zone == "US-TX-3", result.failure
    assert h.attempts(result.dispatch) == [("US-KS-2", "transient"), ("US-TX-3", "started")]
    first = h.ledger.attempts(result.dispatch)[0]
    assert first.reason is not None and "22/tcp" in first.reason and "released" in first.reason
    assert [b["dataCenterIds"] for b in _bodies(fake)] == [["US-KS-2"], ["US-TX-3"]]
    assert fake.peak_live == 1  # the first pod was gone before the second was made
    (live,) = fake.live_pods()
    assert live["id"] == result.handle.id and live["dataCenterId"] == "US-TX-3"
    h.close()


def test_without_a_list_runpod_chooses_then_the_others_that_stock_the_type(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.no_port_in.add("EU-RO-1")  # where RunPod's scheduler puts the first pod
    fake.stock[f"{A100}@US-KS-2"] = 0  # the catalog says US-KS-2 has none
    h = Harness(tmp_path, fake, _policy())
    result = h.run()

    assert result.handle is not None and result.handle.zone == "US-TX-3", result.failure
    assert h.attempts(result.dispatch) == [(None, "transient"), ("!EU-RO-1", "started")]
    assert [b.get("dataCenterIds") for b in _bodies(fake)] == [None, ["US-TX-3"]]
    assert fake.count("GET", "/v2/catalog/gpus/{id}") == 1
    assert fake.peak_live == 1 and len(fake.live_pods()) == 1
    h.close()


def test_secure_out_of_stock_goes_to_community_when_allowed_and_the_plan_said_so(
    fake: FakeRunpod, tmp_path: Path
) -> None:
    policy = _policy(runpod_supply=("secure", "community"))
    said = plan(JOB, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy)
    assert [r.zone for r in said.rungs] == [None, "community"]
    assert "community cloud" in said.rungs[1].reason
    fake.stock[f"{A100}@SECURE"] = 0
    h = Harness(tmp_path, fake, policy)
    result = h.run()

    assert result.handle is not None, result.failure
    assert h.attempts(result.dispatch) == [(None, "no_capacity"), ("community", "started")]
    assert [b.get("cloud") for b in _bodies(fake)] == [None, "COMMUNITY"]
    assert fake.live_pods()[0]["cloud"] == "COMMUNITY"
    h.close()


def test_secure_only_by_default_never_asks_community(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.stock[f"{A100}@SECURE"] = 0
    h = Harness(tmp_path, fake, _policy())
    result = h.run()
    assert result.handle is None and result.terminal == "pin_exhausted"
    assert all("cloud" not in b for b in _bodies(fake))
    h.close()


def test_three_pods_that_never_come_up_end_the_rotation(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.no_port_in.update({"EU-RO-1", "US-KS-2", "US-TX-3"})
    dcs = ("EU-RO-1", "US-KS-2", "US-TX-3")
    h = Harness(tmp_path, fake, _policy((A100, H100), runpod_data_centers=dcs))
    assert len(plan(JOB, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=h.settings.policy).rungs) == 6
    result = h.run()

    assert result.handle is None and result.terminal == "pin_exhausted"
    assert h.attempts(result.dispatch) == [(dc, "transient") for dc in dcs]
    assert len(_bodies(fake)) == 3  # H100 PCIe is never asked for: 3 pods per dispatch at most
    (terminal,) = [e for e in h.events() if e["event"] == "terminal"]
    spent = [s for s in terminal["skipped"] if "runpod_rotation_spent" in s or "none came up" in s]
    assert spent and "3 RunPod pods were made in this dispatch and none came up" in spent[0]
    assert fake.live_pods() == [] and fake.peak_live == 1
    h.close()


def test_a_pod_that_cannot_be_terminated_stops_the_rotation(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.no_port_in.add("EU-RO-1")
    fake.queue("DELETE", "/v2/pods/{id}", *[Fault(status=500) for _ in range(6)])
    h = Harness(tmp_path, fake, _policy(runpod_data_centers=("EU-RO-1", "US-TX-3")))
    result = h.run()

    assert result.handle is None and result.terminal is None
    assert result.failure is not None and "rotation stops here" in result.failure
    assert len(_bodies(fake)) == 1  # never a second pod while the first may live
    (row,) = h.ledger.attempts(result.dispatch)
    assert (row.state, row.outcome) == ("submitted", "unknown_fate")  # reconcile releases it by name
    (stopped,) = [e for e in h.events() if e["event"] == "stopped"]
    assert stopped["reason"]["code"] == "unknown_fate" and "could not be confirmed terminated" in stopped["message"]
    (left,) = fake.live_pods()
    fake.pods.pop(left["id"])
    h.close()


def _cli_env(tmp_path: Path, config: str) -> dict[str, str]:
    (tmp_path / "config.toml").write_text(config)
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "EPS_STATE_DIR": str(tmp_path / "cli-state"),
            "EPS_CONFIG": str(tmp_path / "config.toml")}  # fmt: skip


def test_eps_plan_says_it_would_use_community(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = _cli_env(tmp_path, '[runpod]\nsupply = ["secure", "community"]\ndata_centers = ["US-TX-3"]\n')
    assert main(["plan", "gpu-1", "--pin", "runpod", "--duration", "1h", "--json"], env=env) in (0, 1)
    rungs = json.loads(capsys.readouterr().out)["rungs"]
    first = [r for r in rungs if r["machine"] == A100]
    assert [r["zone"] for r in first] == ["US-TX-3", "community:US-TX-3"]
    assert "community cloud, data centre US-TX-3" in first[1]["reason"]["text"]
    main(["plan", "gpu-1", "--pin", "runpod", "--duration", "1h"], env=env)
    assert "community cloud, data centre US-TX-3" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("value", ['["secure", "cheap"]', '"community"', "[]", '["secure", "secure"]'])
def test_a_bad_supply_is_one_line_with_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    env = _cli_env(tmp_path, f"[runpod]\nsupply = {value}\n")
    assert main(["plan", "gpu-1", "--pin", "runpod", "--duration", "1h"], env=env) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "@ $.runpod.supply" in err, err
    assert not (tmp_path / "cli-state" / "ledger.sqlite").exists()


def test_no_other_data_centre_in_stock_makes_no_second_pod(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.no_port_in.add("EU-RO-1")
    fake.stock.update({f"{A100}@US-KS-2": 0, f"{A100}@US-TX-3": 0})
    h = Harness(tmp_path, fake, _policy())
    result = h.run()
    assert result.handle is None and result.terminal == "pin_exhausted"
    assert h.attempts(result.dispatch) == [(None, "transient"), ("!EU-RO-1", "no_capacity")]
    assert "no data centre but EU-RO-1" in (h.ledger.attempts(result.dispatch)[1].reason or "")
    assert len(_bodies(fake)) == 1 and fake.live_pods() == []
    h.close()
