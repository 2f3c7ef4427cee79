"""``eps execute ... --after D`` where D is a pipeline (docs/design/pipelines.md), eps as real
processes in detached mode on the VM lane (the pipeline tests' own setup,
tests/shell/faults/test_faults_pipeline.py): the job starts once every phase of D succeeded,
its inputs the outputs of D's final phases (those no other phase needs), by hash, under
``$EPS_INPUT_DIR/D/<phase>/``; a phase of D that fails ends it ``dependency_failed``."""

from __future__ import annotations

import json
from pathlib import Path

from faults_support import Eps
from test_faults_pipeline import SEEN, WRITE, _file, _seen, _sha, eps  # noqa: F401 (eps: the fixture)

from eps.core.contract import PHASE_FAILED


def test_after_a_pipeline_starts_once_every_phase_succeeded_with_its_final_phases_outputs(
    eps: Eps,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    path = _file(tmp_path, [
        {"name": "prep", "command": WRITE},
        {"name": "train", "needs": ["prep"], "command": f"while [ ! -e {go} ]; do sleep 0.1; done; {WRITE}"},
        {"name": "lint", "command": WRITE},
    ])  # fmt: skip
    rc, out, err = eps.run("execute", "--job", str(path), "--dispatch-id", "dpipe", "--detach")
    assert rc == 0, err
    rc, out, err = eps.run("execute", "--dispatch-id", "dlast", "--after", "dpipe", "cpu-small", "--duration", "20s",
                           "--detach", "--", SEEN)  # fmt: skip
    assert rc == 0, err
    ids = eps.phases("dpipe")
    eps.wait_attempt(ids["train"], lambda a: a["state"] == "running", 60, "train to run")
    assert eps.attempts("dlastn1") == []  # prep and lint succeeded, train runs: it waits
    go.touch()
    rc, out, err = eps.run("wait", "dlast", timeout_s=90)
    assert rc == 0, (out, err)
    outs = eps.state / "outputs"
    # train and lint are final (nothing needs them); prep is not, so it is not an input
    assert _seen(outs / "dlastn1") == {f"dpipe/{n}/blob": _sha(outs / ids[n] / "blob") for n in ("train", "lint")}
    assert max(eps.dispatch(i)["ended_at"] for i in ids.values()) <= eps.attempts("dlastn1")[0]["started_at"]
    rc, out, err = eps.run("status", "--json", "dlast")
    [row] = json.loads(out)["dispatches"]
    assert [(p["phase"], p["state"]) for p in row["phases"]] == [("dpipe", "succeeded"), ("job", "succeeded")], row
    # a phase fails: the job after the pipeline ends dependency_failed, nothing created for it
    path = _file(tmp_path, [{"name": "prep", "command": "exit 4"}, {"name": "train", "needs": ["prep"],
                                                                      "command": WRITE}])  # fmt: skip
    rc, out, err = eps.run("execute", "--job", str(path), "--dispatch-id", "dfails", "--wait", timeout_s=90)
    assert rc == PHASE_FAILED, (out, err)
    rc, out, err = eps.run("execute", "--dispatch-id", "dnever", "--after", "dfails", "cpu-small", "--duration", "20s",
                           "--wait", "--", SEEN)  # fmt: skip
    assert rc == PHASE_FAILED and "dependency_failed: needs 'dfails'" in err, (out, err)
    assert eps.dispatch("dnevern1")["state"] == "failed" and eps.attempts("dnevern1") == []
    rc, out, err = eps.run("execute", "--after", ids["prep"], "cpu-small", "--duration", "20s", "--", "true")
    assert rc == 2 and f"--after {ids['prep']}: it is a row of a fan-out, sweep or pipeline" in err, err
