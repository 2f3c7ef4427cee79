"""The issue's three-phase pipeline across lanes (issue 36 item 2; docs/design/pipelines.md),
eps as real processes in detached mode: prep (``cpu-small``) on the GCP test server's
machine, train (``gpu-1``) on the real SLURM test cluster, report (``cpu-small``) on the
RunPod test server's pod.  Each phase runs on the lane its intent plans, each phase's
inputs equal the outputs of the phase it needs (by hash), the final outputs come back, and
``eps status`` shows the pipeline with its phases.  The supervisor SIGKILLed while train
runs on the cluster: ``eps status`` revives it, and prep is not run again."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults_support import Eps, GcpTrap, RunpodTrap, scancel_names, squeue

pytestmark = pytest.mark.slurm

WRITE = 'head -c 100000 /dev/urandom > "$EPS_OUTPUT_DIR/blob"'
SEEN = '( cd "$EPS_INPUT_DIR" && find . -type f | sort | xargs sha256sum ) > "$EPS_OUTPUT_DIR/seen"'


@pytest.fixture
def deps(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, slurm_cluster: Path, sshd: Path) -> Iterator[Eps]:
    """Detached ``eps`` with the real cluster behind ``slurm_wrap.sh`` (park caps 2 s, then 1 s)."""
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, slurm=True, caps=(2, 1), detached=True)
    yield e
    e.close()
    scancel_names("eps-f")


PIPELINE = """\
[[phases]]
name = "prep"
cpu = true
intent = "cpu-small"
duration = "30m"
backend = "gcp"
command = {write}

[[phases]]
name = "train"
needs = ["prep"]
intent = "gpu-1"
duration = "10m"
command = {train}

[[phases]]
name = "report"
needs = ["train"]
cpu = true
intent = "cpu-small"
duration = "30m"
backend = "runpod"
command = {seen}
"""


def _seen(out: Path) -> dict[str, str]:
    got = {}
    for line in (out / "seen").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        got[name.removeprefix("./")] = digest
    return got


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_three_phases_on_gcp_slurm_and_runpod_each_given_the_last_ones_outputs(
    deps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE.format(write=json.dumps(WRITE), train=json.dumps(f"{SEEN}; {WRITE}"),
                                    seen=json.dumps(SEEN)))  # fmt: skip
    rc, out, err = deps.run("execute", "--job", str(path), "--dispatch-id", d, "--wait", timeout_s=240)
    assert rc == 0, (out, err)
    ids = deps.phases(d)
    lanes = {name: deps.dispatch(i)["handle"]["lane"] for name, i in ids.items()}
    assert lanes == {"prep": "gcp", "train": "fellows", "report": "runpod"}, lanes
    assert deps.dispatch(ids["train"])["handle"]["qos"] == "high-eur"
    outs = {name: deps.state / "outputs" / i for name, i in ids.items()}
    assert _seen(outs["train"]) == {"prep/blob": _sha(outs["prep"] / "blob")}
    train = outs["train"]
    assert _seen(outs["report"]) == {"train/blob": _sha(train / "blob"), "train/seen": _sha(train / "seen")}
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
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE.format(write=json.dumps(WRITE), train=json.dumps(train), seen=json.dumps(SEEN)))
    rc, out, err = deps.run("execute", "--job", str(path), "--dispatch-id", d, "--detach")
    assert rc == 0, (out, err)
    ids = deps.phases(d)
    deps.wait_attempt(ids["train"], lambda a: a["state"] == "running", 120, "train to run on the cluster")
    deps.kill_supervisor()
    go.touch()
    rc, out, err = deps.run("status", d)  # revives the supervisor
    assert rc == 0, err
    rc, out, err = deps.run("wait", d, timeout_s=180)
    assert rc == 0, (out, err)
    assert [len(deps.attempts(ids[n])) for n in ("prep", "train", "report")] == [1, 1, 1]  # prep not run again
    outs = {name: deps.state / "outputs" / i for name, i in ids.items()}
    assert _seen(outs["report"])["train/blob"] == _sha(outs["train"] / "blob")
    assert squeue(f"eps-{d}") == []
