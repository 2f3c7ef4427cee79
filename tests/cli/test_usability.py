"""Issue 15 at the command line: plan equals execute (runnable rungs, the fix for each
unusable lane), the job file, stable JSON (schema_version, shipped schemas, JSON
errors), the exit-code table, tables that fit, --version, completion, did-you-mean,
help with real examples, durations everywhere."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from eps.shell.cli import main
from eps.shell.cli.exits import EXIT_TABLE
from eps.shell.cli.parser import EXAMPLES, build

ROOT = Path(__file__).resolve().parents[2]


def bare_env(tmp: Path, **extra: str) -> dict[str, str]:
    """A fresh machine: no config, no credentials, no SLURM client on PATH."""
    (tmp / "bin").mkdir(exist_ok=True)
    return {"HOME": str(tmp), "PATH": str(tmp / "bin"), "EPS_STATE_DIR": str(tmp / "state"), **extra}


def set_up_env(tmp: Path) -> dict[str, str]:
    """Every lane configured, with credentials (nothing is contacted by `eps plan`)."""
    cfg = tmp / "config.toml"
    cfg.write_text('[gcp]\nproject = "p"\nendpoint = "http://127.0.0.1:9"\n'
                   '[[clusters]]\nname = "fellows"\nlogin = ["ssh", "login"]\n')  # fmt: skip
    return bare_env(tmp, EPS_CONFIG=str(cfg), RUNPOD_API_KEY="rpa_test")


def run(capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    rc = main(argv, env=env)
    out, err = capsys.readouterr()
    return rc, out, err


def schema(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "eps" / "schemas" / f"{name}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(data)
    return data


def valid(doc: Any, name: str) -> None:
    jsonschema.validate(doc, schema(name), cls=jsonschema.Draft202012Validator)


# --- 1. plan equals execute ---------------------------------------------------------------------


def test_a_fresh_machine_sees_from_plan_alone_what_the_paid_lanes_need(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = bare_env(tmp_path)
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--duration", "30m"], env)
    assert rc == 0  # the policy has rungs; that none can run here is said, and is eps check's exit
    assert "gcp: no GCP project configured" in out
    assert 'fix: add [gcp] project = "YOUR-PROJECT"' in out
    assert "runpod: no RunPod API key" in out and "export RUNPOD_API_KEY=" in out
    assert "eps execute would end with no_usable_lane" in out
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--duration", "30m", "--json"], env)
    d = json.loads(out)
    valid(d, "plan")
    assert rc == 0 and d["can_start"] is False
    assert {r["runnable"] for r in d["rungs"]} == {False}
    assert {r["not_runnable"]["code"] for r in d["rungs"]} == {"not_configured", "no_credentials"}
    assert {u["lane"]: u["code"] for u in d["unusable_lanes"]} == {"gcp": "not_configured", "runpod": "no_credentials"}


def test_rungs_of_set_up_lanes_are_runnable_and_the_plan_exits_0(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--duration", "30m", "--json"], set_up_env(tmp_path))
    d = json.loads(out)
    assert rc == 0 and d["can_start"] and all(r["runnable"] and r["not_runnable"] is None for r in d["rungs"])
    assert d["rungs"][0]["reason"] == {"code": "gcp_cpu", "text": d["rungs"][0]["reason"]["text"]}


def test_a_plan_whose_only_outcome_is_terminal_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # H100/H200 only: an A100 80GB on-demand (a2-ultragpu-1g) would hold a 30-day job (issue 35)
    h = ["--gpu", "h100,h200"]
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--duration", "30d", *h, "--json"], set_up_env(tmp_path))
    d = json.loads(out)
    valid(d, "plan")
    assert rc == 1 and d["terminal"]["code"] == "gpu_exhausted" and d["rungs"] == []
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--duration", "30d", *h], set_up_env(tmp_path))
    assert rc == 1 and "terminal: nothing left to try (gpu_exhausted)" in out


# --- 2. the job file -----------------------------------------------------------------------------


def test_a_job_file_gives_the_options_and_flags_override_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('intent = "cpu-small"\nduration = "1h30m"\nrestartable = true\ncount = 3\nbackend = "gcp"\n'
                   'command = "python a.py"\n')  # fmt: skip
    env = set_up_env(tmp_path)
    rc, out, err = run(capsys, ["plan", "--job", str(job), "--json"], env)
    d = json.loads(out)
    assert rc == 0, err
    assert d["job"] == {"intent": "cpu-small", "duration_s": 5400, "restartable": True, "footprint_gb": 0.0,
                        "gradient_fit": False, "count": 3, "pin": "gcp", "command": ["python a.py"],
                        "fall_through": False, "gpu_models": [], "gpu_mem_gb": None, "sweep": 1,
                        "sweep_parallel": None}  # fmt: skip
    rc, out, err = run(capsys, ["plan", "--job", str(job), "cpu-bigmem", "--duration", "2h", "--no-restartable",
                                "--count", "1", "--json"], env)  # fmt: skip
    j = json.loads(out)["job"]
    got = (j["intent"], j["duration_s"], j["restartable"], j["count"], j["pin"])
    assert got == ("cpu-bigmem", 7200, False, 1, "gcp")


JOB_FILE_ERRORS = [
    ('intent = "cpu-small"\nduration = "soon"\n', "bad duration 'soon'", "@ $.duration"),
    ('intent = "cpu-small"\ncount = "4"\n', "expected int", "$.count"),
    ('intent = "cpu-small"\nrestartable = "yes"\n', "expected bool", "$.restartable"),
    ('intent = "cpu-small"\nenv = "HF_TOKEN"\n', "expected list[str]", "$.env"),
    ('intent = "cpu-small"\npin = "gcp"\n', "extra fields", "pin"),
    ('intent = "cpu-small"\ncount = 0\n', "at least 1", "$.count"),
    ('intent = "cpu-small"\ncommand = []\n', "must not be empty", "$.command"),
    ("intent = [\n", "not valid TOML", "job.toml"),
]


@pytest.mark.parametrize(("text", "says", "where"), JOB_FILE_ERRORS)
def test_a_bad_job_file_is_one_line_naming_the_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, says: str, where: str
) -> None:
    job = tmp_path / "job.toml"
    job.write_text(text)
    rc, out, err = run(capsys, ["plan", "--job", str(job)], set_up_env(tmp_path))
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert says in err and where in err and str(job) in err


def test_backend_pins_like_the_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"intent": "gpu-1", "duration": 3600, "backend": "fellows"}))
    rc, out, _ = run(capsys, ["plan", "--job", str(job), "--json"], set_up_env(tmp_path))
    d = json.loads(out)
    assert rc == 0 and [r["lane"] for r in d["rungs"]] == ["fellows"] and d["rungs"][0]["park_cap_s"] is None


# --- 3. stable JSON, 4. exit codes ----------------------------------------------------------------


def test_intents_json_validates_and_every_schema_is_a_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc, out, _ = run(capsys, ["intents", "--json"], bare_env(tmp_path))
    assert rc == 0
    valid(json.loads(out), "intents")
    rc, out, _ = run(capsys, ["schema"], bare_env(tmp_path))
    names = out.split()
    assert {"plan", "intents", "status", "events", "check", "error"} <= set(names)
    for name in names:
        rc, text, _ = run(capsys, ["schema", name], bare_env(tmp_path))
        assert rc == 0 and json.loads(text) == schema(name)
    rc, _, err = run(capsys, ["schema", "plans"], bare_env(tmp_path))
    assert rc == 2 and "did you mean plan?" in err


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["plan", "gpu1", "--json"], "unknown_intent"),
        (["plan", "gpu-1", "--duration", "soon", "--json"], "usage"),
        (["intents", "--json", "--bogus"], "usage"),
    ],
)
def test_errors_under_json_are_one_json_object_with_the_exit_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], code: str
) -> None:
    rc, out, err = run(capsys, argv, bare_env(tmp_path))
    assert rc == 2 and out == "" and err.count("\n") == 1
    doc = json.loads(err)
    valid(doc, "error")
    assert doc["exit_code"] == rc and doc["error"]["code"] == code


def test_readme_exit_codes_are_the_table() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `?(\d+)`? \| ([^|]+) \|", section, re.M)
    assert [(int(c), n.strip()) for c, n in rows] == [(int(c), n) for c, n, _ in EXIT_TABLE]


# --- 5. tables that fit ---------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", [["plan", "cpu-small", "--duration", "30m"], ["plan", "gpu-1"], ["intents"]])
def test_tables_fit_the_width_without_trailing_blanks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cmd: list[str]
) -> None:
    for cols in (80, 120):
        _, out, _ = run(capsys, cmd, {**bare_env(tmp_path), "COLUMNS": str(cols)})
        assert max(len(x) for x in out.splitlines()) <= cols, out
        assert all(x == x.rstrip() for x in out.splitlines())
    _, wide, _ = run(capsys, [*cmd, "--wide"], {**bare_env(tmp_path), "COLUMNS": "80"})
    assert max(len(x) for x in wide.splitlines()) > 80


# --- 6. CLI basics --------------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import tomllib

    import eps

    rc, out, _ = run(capsys, ["--version"], bare_env(tmp_path))
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert rc == 0 and out == f"eps {version}\n" and eps.__version__ == version


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["plan", "gpu1"], "did you mean gpu-1?"),
        (["plan", "cpu_small"], "did you mean cpu-small?"),
        (["plan", "gpu-1", "--pin", "fellow"], "did you mean fellows?"),
        (["exeucte", "gpu-1"], "did you mean execute?"),
        (["stauts"], "did you mean status?"),
    ],
)
def test_did_you_mean(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], hint: str) -> None:
    rc, _, err = run(capsys, argv, bare_env(tmp_path))
    assert rc == 2 and hint in err and err.count("\n") == 1


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    root = build()
    action = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_option_has_help_and_every_subcommand_ends_with_real_examples() -> None:
    subs = _subparsers()
    assert set(subs) == set(EXAMPLES)
    for name, p in {"eps": build(), **subs}.items():
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                continue
            assert a.help and a.help != argparse.SUPPRESS, (name, a.dest)
    for name, p in subs.items():
        text = p.format_help().rstrip()
        tail = text.split("examples:\n", 1)[1].splitlines()
        assert 2 <= len(tail) <= 3 and text.endswith(tail[-1]), name
        for example in EXAMPLES[name]:
            words = shlex.split(example.split(" > ")[0])[1:]
            k = words.index("--") if "--" in words else len(words)
            build().parse_args(words[:k])  # a real example: it parses


def test_execute_usage_shows_the_command() -> None:
    assert "-- COMMAND" in _subparsers()["execute"].format_usage()


def test_durations_everywhere_including_the_environment(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env = {**set_up_env(tmp_path), "EPS_FELLOWS_QUEUE_WAIT_SECONDS": "10m"}
    env["EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS"] = "00:02:00"
    for text, seconds in (("1h30m", 5400), ("90min", 5400), ("01:30:00", 5400), ("2H", 7200)):
        rc, out, err = run(capsys, ["plan", "gpu-1", "--duration", text, "--json"], env)
        d = json.loads(out)
        assert rc == 0, err
        assert d["job"]["duration_s"] == seconds
        assert [r["park_cap_s"] for r in d["rungs"] if r["lane"] == "fellows"] == [600, 120, 120]


def _completion_env(tmp: Path) -> dict[str, str]:
    """A shell whose `eps` is this checkout."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    eps = bin_dir / "eps"
    eps.write_text(f'#!/bin/sh\nexec {sys.executable} -c "from eps.shell.cli import entry; entry()" "$@"\n')
    eps.chmod(0o755)
    import os

    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp), "EPS_STATE_DIR": str(tmp / "state"),
            "PYTHONPATH": str(ROOT), "EPS_CONFIG": os.devnull if False else str(tmp / "none.toml")}  # fmt: skip


