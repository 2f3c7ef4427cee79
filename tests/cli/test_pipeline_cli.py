"""``eps plan --job pipeline.toml`` (issue 36 item 2) through main(argv): each phase's route is
the same job's ``eps plan`` alone, the waves and the worst-case wait before a paid lane are
shown and in ``--json`` (valid against ``eps/schemas/pipeline.json``); every bad pipeline is one
line naming the file and the path, exit 2, nothing recorded; ``eps execute`` of a pipeline
with a command, a job option, a bad phase, or without a supervisor, is refused in one line
before anything is opened (running one: tests/shell/faults/test_faults_pipeline.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from eps.core.model import Job
from tests.cli.test_usability import ROOT, run, set_up_env

THREE = """\
[[phases]]
name = "prep"
cpu = true
intent = "cpu-small"
duration = "1h"
command = "python prep.py"

[[phases]]
name = "train"
needs = ["prep"]
intent = "gpu-1"
duration = "3h"
restartable = true
command = "python train.py"
[phases.retry]
on = ["interruption"]
max_restarts = 2

[[phases]]
name = "report"
needs = ["train"]
cpu = true
intent = "cpu-small"
duration = "20m"
command = ["python", "report.py"]
"""


def _valid(doc: Any) -> None:
    """``doc`` against the pipeline schema, each phase's plan against the plan schema it names."""
    schemas = {n: json.loads((ROOT / "eps" / "schemas" / f"{n}.json").read_text()) for n in ("pipeline", "plan")}
    registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas.values())
    jsonschema.Draft202012Validator.check_schema(schemas["pipeline"])
    jsonschema.Draft202012Validator(schemas["pipeline"], registry=registry).validate(doc)


def _file(tmp_path: Path, body: str, name: str = "pipeline.toml") -> Path:
    f = tmp_path / name
    f.write_text(body)
    return f


def test_p1_p7_p8_a_three_phase_pipeline_plans_each_phase_as_its_job_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = set_up_env(tmp_path)
    f = _file(tmp_path, THREE)
    rc, out, err = run(capsys, ["plan", "--job", str(f), "--json"], env)
    assert rc == 0, err
    doc = json.loads(out)
    _valid(doc)
    assert [p["name"] for p in doc["phases"]] == ["prep", "train", "report"]
    assert doc["waves"] == [["prep"], ["train"], ["report"]] and [p["wave"] for p in doc["phases"]] == [1, 2, 3]
    assert doc["worst_case_wait_s"] == 1200 and doc["critical_path"] == ["prep", "train", "report"]
    assert [p["chain_wait_s"] for p in doc["phases"]] == [0, 1200, 1200]
    assert doc["terminal"] == [] and doc["can_start"] is True
    lanes = {p["name"]: p["plan"]["rungs"][0]["lane"] for p in doc["phases"]}
    assert lanes == {"prep": "gcp", "train": "fellows", "report": "gcp"}
    # each phase's plan is `eps plan --json` of the same job alone, in a one-job file of its keys
    alone = {
        "prep": 'intent = "cpu-small"\nduration = "1h"\ncommand = "python prep.py"\n',
        "train": 'intent = "gpu-1"\nduration = "3h"\nrestartable = true\ncommand = "python train.py"\n'
                 '[retry]\non = ["interruption"]\nmax_restarts = 2\n',
        "report": 'intent = "cpu-small"\nduration = "20m"\ncommand = ["python", "report.py"]\n',
    }  # fmt: skip
    for phase in doc["phases"]:
        one = _file(tmp_path, alone[phase["name"]], f"{phase['name']}.toml")
        rc, single, _ = run(capsys, ["plan", "--job", str(one), "--json"], env)
        assert rc == 0 and phase["plan"] == json.loads(single), phase["name"]
    rc, out, _ = run(capsys, ["plan", "--job", str(f), "--wide"], env)
    assert rc == 0
    assert "pipeline " + str(f) + ": 3 phases in 3 waves" in out
    assert "  wave 2: train\n" in out and "phase train (wave 2, needs prep):" in out
    assert "phase report (wave 3, needs train, cpu):" in out
    assert ("pipeline worst-case wait before a paid lane, along prep -> train -> report: 0 s + 1200 s + 0 s = "
            "1200 s (20m)") in out  # fmt: skip
    assert out.count("worst-case wait before a paid lane: ") == 3  # each phase's own plan, as alone


