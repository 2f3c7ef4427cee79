"""A pipeline run as one dispatch under the supervisor (issue 36 item 2;
docs/design/pipelines.md), eps as real processes in detached mode, every phase on the VM
lane: the phases run in the order of their needs, independent ones at once, each phase's
inputs are the outputs of what it needs (checked by hash), a failed phase ends its
dependents ``dependency_failed`` with nothing created for them, and a supervisor SIGKILLed
mid-pipeline is revived without running a finished phase again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from faults_support import SEEN, DetachedEps, Eps, pipeline_toml, seen_by, sha

from eps.core.contract import PHASE_FAILED

#: Each phase writes a random blob, and the hash of every input file it was given (SEEN).
WRITE = 'head -c 200000 /dev/urandom > "$EPS_OUTPUT_DIR/blob"'
#: The names this module had for them, which tests of other branches import from it.
_seen, _sha = seen_by, sha


@pytest.fixture
def eps(detached_eps: DetachedEps) -> Eps:
    return detached_eps()


def _valid(name: str, out: str) -> None:
    """``out`` checked against the shipped schema ``name``."""
    import jsonschema

    schema = json.loads((Path(__file__).parents[3] / "eps" / "schemas" / f"{name}.json").read_text())
    jsonschema.validate(json.loads(out), schema, cls=jsonschema.Draft202012Validator)


def _file(tmp: Path, phases: list[dict[str, Any]]) -> Path:
    path = tmp / "pipeline.toml"
    path.write_text(pipeline_toml([{"name": p["name"], "intent": "cpu-small", "duration": "20s", "cpu": True,
                                    "needs": p.get("needs", []), "command": p["command"]}
                                   for p in phases]))  # fmt: skip
    return path


def _phase_ids(eps: Eps, d: str) -> dict[str, str]:
    return eps.phases(d)


def test_a_pipeline_runs_its_phases_in_order_each_given_its_needs_outputs(eps: Eps, tmp_path: Path) -> None:
    path = _file(tmp_path, [
        {"name": "prep", "command": WRITE},
        {"name": "lint", "command": WRITE},
        {"name": "train", "needs": ["prep"], "command": f"{SEEN}; {WRITE}"},
        {"name": "report", "needs": ["train", "lint"], "command": SEEN},
    ])  # fmt: skip
    rc, out, err = eps.run("execute", "--job", str(path), "--dispatch-id", "pipea", "--wait", timeout_s=120)
    assert rc == 0, (out, err)
    ids = _phase_ids(eps, "pipea")
    outs = {name: eps.state / "outputs" / i for name, i in ids.items()}
    assert seen_by(outs["train"]) == {"prep/blob": sha(outs["prep"] / "blob")}
    train, lint = outs["train"], outs["lint"]
    assert seen_by(outs["report"]) == {"train/blob": sha(train / "blob"), "train/seen": sha(train / "seen"),
                                     "lint/blob": sha(lint / "blob")}  # fmt: skip
    # one attempt each; train started only after prep ended, report after train and lint
    rows = {name: eps.dispatch(i) for name, i in ids.items()}
    assert all(len(eps.attempts(i)) == 1 for i in ids.values())
    began = {name: eps.attempts(i)[0]["started_at"] for name, i in ids.items()}
    assert rows["prep"]["ended_at"] <= began["train"]  # the wrapper's end, whole seconds
    assert max(rows["train"]["ended_at"], rows["lint"]["ended_at"]) <= began["report"]
    assert abs(began["prep"] - began["lint"]) < 5  # independent: started together
    assert eps.dispatch("pipea")["state"] == "ended"
    rc, out, err = eps.run("wait", "pipea")
    assert rc == 0, err
    rc, out, err = eps.run("status", "pipea")
    assert rc == 0 and "prep succeeded, lint succeeded, train succeeded, report succeeded" in " ".join(out.split())
    rc, out, err = eps.run("status", "--json", "pipea")
    _valid("status", out)
    [row] = json.loads(out)["dispatches"]
    assert (row["result"], row["exit_code"]) == ("succeeded", 0), row
    assert [(p["phase"], p["dispatch"], p["needs"], p["state"], p["lane"]) for p in row["phases"]] == [
        ("prep", ids["prep"], [], "succeeded", "vm"),
        ("lint", ids["lint"], [], "succeeded", "vm"),
        ("train", ids["train"], ["prep"], "succeeded", "vm"),
        ("report", ids["report"], ["train", "lint"], "succeeded", "vm"),
    ]
    rc, out, err = eps.run("wait", "pipea/train")  # one phase, addressed as D/phase
    assert rc == 0, err
    rc, out, err = eps.run("logs", "pipea/train")
    assert rc == 0 and "eps: job ended: exited, exit code 0" in out, (out, err)
    rc, out, err = eps.run("pull", "pipea/report", "--to", str(tmp_path / "report"))
    assert rc == 0 and seen_by(tmp_path / "report") == seen_by(outs["report"]), (out, err)
    rc, out, err = eps.run("status", "pipea/nope")
    assert rc == 2 and "no phase 'pipea/nope' (its phases: prep, lint, train, report)" in err, err


def test_a_failed_phase_ends_its_dependents_dependency_failed_and_wait_says_so(eps: Eps, tmp_path: Path) -> None:
    path = _file(tmp_path, [
        {"name": "prep", "command": f"{WRITE}; exit 4"},
        {"name": "side", "command": WRITE},
        {"name": "train", "needs": ["prep"], "command": SEEN},
        {"name": "report", "needs": ["train", "side"], "command": SEEN},
    ])  # fmt: skip
    rc, out, err = eps.run("execute", "--job", str(path), "--dispatch-id", "pipeb", "--wait", timeout_s=120)
    assert rc == PHASE_FAILED, (out, err)
    ids = _phase_ids(eps, "pipeb")
    assert f"pipeb phase prep ({ids['prep']}): failed (exit 4)" in err, err
    for name in ("train", "report"):
        row = eps.dispatch(ids[name])
        assert row["state"] == "failed" and row["message"].startswith("dependency_failed"), row
        assert eps.attempts(ids[name]) == []  # nothing created: no attempt, no provider call
        assert f"pipeb phase {name} ({ids[name]}): dependency_failed" in err, err
    assert eps.dispatch(ids["side"])["state"] == "ended"
    rc, out, err = eps.run("wait", "pipeb")
    assert rc == PHASE_FAILED and "phase prep" in err, err
    rc, out, err = eps.run("wait", "pipeb/prep")  # one phase: its own code
    assert rc == 4, err
    rc, out, err = eps.run("status", "pipeb")
    assert "prep failed, side succeeded, train dependency_failed, report dependency_failed" in " ".join(out.split())


def test_a_supervisor_killed_mid_pipeline_is_revived_and_runs_no_finished_phase_again(eps: Eps, tmp_path: Path) -> None:
    go = tmp_path / "go"
    path = _file(tmp_path, [
        {"name": "prep", "command": WRITE},
        {"name": "train", "needs": ["prep"], "command": f"while [ ! -e {go} ]; do sleep 0.1; done; {SEEN}; {WRITE}"},
        {"name": "report", "needs": ["train"], "command": SEEN},
    ])  # fmt: skip
    rc, out, err = eps.run("execute", "--job", str(path), "--dispatch-id", "pipec", "--detach")
    assert rc == 0, (out, err)
    ids = _phase_ids(eps, "pipec")
    eps.wait_attempt(ids["train"], lambda a: a["state"] == "running", 60, "train to run")
    eps.kill_supervisor()  # mid-pipeline: prep ended, train running, report not started
    assert eps.dispatch(ids["prep"])["state"] == "ended"
    assert eps.dispatch(ids["report"])["state"] == "walking" and eps.attempts(ids["report"]) == []
    go.touch()
    rc, out, err = eps.run("status")  # revives the supervisor
    assert rc == 0, err
    rc, out, err = eps.run("wait", "pipec", timeout_s=90)
    assert rc == 0, (out, err)
    assert [len(eps.attempts(ids[n])) for n in ("prep", "train", "report")] == [1, 1, 1]  # prep not run again
    outs = {name: eps.state / "outputs" / i for name, i in ids.items()}
    assert seen_by(outs["train"]) == {"prep/blob": sha(outs["prep"] / "blob")}
    assert seen_by(outs["report"])["train/blob"] == sha(outs["train"] / "blob")
    assert eps.dispatch("pipec")["state"] == "ended"


def test_cancel_of_a_pipeline_stops_its_running_phase_and_starts_nothing_more(eps: Eps, tmp_path: Path) -> None:
    path = _file(tmp_path, [
        {"name": "prep", "command": "sleep 60"},
        {"name": "train", "needs": ["prep"], "command": SEEN},
    ])  # fmt: skip
    rc, out, err = eps.run("execute", "--job", str(path), "--dispatch-id", "piped")
    assert rc == 0 and "piped/prep" in out, (out, err)
    ids = _phase_ids(eps, "piped")
    eps.wait_attempt(ids["prep"], lambda a: a["state"] == "running", 60, "prep to run")
    rc, out, err = eps.run("cancel", "piped")
    assert rc == 0, (out, err)
    rc, out, err = eps.run("wait", "piped", timeout_s=90)
    assert rc == PHASE_FAILED and "phase prep" in err, (out, err)
    assert eps.dispatch("piped")["state"] == "cancelled"
    assert eps.dispatch(ids["prep"])["state"] == "cancelled"
    assert eps.dispatch(ids["train"])["state"] == "cancelled" and eps.attempts(ids["train"]) == []


def test_after_d_starts_once_d_succeeded_with_its_outputs_and_ends_dependency_failed_when_d_fails(
    eps: Eps, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    rc, out, err = eps.run("execute", "--dispatch-id", "dfirst", "cpu-small", "--duration", "20s", "--detach", "--",
                           f"while [ ! -e {go} ]; do sleep 0.1; done; {WRITE}")  # fmt: skip
    assert rc == 0, err
    rc, out, err = eps.run("execute", "--dispatch-id", "dnext", "--after", "dfirst", "cpu-small", "--duration", "20s",
                           "--detach", "--", SEEN)  # fmt: skip
    assert rc == 0, err
    eps.wait_attempt("dfirst", lambda a: a["state"] == "running", 60, "dfirst to run")
    assert eps.attempts("dnextn1") == []  # waits for dfirst
    go.touch()
    rc, out, err = eps.run("wait", "dnext", timeout_s=90)
    assert rc == 0, (out, err)
    assert seen_by(eps.state / "outputs" / "dnextn1") == {"dfirst/blob": sha(eps.state / "outputs" / "dfirst" / "blob")}
    assert eps.dispatch("dfirst")["ended_at"] <= eps.attempts("dnextn1")[0]["started_at"]
    # D fails: the job after it ends dependency_failed, nothing created for it
    rc, out, err = eps.run("execute", "--dispatch-id", "dbad", "cpu-small", "--duration", "20s", "--wait", "--",
                           "exit 5")  # fmt: skip
    assert rc == 5, err
    rc, out, err = eps.run("execute", "--dispatch-id", "dnot", "--after", "dbad", "cpu-small", "--duration", "20s",
                           "--wait", "--", SEEN)  # fmt: skip
    assert rc == PHASE_FAILED and "dependency_failed: needs 'dbad'" in err, (out, err)
    assert eps.dispatch("dnotn1")["state"] == "failed" and eps.attempts("dnotn1") == []
    rc, out, err = eps.run("execute", "--after", "nosuch", "cpu-small", "--duration", "20s", "--", "true")
    assert rc == 2 and "no dispatch 'nosuch'" in err, err


def test_after_a_sweep_starts_once_every_task_succeeded_with_each_tasks_outputs(eps: Eps, tmp_path: Path) -> None:
    go = tmp_path / "go"
    task = f'if [ "$EPS_TASK_INDEX" = 2 ]; then while [ ! -e {go} ]; do sleep 0.1; done; fi; {WRITE}'
    rc, out, err = eps.run("execute", "--dispatch-id", "dsweep", "cpu-small", "--duration", "20s", "--sweep", "3",
                           "--detach", "--", task)  # fmt: skip
    assert rc == 0, err
    rc, out, err = eps.run("execute", "--dispatch-id", "dafter", "--after", "dsweep", "cpu-small", "--duration",
                           "20s", "--detach", "--", SEEN)  # fmt: skip
    assert rc == 0, err
    tasks = {json.loads(eps.dispatch(f"dsweepn{i + 1}")["job"])["task_index"]: f"dsweepn{i + 1}" for i in range(3)}
    assert sorted(tasks) == [0, 1, 2]
    for i in (0, 1):
        eps.wait_attempt(tasks[i], lambda a: a["state"] == "ended", 60, f"task {i} to end")
    eps.wait_attempt(tasks[2], lambda a: a["state"] == "running", 60, "task 2 to run")
    assert eps.attempts("daftern1") == []  # two of three tasks succeeded: it still waits
    go.touch()
    rc, out, err = eps.run("wait", "dafter", timeout_s=90)
    assert rc == 0, (out, err)
    outs = eps.state / "outputs"
    assert seen_by(outs / "daftern1") == {f"dsweep/{i}/blob": sha(outs / row / "blob") for i, row in tasks.items()}
    assert max(eps.dispatch(row)["ended_at"] for row in tasks.values()) <= eps.attempts("daftern1")[0]["started_at"]
    rc, out, err = eps.run("status", "--json", "dafter")
    [row] = json.loads(out)["dispatches"]
    assert [(p["phase"], p["state"]) for p in row["phases"]] == [("dsweep", "succeeded"), ("job", "succeeded")], row
    # one task fails: the job after the fan-out ends dependency_failed, nothing created for it
    rc, out, err = eps.run("execute", "--dispatch-id", "dfan", "cpu-small", "--duration", "20s", "--count", "2",
                           "--wait", "--", 'test "$EPS_TASK_INDEX" = 0')  # fmt: skip
    assert rc != 0, err
    rc, out, err = eps.run("execute", "--dispatch-id", "dnofan", "--after", "dfan", "cpu-small", "--duration", "20s",
                           "--wait", "--", SEEN)  # fmt: skip
    assert rc == PHASE_FAILED and "dependency_failed: needs 'dfan'" in err, (out, err)
    assert eps.dispatch("dnofann1")["state"] == "failed" and eps.attempts("dnofann1") == []
    rc, out, err = eps.run("execute", "--after", "dsweepn1", "cpu-small", "--duration", "20s", "--", "true")
    assert rc == 2 and "--after dsweepn1: it is a row of a fan-out" in err, err  # a task alone: refused


def test_the_python_api_takes_the_same_pipeline_document(eps: Eps, tmp_path: Path) -> None:
    import eps as api

    doc = {"phases": [
        {"name": "prep", "cpu": True, "intent": "cpu-small", "duration": "20s", "command": WRITE},
        {"name": "report", "needs": ["prep"], "cpu": True, "intent": "cpu-small", "duration": "20s", "command": SEEN},
    ]}  # fmt: skip
    got = api.execute_pipeline(doc, wait=True, timeout="90s", dispatch_id="pipee", env=eps.env)
    assert (got.exit_code, got.dispatches, got.error) == (0, ("pipee",), None), got
    outs = {name: eps.state / "outputs" / i for name, i in _phase_ids(eps, "pipee").items()}
    assert seen_by(outs["report"]) == {"prep/blob": sha(outs["prep"] / "blob")}
    ids = _phase_ids(eps, "pipee")
    assert api.wait("pipee/report", env=eps.env)["dispatch"] == ids["report"]  # D/phase: the phase's own row
    assert [r["dispatch"] for r in api.status("pipee/prep", env=eps.env)] == [ids["prep"]]
    for call in (api.wait, api.status):  # an unknown phase: the CLI's one line
        with pytest.raises(api.JobError) as caught:
            call("pipee/nope", env=eps.env)
        assert (caught.value.code, str(caught.value)) == ("unknown_dispatch",
                                                          "no phase 'pipee/nope' (its phases: prep, report)")
    bad = api.execute_pipeline({"phases": [{"name": "a", "needs": ["b"], "intent": "cpu-small", "command": "true"}]},
                               env=eps.env)  # fmt: skip
    assert bad.exit_code == 2 and "unknown_need" not in (bad.error or "") and "needs 'b'" in (bad.error or ""), bad
