"""Issue 15 against real parts: `eps check` against the GCP and RunPod test servers and a
stub SLURM behind a login prefix; `eps execute` that could not even try a lane says why;
a job file that runs; status filters, times and list-price cost, answered fast and from
the ledger when a provider has no credentials; cancel of a finished dispatch; every
--json output validated against its shipped schema; the Python API used as a user would."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.core.outcome import Handle
from eps.core.states import AttemptState, DispatchState
from eps.shell.state.ledger import Ledger

ROOT = Path(__file__).resolve().parents[3]


def valid(doc: Any, name: str) -> None:
    schema = json.loads((ROOT / "eps" / "schemas" / f"{name}.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


def stub_login(tmp: Path, *, answer: bool = True) -> Path:
    """A login prefix that runs the SLURM command line with stub sacctmgr/sbatch on PATH."""
    bin_dir = tmp / "slurm-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sacctmgr").write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '  *assoc*) echo "fellows|me|fellows|high-eur,normal-eur,low-eur" ;;\n'
        '  *qos*) printf "high-eur|100000|7-00:00:00|gres/gpu=16\\nnormal-eur|50000|7-00:00:00|gres/gpu=16\\n'
        'low-eur|10000|14-00:00:00|\\n" ;;\n'
        "esac\n"
    )
    login = tmp / "login"
    refused = 'echo "ssh: connect: Connection refused" >&2; exit 255'
    body = f'PATH="{bin_dir}:$PATH" exec sh -c "$1"' if answer else refused
    login.write_text(f"#!/bin/sh\n{body}\n")
    for f in (bin_dir / "sacctmgr", login):
        f.chmod(0o755)
    return login


def with_cluster(eps: Any, login: Path) -> None:
    eps.config.write_text(eps.config.read_text() + f'[[clusters]]\nname = "fellows"\nlogin = ["{login}"]\n')


# --- eps check ------------------------------------------------------------------------------------


def test_check_every_lane_usable_exits_0_and_creates_nothing(eps: Any, gcp: Any, runpod: Any, tmp_path: Path) -> None:
    from executor_support import Eps

    (tmp_path / "x").mkdir()
    plain = Eps(tmp_path / "x", gcp, runpod)  # no test-only SLURM runner: the login prefix is asked
    plain.options = type(eps.options)(gcp_options=eps.options.gcp_options, runpod_options=eps.options.runpod_options)
    with_cluster(plain, stub_login(tmp_path))
    rc, out, err = plain("check", "--json")
    doc = json.loads(out)
    valid(doc, "check")
    assert rc == 0, (out, err)
    lanes = {r["lane"]: r for r in doc["lanes"]}
    assert all(r["usable"] for r in lanes.values()), lanes
    assert "high-eur, normal-eur, low-eur" in lanes["fellows"]["detail"]
    assert lanes["gcp"]["credentials"] is True and lanes["runpod"]["reachable"] is True
    assert doc["usable"] == {"cpu": ["gcp", "runpod"], "gpu": ["fellows", "gcp"]}
    # no ledger, nothing else (the harness put eps's ssh key there beforehand)
    assert sorted(p.name for p in plain.state.iterdir()) == ["ssh"]
    assert gcp.instances == {} and runpod.pods == {}
    rc, text, _ = plain("check")
    assert rc == 0 and "GPU jobs: fellows -> gcp" in text


def test_check_names_each_problem_and_its_fix(eps: Any, tmp_path: Path) -> None:
    with_cluster(eps, stub_login(tmp_path, answer=False))
    rc, out, err = eps("check", "--json", env={"RUNPOD_API_KEY": "rpa_WRONGKEY"})
    doc = json.loads(out)
    valid(doc, "check")
    lanes = {r["lane"]: r for r in doc["lanes"]}
    # GCP alone still serves both kinds: exit 0, with the two problems and their fixes shown
    assert rc == 0 and doc["ok"] is True and doc["usable"] == {"cpu": ["gcp"], "gpu": ["gcp"]}, err
    assert lanes["fellows"]["problem"]["code"] == "lane_down" and "sacctmgr" in lanes["fellows"]["fix"]
    assert lanes["runpod"]["problem"]["code"] == "lane_down" and lanes["runpod"]["reachable"] is False
    assert "rpa_WRONGKEY" not in out


def test_check_on_a_bare_machine_exits_1_with_every_fix(eps: Any, tmp_path: Path) -> None:
    eps.config.write_text("")
    rc, out, _ = eps("check", env={"RUNPOD_API_KEY": "", "HOME": str(tmp_path), "PATH": str(tmp_path)})
    assert rc == 1
    for text in ("no GCP project configured", '[gcp] project = "YOUR-PROJECT"', "no RunPod API key",
                 "RUNPOD_API_KEY", "CPU jobs: no usable lane here"):  # fmt: skip
        assert text in out


# --- execute names the real reason ---------------------------------------------------------------


def test_execute_with_nothing_configured_names_the_reasons_not_exhaustion(eps: Any, tmp_path: Path) -> None:
    eps.config.write_text("[jobs]\nsupervise = 'inline'\n")
    env = {"RUNPOD_API_KEY": "", "HOME": str(tmp_path)}
    rc, out, err = eps("execute", "cpu-small", "--duration", "30m", "--", "true", env=env)
    assert rc == 1, (out, err)
    assert "no_usable_lane" in out and "cpu_exhausted" not in out + err
    assert "gcp: no GCP project configured" in out and "runpod: no RunPod API key" in out
    assert "eps check" in out
    rc, events = eps.events("cpu-small", "--duration", "30m", "--", "true")  # with the key again: runpod tries
    assert events[-1]["event"] in ("started", "terminal")
    for e in events:
        valid(e, "events")


# --- the job file, status, cancel ----------------------------------------------------------------


def test_a_job_file_runs_and_status_filters_and_times(eps: Any, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "job.toml").write_text(
        'intent = "cpu-small"\nduration = "20s"\nworkdir = "."\nenv = ["GREETING=hi"]\n'
        "command = 'echo \"$GREETING from $(basename $PWD)\" > $EPS_OUTPUT_DIR/out.txt'\n"
    )
    rc, out, err = eps("execute", "--job", str(project / "job.toml"), "--wait")
    assert rc == 0, (out, err)
    [row] = eps.status()
    d = row["dispatch"]
    assert (eps.state / "outputs" / d / "out.txt").read_text() == "hi from work\n"
    # the job's own end is whole seconds (its wrapper's clock): within a second of eps's view
    assert row["started_at"] >= row["submitted_at"] and row["ended_at"] >= row["started_at"] - 1
    assert row["runtime_s"] >= 0 and row["list_price_per_hour"] == 0.0 and row["list_cost"] == 0.0
    rc, out, _ = eps("status", "--json", "--active")
    assert rc == 0 and json.loads(out)["dispatches"] == []
    rc, out, _ = eps("reconcile", "--json")
    valid(json.loads(out), "reconcile")
    rc, out, _ = eps("status", "--json", "--since", "1h", "--intent", "cpu-small")
    doc = json.loads(out)
    valid(doc, "status")
    assert [r["dispatch"] for r in doc["dispatches"]] == [d]
    rc, out, _ = eps("status", "--json", "--intent", "gpu-1")
    assert json.loads(out)["dispatches"] == []
    rc, _, err = eps("status", "--intent", "gpu1")
    assert rc == 2 and "did you mean gpu-1?" in err
    # cancel of a finished dispatch changes nothing and says so
    rc, out, err = eps("cancel", d)
    assert rc == 0 and "already ended; nothing to cancel" in out
    rc, out, _ = eps("cancel", d, "--json")
    valid(json.loads(out), "cancel")
    [after] = eps.status(d)
    assert (after["state"], after["message"], after["exit_code"]) == (row["state"], row["message"], 0)
    rc, text, _ = eps("status", env={"COLUMNS": "80"})
    assert rc == 0 and "runtime" in text and max(len(x) for x in text.splitlines()) <= 80


def test_status_skips_a_provider_without_credentials_at_once_with_a_note(eps: Any, tmp_path: Path) -> None:
    # GCP configured against Google itself, with no credentials anywhere: never asked.
    eps.config.write_text('[jobs]\nsupervise = "inline"\n[gcp]\nproject = "p"\n')
    ledger = Ledger(str(eps.state))
    ledger.new_dispatch("eabcdef0001", Job("cpu-small", 1800))
    rung = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "test", machine="e2-standard-4", zone="us-central1-a")
    attempt = ledger.begin_attempt("eabcdef0001", rung, "eps-eabcdef0001")
    ledger.update_attempt(attempt.id, AttemptState.RUNNING, handle="eps-eabcdef0001")
    handle = Handle("gcp", LaneKind.GCP, "eps-eabcdef0001", "gcp/e2-standard-4/us-central1-a/spot",
                    zone="us-central1-a", machine="e2-standard-4")  # fmt: skip
    ledger.set_dispatch("eabcdef0001", DispatchState.STARTED, handle=handle)
    ledger.close()
    env = {"HOME": str(tmp_path), "RUNPOD_API_KEY": ""}
    t = time.monotonic()
    rc, out, err = eps("status", "--json", env=env)
    took = time.monotonic() - t
    doc = json.loads(out)
    valid(doc, "status")
    assert rc == 0, err
    assert took < 2.0
    [note] = [n for n in doc["notes"] if n["lane"] == "gcp"]
    assert note["code"] == "no_credentials" and "not checked" in note["text"]
    [row] = doc["dispatches"]
    assert row["state"] == "started" and row["list_price_per_hour"] == pytest.approx(0.05, abs=0.05)


# --- the Python API --------------------------------------------------------------------------


def test_the_python_api_as_a_user_would(eps: Any, tmp_path: Path) -> None:
    import eps as api

    env = eps.env
    p = api.plan(api.Job("cpu-small", duration="20s", settings_env=env), env=env)
    assert p.can_start and p.rungs[0].rung.lane == "vm" and p.rungs[0].runnable
    valid(p.to_dict(), "plan")
    assert "vm" in str(p)
    with pytest.raises(api.JobError, match="did you mean gpu-1"):  # whether it plans: plan()'s to say
        api.plan(api.Job("gpu1", settings_env=env), env=env)
    with pytest.raises(ValueError, match="bad duration 'soon'"):
        api.Job("gpu-1", duration="soon", settings_env=env)
    with pytest.raises(ValueError, match="count must be at least 1"):
        api.Job("cpu-small", count=0, settings_env=env)
    run = api.execute(api.Job("cpu-small", duration="20s", command="exit 3", settings_env=env), wait=True, env=env)
    assert run.exit_code == 3 and len(run.dispatches) == 1
    for e in run.events:
        valid(e, "events")
    rows = api.status(run.dispatches[0], env=env)
    assert rows[0]["result"] == "failed (exit 3)"
    assert api.status(active=True, env=env) == []