def test_phases_that_need_nothing_of_each_other_share_a_wave(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = ('[[phases]]\nname = "a"\nintent = "gpu-1"\nduration = "1h"\n'
            '[[phases]]\nname = "b"\nintent = "gpu-2"\nduration = "1h"\n'
            '[[phases]]\nname = "join"\nneeds = ["a", "b"]\nintent = "cpu-small"\nduration = "30s"\n')  # fmt: skip
    rc, out, _ = run(capsys, ["plan", "--job", str(_file(tmp_path, body)), "--json"], set_up_env(tmp_path))
    doc = json.loads(out)
    _valid(doc)
    assert rc == 0 and doc["waves"] == [["a", "b"], ["join"]]
    assert doc["worst_case_wait_s"] == 1200  # side by side, not 2400
    assert doc["phases"][2]["plan"]["rungs"][0]["lane"] == "vm"  # trivial: the shared VM (P2), as alone


def test_a_terminal_phase_makes_the_pipeline_exit_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    out_of_stock = [{"id": "cpu3g", "stock": "none"}, {"id": "cpu5g", "stock": "none"}]
    snap.write_text(json.dumps({"gcp": [{"machine": "e2-standard-4", "zone": "*", "state": "exhausted"}],
                                "runpod": out_of_stock}))  # fmt: skip
    body = '[[phases]]\nname = "a"\nintent = "cpu-small"\nduration = "1h"\n'
    f = _file(tmp_path, body)
    rc, out, _ = run(capsys, ["plan", "--job", str(f), "--snapshot", str(snap), "--json"], set_up_env(tmp_path))
    doc = json.loads(out)
    _valid(doc)
    assert rc == 1 and doc["terminal"] == ["a"] and doc["phases"][0]["plan"]["terminal"]["code"] == "cpu_exhausted"
    rc, out, _ = run(capsys, ["plan", "--job", str(f), "--snapshot", str(snap)], set_up_env(tmp_path))
    assert rc == 1 and "no rung left for: a" in out


PHASE = '[[phases]]\nname = "prep"\nintent = "cpu-small"\nduration = "1h"\n'


@pytest.mark.parametrize(("body", "code", "says", "at"), [
    ('[[phases]]\nname = "prep"\nintent = "cpu-small"\nduration = "soon"\n', "bad_file", "bad duration 'soon'",
     "$.phases[0].duration"),
    ('[[phases]]\nname = "prep"\nintent = "cpu-small"\nbackend = "nowhere"\n', "unknown_lane",
     "phase 'prep': unknown lane 'nowhere'", "$.phases[0].backend"),
    (PHASE + '[[phases]]\nname = "train"\nintent = "gpu-l"\nneeds = ["prep"]\n', "unknown_intent",
     "phase 'train': unknown intent 'gpu-l'", "$.phases[1].intent"),
    (PHASE + '[[phases]]\nname = "report"\nintent = "cpu-small"\nneeds = ["trian"]\n', "unknown_need",
     "phase 'report' needs 'trian'", "$.phases[1].needs"),
    ('[[phases]]\nname = "a"\nintent = "cpu-small"\nneeds = ["b"]\n'
     '[[phases]]\nname = "b"\nintent = "cpu-small"\nneeds = ["a"]\n', "pipeline_cycle", "a cycle: a -> b -> a",
     "$.phases[0].needs"),
    (PHASE + '[[phases]]\nname = "prep"\nintent = "gpu-1"\n', "duplicate_phase", "two phases are named 'prep'",
     "$.phases[1].name"),
    ('[[phases]]\nname = "report"\ncpu = true\nintent = "gpu-1"\n', "cpu_phase_holds_gpu",
     "phase 'report' says cpu = true but its job plans as GPU work (gpu-1)", "$.phases[0].cpu"),
    ('[[phases]]\nname = "fit"\ncpu = true\nintent = "cpu-small"\ngradient_fit = true\n', "cpu_phase_holds_gpu",
     "(cpu-small -> gpu-1; gradient_fit", "$.phases[0].cpu"),
    ('[[phases]]\nname = "prep"\nintent = "cpu-small"\ngpu = "h100"\n', "gpu_on_cpu", "phase 'prep': cpu-small is",
     "$.phases[0]"),
    ('[[phases]]\nname = "Prep"\nintent = "cpu-small"\n', "bad_phase_name", "bad phase name 'Prep'",
     "$.phases[0].name"),
    ('[[phases]]\nintent = "cpu-small"\n', "bad_file", "every phase needs a name", "$.phases[0].name"),
    ('[[phases]]\nname = "prep"\n', "bad_file", "phase 'prep' needs an intent", "$.phases[0].intent"),
    ('[[phases]]\nname = "prep"\nintent = "cpu-small"\nneeds = "x"\n', "bad_file", "needs is a list",
     "$.phases[0].needs"),
    ('[[phases]]\nname = "prep"\nintent = "cpu-small"\ncpu = "yes"\n', "bad_file", "cpu is true or false",
     "$.phases[0].cpu"),
    ('[[phases]]\nname = "prep"\nintent = "cpu-small"\nbogus = 1\n', "bad_file", "extra fields found (bogus)",
     "$.phases[0]"),
    ('[[phases]]\nname = "prep"\nintent = "cpu-small"\n[phases.retry]\non = ["bogus"]\n', "bad_file",
     "unknown retry event 'bogus'", "$.phases[0].retry.on"),
    ('intent = "cpu-small"\n' + PHASE, "bad_file", "holds [[phases]] only: intent goes in each phase", "$.intent"),
    ("phases = []\n", "pipeline_empty", "a pipeline needs at least one phase", "$.phases"),
    ("phases = 3\n", "bad_file", "phases is a list of tables", "$.phases"),
])  # fmt: skip
@pytest.mark.parametrize("cmd", [["plan"], ["plan", "--json"]])
def test_a_bad_pipeline_is_one_line_naming_the_file_and_the_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cmd: list[str], body: str, code: str, says: str, at: str
) -> None:
    f = _file(tmp_path, body)
    env = set_up_env(tmp_path)
    rc, out, err = run(capsys, [*cmd, "--job", str(f)], env)
    assert rc == 2 and out == ""
    if "--json" in cmd:
        doc = json.loads(err)
        assert doc["error"]["code"] == code
        text = doc["error"]["text"]
    else:
        assert err.count("\n") == 1 and err.startswith("eps: error: ")
        text = err.removeprefix("eps: error: ").rstrip("\n")
    assert text.startswith(f"{f}: ") and says in text, text
    assert text.split(" @ ")[-1].split(" ")[0] == at, text
    assert not (Path(env["EPS_STATE_DIR"]) / "ledger.sqlite3").exists()


