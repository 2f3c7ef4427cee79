"""A job runs for real on the VM lane (issue 12): its workdir goes with it, its output comes
back, its exit code is the truth.  Everything through ``eps`` commands, the way a user runs it."""

from __future__ import annotations

import hashlib
import itertools
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

SCRIPT = """\
import os, sys
data = open("data/input.txt").read()
out = os.environ["EPS_OUTPUT_DIR"]
with open(os.path.join(out, "result.txt"), "w") as fh:
    fh.write(data.upper() * 1000)
for i in range(100_000):
    print(f"line {i}")
print("secret seen:", os.environ.get("MY_TOKEN") == "s3cr3t-value", file=sys.stderr)
sys.exit(3)
"""


def _valid(name: str, out: str) -> Any:
    """``out`` parsed, checked against the shipped schema ``name``."""
    import jsonschema

    doc = json.loads(out)
    schema = json.loads((Path(__file__).parents[3] / "eps" / "schemas" / f"{name}.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    return doc


def _workdir(tmp: Path) -> Path:
    wd = tmp / "project"
    (wd / "data").mkdir(parents=True)
    (wd / "job.py").write_text(SCRIPT)
    (wd / "data" / "input.txt").write_text("hello from the data file\n")
    (wd / ".gitignore").write_text("big/\n*.tmp\n")
    (wd / "big").mkdir()
    (wd / "big" / "blob.bin").write_bytes(b"x" * 1000)
    (wd / "scratch.tmp").write_text("ignored")
    return wd


def test_a_real_job_on_the_vm_end_to_end(eps: Any, tmp_path: Path) -> None:
    wd = _workdir(tmp_path)
    rc, out, err = eps(
        "execute", "cpu-small", "--duration", "30s", "--workdir", str(wd), "--env", "MY_TOKEN",
        "--wait", "--", "python3", "job.py",
        env={"MY_TOKEN": "s3cr3t-value"},
    )  # fmt: skip
    assert rc == 3, (out, err)  # the job's own exit code
    [row] = eps.status()
    d = row["dispatch"]
    assert row["state"] == "ended" and row["message"].startswith("failed (exit 3)")
    # the whole log, every line
    rc, log, err = eps("logs", d)
    assert rc == 0, err
    lines = log.splitlines()
    assert [x for x in lines if x.startswith("line ")] == [f"line {i}" for i in range(100_000)]
    assert "secret seen: True" in log
    # the outputs came back, byte for byte
    result = eps.state / "outputs" / d / "result.txt"
    assert result.read_bytes() == b"HELLO FROM THE DATA FILE\n" * 1000
    # a piece of it: the last lines, or bytes from an offset, as MCP's logs tool gives them
    rc, out, err = eps("logs", d, "--tail", "3")
    assert (rc, out) == (0, "\n".join(lines[-3:]) + "\n"), err
    assert out.startswith("line 99999\nsecret seen: True\n")
    rc, out, err = eps("logs", d, "--max-bytes", "100", "--json")
    assert rc == 0, err
    [first] = _valid("logs", out)["logs"]
    assert (first["offset"], first["next_offset"], first["text"]) == (0, 100, log[:100])
    rc, out, err = eps("logs", d, "--offset", "100", "--max-bytes", "50", "--json")
    [more] = _valid("logs", out)["logs"]
    assert (more["offset"], more["text"], more["size"]) == (100, log[100:150], len(log.encode()))
    rc, out, err = eps("logs", d, "--tail", "2", "-f")
    assert rc == 2 and "choose one" in err and len(err.strip().splitlines()) == 1
    rc, out, err = eps("pull", d, "--to", str(tmp_path / "again"), "--json")
    assert rc == 0, err
    assert [p["dispatch"] for p in _valid("pull", out)["pulled"]] == [d]
    assert hashlib.sha256((tmp_path / "again" / "result.txt").read_bytes()).digest() == hashlib.sha256(
        result.read_bytes()
    ).digest()
    # the ignore rules held; the machine (here a process) is gone
    shipped = eps.state / "runs" / d / "0" / "work"
    assert (shipped / "job.py").exists() and not (shipped / "big").exists() and not (shipped / "scratch.tmp").exists()
    # the value of --env is nowhere eps writes: not the ledger, not its logs, not its output
    with sqlite3.connect(eps.state / "ledger.sqlite3") as db:
        assert "s3cr3t-value" not in "\n".join(db.iterdump())
    for f in (eps.state / "logs").iterdir():
        assert "s3cr3t-value" not in f.read_text(errors="replace")
    assert "s3cr3t-value" not in out + err
    assert not list((eps.state / "env").glob("*.env"))  # the kept values went with the dispatch


def test_a_shell_line_runs_through_bash_and_an_argv_runs_as_is(eps: Any, tmp_path: Path) -> None:
    rc, _, err = eps("execute", "cpu-small", "--duration", "30s", "--wait", "--",
                       "echo piped | tr a-z A-Z > $EPS_OUTPUT_DIR/a.txt")  # fmt: skip
    assert rc == 0, err
    d1 = eps.status()[0]["dispatch"]
    assert (eps.state / "outputs" / d1 / "a.txt").read_text() == "PIPED\n"
    rc, _, err = eps("execute", "cpu-small", "--duration", "30s", "--wait", "--",
                       "sh", "-c", 'printf "%s" "$1" > "$EPS_OUTPUT_DIR/b.txt"', "sh", "a | b; $(x)")  # fmt: skip
    assert rc == 0, err
    d2 = next(r["dispatch"] for r in eps.status() if r["dispatch"] != d1)
    assert (eps.state / "outputs" / d2 / "b.txt").read_text() == "a | b; $(x)"


def test_copies_get_their_index_and_wait_reports_which_failed(eps: Any, tmp_path: Path) -> None:
    line = 'echo "$EPS_TASK_INDEX/$EPS_TASK_COUNT" > "$EPS_OUTPUT_DIR/i"; [ "$EPS_TASK_INDEX" != 1 ]'
    rc, out, err = eps("execute", "cpu-small", "--duration", "30s", "--count", "3", "--wait", "--", line)
    assert rc == 1, (out, err)
    assert "failed (exit 1)" in err
    parent = next(r["dispatch"] for r in eps.status() if r["parent"] is None)
    rc, out, err = eps("pull", parent, "--to", str(tmp_path / "all"))
    assert rc == 0, err
    got = sorted((p.parent.name, p.read_text().strip()) for p in (tmp_path / "all").glob("*/i"))
    assert got == [(f"{parent}n1", "0/3"), (f"{parent}n2", "1/3"), (f"{parent}n3", "2/3")]


def test_the_time_limit_stops_the_job_and_says_timed_out(eps: Any) -> None:
    rc, out, err = eps("execute", "cpu-small", "--duration", "30s", "--time-limit", "2s", "--wait", "--", "sleep 60")
    assert rc == 124, (out, err)
    [row] = eps.status()
    assert row["message"].startswith("timed out")


def test_wait_and_logs_and_ssh_on_a_running_job(eps: Any) -> None:
    rc, out, err = eps("execute", "cpu-small", "--duration", "30s", "--", "echo started; sleep 2; echo done")
    assert rc == 0, err
    d = eps.status()[0]["dispatch"]
    rc, out, err = eps("pull", d)
    assert rc == 2 and "has not ended yet" in err  # nothing to pull yet: one line, exit 2
    rc, out, err = eps("ssh", d, "--", "pwd")
    assert rc == 0, err
    rc, out, err = eps("logs", d, "-f")
    assert rc == 0 and "started" in out and "done" in out
    rc, out, err = eps("wait", d)
    assert rc == 0, err
    assert eps.status(d)[0]["message"].startswith("succeeded")


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["execute", "cpu-small", "--workdir", "/nonexistent/wd", "--", "true"], {}, "no such directory"),
        (["execute", "cpu-small", "--env", "NOT_SET_ANYWHERE", "--", "true"], {}, "not set in your environment"),
        (["execute", "cpu-small", "--env", "1BAD", "--", "true"], {}, "not a variable name"),
        (["execute", "cpu-small", "--time-limit", "soon", "--", "true"], {}, "--time-limit"),
        (["execute", "cpu-small", "--setup", " ", "--", "true"], {}, "--setup is empty"),
        (["execute", "cpu-small", "--workdir", "", "--", "true"], {}, "--workdir is empty"),
        (["execute", "cpu-small", "--env", "A=1", "--env", "A=2", "--", "true"], {}, "given twice"),
        (["execute", "cpu-small", "--env", "A", "--env", "A=2", "--", "true"], {"A": "1"}, "given twice"),
        (["wait", "enosuch000"], {}, "no dispatch"),
        (["logs", "enosuch000"], {}, "no dispatch"),
        (["pull", "enosuch000"], {}, "no dispatch"),
        (["ssh", "enosuch000"], {}, "no dispatch"),
        (["logs", "enosuch000", "--tail", "0"], {}, "--tail"),
        (["logs", "enosuch000", "--offset", "-3"], {}, "--offset"),
        (["logs", "enosuch000", "--max-bytes", "99999999"], {}, "--max-bytes"),
        (["logs", "enosuch000", "--json", "-f"], {}, "no dispatch"),
    ],
)
def test_bad_lifecycle_input_is_one_line_and_changes_nothing(
    eps: Any, gcp: Any, runpod: Any, argv: list[str], env: dict[str, str], needle: str
) -> None:
    rc, out, err = eps(*argv, env=env)
    assert rc == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert gcp.requests == [] and runpod.requests == []
    assert not (eps.state / "ledger.sqlite3").exists() or eps.status() == []