def test_bash_completion_completes_subcommands_intents_lanes_and_dispatches(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from eps.core.model import Job
    from eps.shell.state.ledger import Ledger

    env = _completion_env(tmp_path)
    env.pop("EPS_CONFIG")
    rc, script, _ = run(capsys, ["completion", "bash"], env)
    assert rc == 0
    (tmp_path / "eps.bash").write_text(script)
    ledger = Ledger(str(tmp_path / "state"))
    ledger.new_dispatch("eabc0000001", Job("cpu-small", 60))
    ledger.close()

    def complete(*words: str) -> list[str]:
        line = " ".join(shlex.quote(w) for w in ("eps", *words))
        prog = (f"source {tmp_path / 'eps.bash'}; COMP_WORDS=({line}); COMP_CWORD={len(words)}; "
                'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; _shtab_eps; printf "%s\\n" "${COMPREPLY[@]}"')
        out = subprocess.run(["bash", "-c", prog], env=env, capture_output=True, text=True, check=True, timeout=60)
        return sorted(x for x in out.stdout.split() if x)

    assert "plan" in complete("pl") and "check" in complete("ch")
    assert complete("plan", "gpu-") == ["gpu-1", "gpu-2", "gpu-4", "gpu-8"]
    assert complete("plan", "gpu-1", "--pin", "f") == ["fellows"]
    assert complete("status", "eabc") == ["eabc0000001"]
    rc, zsh, _ = run(capsys, ["completion", "zsh"], env)
    assert rc == 0 and "_eps_complete_dispatches" in zsh and "#compdef eps" in zsh


def test_a_run_builds_only_its_subcommand_and_parses_as_the_whole_parser_does() -> None:
    """``build(only=)`` (what ``eps plan`` costs) knows every subcommand the whole parser
    knows, and parses each one's arguments the same."""
    import argparse

    from eps.shell.cli.parser import SUBCOMMANDS, build

    [sub] = [a for a in build()._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(SUBCOMMANDS) == sorted(sub.choices)
    for argv in (["plan", "gpu-1", "--duration", "3h", "--json"], ["execute", "cpu-small", "--wait", "--pin", "gcp"],
                 ["logs", "e1", "--tail", "5"], ["status", "--active"], ["simulate", "--caps", "600,300"],
                 ["schema", "plan"], ["guide"], ["wait", "e1", "--timeout", "5m"]):  # fmt: skip
        assert vars(build(argv[0]).parse_args(argv)) == vars(build().parse_args(argv)), argv