@pytest.mark.parametrize("flags", [["--count", "3"], ["--duration", "1h"], ["--pin", "gcp"], ["--restartable"],
                                   ["--park", "high-eur=60"], ["gpu-1"], ["--input", "s3://b/p"]])  # fmt: skip
def test_job_options_on_the_command_line_cannot_say_which_phase(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str]
) -> None:
    f = _file(tmp_path, THREE)
    rc, out, err = run(capsys, ["plan", *flags, "--job", str(f)], set_up_env(tmp_path))
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "a pipeline's phases give their own job options in the file" in err, err


@pytest.mark.parametrize(("extra", "said"), [
    (["--", "echo", "hi"], "each phase gives its own command in the file"),
    (["--duration", "1h"], "a pipeline's phases give their own job options in the file; --duration"),
    (["--json", "--pin", "gcp"], "--pin cannot say which phase it is for"),
    (["--wait"], 'a pipeline runs under a supervisor ([jobs] supervise = "detached")'),
])  # fmt: skip
def test_execute_of_a_pipeline_refused_before_anything_is_opened(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str], said: str
) -> None:
    env = set_up_env(tmp_path)
    if "supervisor" in said:  # a config that walks inline
        Path(env["EPS_CONFIG"]).write_text(Path(env["EPS_CONFIG"]).read_text() + "[jobs]\nsupervise = 'inline'\n")
    f = _file(tmp_path, THREE)
    rc, out, err = run(capsys, ["execute", "--job", str(f), *extra], env)
    assert rc == 2 and out == ""
    if "--json" in extra:
        assert json.loads(err)["error"]["code"] == "usage" and said in err, err
    else:
        assert err.count("\n") == 1 and said in err, err
    assert not Path(env["EPS_STATE_DIR"]).exists()  # no ledger, no supervisor, nothing recorded


def test_execute_of_a_bad_pipeline_is_its_plan_refusal_before_anything_is_opened(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = set_up_env(tmp_path)
    f = _file(tmp_path, THREE.replace('needs = ["prep"]', 'needs = ["prep", "report"]', 1))
    rc, out, err = run(capsys, ["execute", "--job", str(f)], env)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "the phases' needs form a cycle" in err, err
    assert not Path(env["EPS_STATE_DIR"]).exists()


def test_a_one_job_file_is_still_one_job(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = _file(tmp_path, 'intent = "cpu-small"\nduration = "1h"\n', "job.toml")
    rc, out, _ = run(capsys, ["plan", "--job", str(f), "--count", "2", "--json"], set_up_env(tmp_path))
    assert rc == 0 and json.loads(out)["count"] == 2


@pytest.mark.parametrize("after", [False, True])
def test_a_pipeline_on_a_teams_ledger_without_storage_is_refused_and_records_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pg_url: str, after: bool
) -> None:
    """On a ledger hosts share a phase's inputs go through storage (a host taking the pipeline
    over has none of this host's files): a phase with needs, or --after, without [storage] is
    refused, one line, nothing in the database."""
    from eps.shell.state.ledger import Ledger

    env = {**set_up_env(tmp_path), "EPS_STATE_URL": pg_url, "PGPASSFILE": os.environ["PGPASSFILE"]}
    if after:
        seen = Ledger(str(tmp_path / "other"), url=pg_url, host="other")
        seen.new_dispatch("dprev", Job("cpu-small"))
        seen.close()
        argv = ["execute", "cpu-small", "--duration", "1m", "--after", "dprev", "--", "true"]
    else:
        argv = ["execute", "--job", str(_file(tmp_path, THREE))]
    rc, out, err = run(capsys, argv, env)
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert "on a team's ledger ([state] url) a phase's inputs are handed on through storage" in err, err
    ledger = Ledger(str(tmp_path / "look"), url=pg_url, host="look")
    try:
        assert [r.id for r in ledger.dispatches()] == (["dprev"] if after else [])
    finally:
        ledger.close()