def test_pull_to_a_file_or_an_impossible_path_is_one_line(eps: Any, tmp_path: Path) -> None:
    rc, _, err = eps("execute", "cpu-small", "--duration", "30s", "--wait", "--", 'echo x > "$EPS_OUTPUT_DIR/x"')
    assert rc == 0, err
    d = eps.status()[0]["dispatch"]
    (tmp_path / "a-file").write_text("keep me")
    for to, needle in (
        (tmp_path / "a-file", "not a directory"),
        (tmp_path / "a-file" / "below", "cannot create it"),
        (Path("/proc/eps-no-such/x"), "cannot create it"),
    ):
        rc, out, err = eps("pull", d, "--to", str(to))
        assert rc == 2, (to, out, err)
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "a-file").read_text() == "keep me"


def test_a_workdir_over_the_limit_names_its_biggest_files(eps: Any, tmp_path: Path) -> None:
    wd = tmp_path / "huge"
    wd.mkdir()
    with open(wd / "weights.bin", "wb") as fh:  # sparse: 3 GiB on paper, nothing on disk
        fh.truncate(3 * 2**30)
    (wd / "small.txt").write_text("x")
    rc, out, err = eps("execute", "cpu-small", "--workdir", str(wd), "--", "true")
    assert rc == 2, (out, err)
    assert "weights.bin" in err and len(err.strip().splitlines()) == 1
    assert eps.status() == []


