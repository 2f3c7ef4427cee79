"""The issue's three-phase pipeline across lanes (issue 36 item 2; docs/design/pipelines.md),
eps as real processes in detached mode: prep (``cpu-small``) on the GCP test server's
machine, train (``gpu-1``) on the real SLURM test cluster, report (``cpu-small``) on the
RunPod test server's pod.  Each phase runs on the lane its intent plans, each phase's
inputs equal the outputs of the phase it needs (by hash), the final outputs come back, and
``eps status`` shows the pipeline with its phases.  The supervisor SIGKILLed while train
runs on the cluster: ``eps status`` revives it, and prep is not run again."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from faults_support import SEEN, DetachedEps, Eps, GcpTrap, RunpodTrap, pipeline_toml, seen_by, sha, squeue, wait_until

pytestmark = pytest.mark.slurm

WRITE = 'head -c 100000 /dev/urandom > "$EPS_OUTPUT_DIR/blob"'


@pytest.fixture
def deps(detached_eps: DetachedEps, slurm_cluster: Path) -> Eps:
    """Detached ``eps`` with the real cluster behind ``slurm_wrap.sh`` (park caps 2 s, then 1 s)."""
    return detached_eps(slurm=True, caps=(2, 1))


def _pipeline(path: Path, train: str) -> Path:
    """prep (cpu-small, on GCP) writes a blob; train (gpu-1) runs ``train``; report
    (cpu-small, on RunPod) records what it was given."""
    cpu = {"cpu": True, "intent": "cpu-small", "duration": "30m"}
    path.write_text(pipeline_toml([
        {"name": "prep", **cpu, "backend": "gcp", "command": WRITE},
        {"name": "train", "needs": ["prep"], "intent": "gpu-1", "duration": "10m", "command": train},
        {"name": "report", "needs": ["train"], **cpu, "backend": "runpod", "command": SEEN},
    ]))  # fmt: skip
    return path


def test_three_phases_on_gcp_slurm_and_runpod_each_given_the_last_ones_outputs(
    deps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    path = _pipeline(tmp_path / "pipeline.toml", f"{SEEN}; {WRITE}")
    rc, out, err = deps.run("execute", "--job", str(path), "--dispatch-id", d, "--wait", timeout_s=240)
    assert rc == 0, (out, err)
    ids = deps.phases(d)
    lanes = {name: deps.dispatch(i)["handle"]["lane"] for name, i in ids.items()}
    assert lanes == {"prep": "gcp", "train": "fellows", "report": "runpod"}, lanes
    assert deps.dispatch(ids["train"])["handle"]["qos"] == "high-eur"
    outs = {name: deps.state / "outputs" / i for name, i in ids.items()}
    assert seen_by(outs["train"]) == {"prep/blob": sha(outs["prep"] / "blob")}
    train = outs["train"]
    assert seen_by(outs["report"]) == {"train/blob": sha(train / "blob"), "train/seen": sha(train / "seen")}
    assert all(len(deps.attempts(i)) == 1 for i in ids.values())
    rc, out, err = deps.run("status", "--json", d)
    assert rc == 0, err
    [row] = json.loads(out)["dispatches"]
    assert [(p["phase"], p["state"], p["lane"]) for p in row["phases"]] == [
        ("prep", "succeeded", "gcp"), ("train", "succeeded", "fellows"), ("report", "succeeded", "runpod")]
    assert squeue(f"eps-{d}") == []
    assert gtrap.live() == [] and rtrap.live() == []  # every machine released


def test_the_supervisor_killed_while_train_runs_on_slurm_is_revived_and_prep_is_not_run_again(
    deps: Eps, tmp_path: Path
) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    go = tmp_path / "go"
    train = f"while [ ! -e {go} ]; do sleep 0.2; done; {SEEN}; {WRITE}"
    path = _pipeline(tmp_path / "pipeline.toml", train)
    rc, out, err = deps.run("execute", "--job", str(path), "--dispatch-id", d, "--detach")
    assert rc == 0, (out, err)
    ids = deps.phases(d)
    deps.wait_attempt(ids["train"], lambda a: a["state"] == "running", 120, "train to run on the cluster")
    # killed once train's row says started (its attempt is written running a moment before: a kill
    # between the two writes is another case, a dead walk's running job, not this test's)
    wait_until(lambda: deps.dispatch(ids["train"])["state"] == "started", 30, "train's row started")
    deps.kill_supervisor()
    go.touch()
    rc, out, err = deps.run("status", d)  # revives the supervisor
    assert rc == 0, err
    rc, out, err = deps.run("wait", d, timeout_s=180)
    assert rc == 0, (out, err)
    assert [len(deps.attempts(ids[n])) for n in ("prep", "train", "report")] == [1, 1, 1]  # prep not run again
    outs = {name: deps.state / "outputs" / i for name, i in ids.items()}
    assert seen_by(outs["report"])["train/blob"] == sha(outs["train"] / "blob")
    assert squeue(f"eps-{d}") == []
