"""``--sweep N`` / ``--sweep-parallel K`` through the front doors (issue 36, item 1; the
design is docs/design/sweeps.md): ``eps plan`` says it is N tasks of the intent and plans
each as the job alone; the job file, ``eps.Job`` and the MCP tools take the same values; a
bad one is one line, exit 2 and records nothing (``eps execute`` of a good one runs:
tests/shell/executor/test_sweep_vm.py, tests/shell/faults/test_faults_sweep_slurm.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import eps
from eps.core.model import JobError
from tests.cli.test_usability import run, schema, set_up_env


def _plan(capsys: pytest.CaptureFixture[str], env: dict[str, str], *args: str) -> dict[str, Any]:
    rc, out, err = run(capsys, ["plan", *args, "--json"], env)
    assert rc == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_plan_says_a_sweep_is_n_tasks_each_planned_as_the_job_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import jsonschema

    env = set_up_env(tmp_path)
    alone = _plan(capsys, env, "gpu-1", "--duration", "2h")
    swept = _plan(capsys, env, "gpu-1", "--duration", "2h", "--sweep", "6", "--sweep-parallel", "2")
    jsonschema.validate(swept, schema("plan"))
    jsonschema.validate(alone, schema("plan"))
    assert (swept["tasks"], swept["tasks_at_once"]) == (6, 2) and (alone["tasks"], alone["tasks_at_once"]) == (1, None)
    assert (swept["job"]["sweep"], swept["job"]["sweep_parallel"]) == (6, 2)
    assert swept["rungs"] == alone["rungs"] and swept["worst_case_wait_s"] == alone["worst_case_wait_s"]
    [note] = [n for n in swept["notes"] if n not in alone["notes"]]
    assert note.startswith("sweep: 6 tasks of gpu-1") and note.endswith("one sbatch --array=0-5%2")
    rc, out, err = run(capsys, ["plan", "gpu-1", "--duration", "2h", "--sweep=6", "--sweep-parallel=2"], env)
    assert rc == 0, err
    assert out.startswith("gpu-1  (gpu, 2h, a sweep of 6 tasks)\n")
    assert f"note: {note}" in " ".join(out.split())  # the note, wrapped to the terminal's width


@pytest.mark.parametrize(("args", "says"), [
    (["--sweep", "0"], "sweep must be a whole number of tasks 1..1000, got 0"),
    (["--sweep", "-1"], "sweep must be a whole number of tasks 1..1000, got -1"),
    (["--sweep", "1001"], "got 1001"),
    (["--sweep", "x"], "sweep must be a whole number, got 'x'"),
    (["--sweep-parallel", "0", "--sweep", "3"], "sweep parallel must be a whole number >= 1, got 0"),
    (["--sweep-parallel", "2"], "sweep parallel 2 needs a sweep (--sweep N with N > 1)"),
    (["--sweep", "6", "--sweep-parallel", "7"], "sweep parallel 7 is more than the sweep's 6 tasks"),
])  # fmt: skip
@pytest.mark.parametrize("cmd", ["plan", "execute"])
def test_a_bad_sweep_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cmd: str, args: list[str], says: str
) -> None:
    env = set_up_env(tmp_path)
    rc, out, err = run(capsys, [cmd, "gpu-1", "--duration", "1h", *args, *(["--", "true"] if cmd == "execute" else [])],
                       env)  # fmt: skip
    assert rc == 2 and out == "" and err.count("\n") == 1 and says in err, err
    _no_dispatch(env)


def test_a_cpu_count_and_a_sweep_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = run(capsys, ["plan", "cpu-small", "--duration", "1h", "--count", "2", "--sweep", "3"],
                       set_up_env(tmp_path))  # fmt: skip
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "--sweep 3 with --count 2: both fan a CPU job out into machines; give one (--sweep 6" in err


def _no_dispatch(env: dict[str, str]) -> None:
    ledger = Path(env["EPS_STATE_DIR"]) / "ledger.sqlite3"
    if ledger.exists():
        with sqlite3.connect(ledger) as db:
            assert db.execute("SELECT count(*) FROM dispatches").fetchone() == (0,)


def test_a_job_file_gives_the_sweep_and_flags_override_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('intent = "gpu-1"\nduration = "2h"\nsweep = 6\nsweep_parallel = 2\n')
    env = set_up_env(tmp_path)
    doc = _plan(capsys, env, "--job", str(job))
    assert (doc["tasks"], doc["tasks_at_once"]) == (6, 2)
    doc = _plan(capsys, env, "--job", str(job), "--sweep", "8")
    assert (doc["tasks"], doc["tasks_at_once"]) == (8, 2)


@pytest.mark.parametrize(("body", "key", "says"), [
    ("sweep = 0\n", "sweep", "sweep must be a whole number of tasks 1..1000, got 0"),
    ('sweep = "6"\n', "sweep", "expected int"),
    ("sweep = 6\nsweep_parallel = 0\n", "sweep_parallel", "sweep parallel must be a whole number >= 1, got 0"),
    ("sweep = 6\nsweep_parallel = 9\n", "sweep_parallel", "sweep parallel 9 is more than the sweep's 6 tasks"),
])  # fmt: skip
def test_a_bad_sweep_in_a_job_file_names_the_file_and_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, key: str, says: str
) -> None:
    job = tmp_path / "job.toml"
    job.write_text('intent = "gpu-1"\nduration = "1h"\n' + body)
    rc, out, err = run(capsys, ["plan", "--job", str(job)], set_up_env(tmp_path))
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert str(job) in err and says in err and f"$.{key}" in err, err


def test_the_python_api_takes_a_sweep_and_checks_it_when_made(tmp_path: Path) -> None:
    env = set_up_env(tmp_path)
    p = eps.plan(eps.Job("gpu-1", duration="2h", sweep=6, sweep_parallel=2), env=env)
    doc = p.to_dict()
    assert (doc["tasks"], doc["tasks_at_once"]) == (6, 2)
    assert "a sweep of 6 tasks" in str(p)
    assert eps.Job("gpu-1", sweep=6, sweep_parallel=2).argv()[-4:] == ["--sweep", "6", "--sweep-parallel", "2"]
    for bad in ({"sweep": 0}, {"sweep": "6"}, {"sweep_parallel": 3}, {"sweep": 2, "sweep_parallel": 3}):
        with pytest.raises(JobError) as info:
            eps.Job("gpu-1", **bad)  # type: ignore[arg-type]
        assert "\n" not in str(info.value)


def test_the_help_says_what_a_sweep_does(capsys: pytest.CaptureFixture[str]) -> None:
    from eps.shell.cli import main

    with pytest.raises(SystemExit) as ended:
        main(["execute", "--help"], env={})
    assert ended.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "plan only" not in said  # --sweep runs (tests/shell/executor/test_sweep_vm.py)
    assert "one row in eps status, one eps wait and one eps cancel for all of them" in said
    assert "a task that ends lets the next start" in said
    for cmd in ("logs", "pull"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"], env={})
        assert "--task I" in capsys.readouterr().out


def test_plan_fits_a_trivial_cpu_sweep_on_the_shared_vm_by_the_tasks_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A VM with room for 4 cpu-small side by side (64 GB): ``--sweep 5`` does not fit there
    (P2: 5 at once), ``--sweep 5 --sweep-parallel 2`` does (2 at once, not 5)."""
    env = set_up_env(tmp_path)
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"vm": {"mem_gb": 64}}))
    args = ["cpu-small", "--duration", "30s", "--sweep", "5", "--snapshot", str(snap)]
    every = _plan(capsys, env, *args)
    assert every["rungs"][0]["lane"] != "vm"
    [why] = [s for s in every["skipped"] if s["lane"] == "vm"]
    assert "80 GB of memory (5 copies side by side)" in json.dumps(why), why
    two = _plan(capsys, env, *args, "--sweep-parallel", "2")
    assert two["rungs"][0]["lane"] == "vm", two["rungs"]
    assert not [s for s in two["skipped"] if s["lane"] == "vm"]