def test_execute_json_and_wait_json_agree(eps: Any) -> None:
    rc, events = eps.events("cpu-small", "--duration", "30s", "--", "exit 0")
    assert rc == 0
    d = events[-1]["dispatch"]
    time.sleep(0.2)
    rc, out, err = eps("wait", d, "--json")
    assert rc == 0, err
    assert any(json.loads(line).get("event") == "ended" for line in out.splitlines() if line.startswith("{"))


def test_wait_looks_less_and_less_often_while_a_long_job_runs(eps: Any) -> None:
    """``eps wait`` starts at ``[jobs] wait_poll_s`` and backs off (x1.5 a round, up to 15 x
    the setting): a job of hours is not asked over ssh every two seconds."""
    from eps.shell.config.load import load_settings
    from eps.shell.lanes import Lanes
    from eps.shell.render.progress import Reporter
    from eps.shell.run.follow import follow_to_end
    from eps.shell.state.ledger import Ledger

    rc, _, err = eps("execute", "cpu-small", "--duration", "30s", "--", "sleep 4")
    assert rc == 0, err
    d = eps.status()[0]["dispatch"]
    settings = load_settings(eps.env)
    ledger, lanes = Ledger(settings.state_dir), Lanes(settings, eps.options)
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        time.sleep(s)

    try:
        done = follow_to_end(ledger, lanes, Reporter(json_lines=True), [d], poll_s=0.05, sleep=sleep)
        code = ledger.dispatch(d).exit_code  # type: ignore[union-attr]
    finally:
        lanes.close()
        ledger.close()
    assert done and code == 0
    # each nap is taken in slices up to its end, so a slice is a hair under the nap it belongs to
    assert slept[0] == pytest.approx(0.05, rel=0.1) and slept[1] == pytest.approx(0.075, rel=0.1)
    assert all(b >= a * 0.9 for a, b in itertools.pairwise(slept))
    assert max(slept) == pytest.approx(0.75, rel=0.1)  # 15 x wait_poll_s
