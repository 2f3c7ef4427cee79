"""``eps plan --input URL[:DEST]`` (and a job file's ``inputs``): the plan names what would be
copied where on the machine, in text and ``--json`` (``eps schema plan``), without listing or
sizing anything ("sized at submission": ``eps execute`` lists each prefix); a bad one is one
line, exit 2, nothing made; and the plan path loads no storage client, no subprocess and no
socket for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from imports import loaded_by
from jsonschema import Draft202012Validator

from eps.shell.cli import args as plain
from eps.shell.cli import main
from eps.shell.cli.parser import build
from eps.shell.cli.schemas import schema_text

SIZED = "sized at submission"


def _env(tmp_path: Path) -> dict[str, str]:
    return {"EPS_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}


def _run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv), env=_env(tmp_path))
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_plan_names_each_input_and_where_it_goes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = _run(capsys, tmp_path, "plan", "cpu-small", "--duration", "1h", "--input",
                        "s3://b0b/data/shards:shards", "--input", "gs://g0g/models", "--json")  # fmt: skip
    assert rc == 0, err
    doc = json.loads(out)
    Draft202012Validator(json.loads(schema_text("plan"))).validate(doc)
    assert doc["inputs"] == [
        {"url": "s3://b0b/data/shards", "dest": "shards", "objects": None, "bytes": None, "size": SIZED},
        {"url": "gs://g0g/models", "dest": "models", "objects": None, "bytes": None, "size": SIZED},
    ]
    rc, text, err = _run(capsys, tmp_path, "plan", "cpu-small", "--duration", "1h", "--input",
                         "s3://b0b/data/shards:in/shards")  # fmt: skip
    assert rc == 0, err
    assert f"inputs (copied on the machine before setup; {SIZED}):\n  s3://b0b/data/shards -> in/shards\n" in text
    rc, out, err = _run(capsys, tmp_path, "plan", "cpu-small", "--duration", "1h", "--json")
    assert json.loads(out)["inputs"] == []
    rc, text, err = _run(capsys, tmp_path, "plan", "cpu-small", "--duration", "1h")
    assert "inputs" not in text
    assert not (tmp_path / "state").exists()  # nothing made


def test_a_job_files_inputs_are_in_the_plan_and_the_flag_wins(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:  # fmt: skip
    job = tmp_path / "job.toml"
    job.write_text('intent = "cpu-small"\nduration = "1h"\ninputs = ["s3://b0b/data/shards:shards"]\n')
    rc, out, err = _run(capsys, tmp_path, "plan", "--job", str(job), "--json")
    assert rc == 0, err
    assert [(i["url"], i["dest"]) for i in json.loads(out)["inputs"]] == [("s3://b0b/data/shards", "shards")]
    rc, out, err = _run(capsys, tmp_path, "plan", "--job", str(job), "--input", "gs://g0g/m", "--json")
    assert [(i["url"], i["dest"]) for i in json.loads(out)["inputs"]] == [("gs://g0g/m", "m")]


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("ftp://x/y", "give s3://BUCKET/PREFIX or gs://BUCKET/PREFIX"),
        ("s3://UPPER/y", "is not a bucket name"),
        ("s3://b0b/p:../up", "DEST must be a relative path"),
    ],
)
def test_a_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, given: str,
                                            says: str) -> None:  # fmt: skip
    rc, out, err = _run(capsys, tmp_path, "plan", "cpu-small", "--input", given)
    assert rc == 2 and out == ""
    assert says in err and len(err.strip().splitlines()) == 1, err
    rc, out, err = _run(capsys, tmp_path, "plan", "cpu-small", "--input", given, "--json")
    assert rc == 2 and out == "" and says in json.loads(err)["error"]["text"]  # one JSON object, on stderr
    rc, out, err = _run(capsys, tmp_path, "plan", "cpu-small", "--input", "s3://b0b/a:x", "--input", "s3://b0b/b:x")
    assert rc == 2 and "overlaps another input's" in err
    assert not (tmp_path / "state").exists()


def test_inputs_load_no_storage_client_and_no_network(tmp_path: Path) -> None:
    heavy = ("boto3", "botocore", "google.cloud.compute_v1", "httpx", "subprocess", "socket", "argparse",
             "eps.shell.run.storage", "eps.shell.config.storage", "sqlite3")  # fmt: skip
    argv = ("plan", "cpu-small", "--duration", "1h", "--input", "s3://b0b/a:x", "--input", "gs://g0g/b", "--json")
    assert loaded_by(argv, {"EPS_STATE_DIR": str(tmp_path / "state")}, heavy) == []


def test_it_is_read_without_argparse_as_argparse_reads_it() -> None:
    for line in ("plan cpu-small --input s3://b0b/a:x", "plan cpu-small --input=s3://b0b/a --json --input gs://g0g/b",
                 "plan --job job.toml --input s3://b0b/a --count 2"):  # fmt: skip
        argv = line.split()
        ns = plain.plan_namespace(argv)
        assert ns is not None, line
        assert list(vars(ns).items()) == list(vars(build("plan").parse_args(argv)).items()), line
    for line in ("plan cpu-small --input", "plan cpu-small --input -x", "plan cpu-small --input="):
        assert plain.plan_namespace(line.split()) is None, line
