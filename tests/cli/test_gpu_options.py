"""Issue 35 at the front doors: ``--gpu TYPE[,TYPE...]`` and ``--gpu-mem GB`` in ``eps plan``
(and so ``eps execute``), the job file's ``gpu`` and ``gpu_mem``, and the Python API's ``gpu``
and ``gpu_mem``; a need no lane meets is one line on stderr, exit 2, nothing planned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eps.core.model import JobError
from eps.shell.request.keywords import Job
from tests.cli.test_usability import run, set_up_env, valid


def _plan(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    rc, out, err = run(capsys, ["plan", *argv, "--json"], set_up_env(tmp_path))
    doc = json.loads(out) if out.strip() else {}
    if doc:
        valid(doc, "plan")
    return rc, doc, err


def _gcp(doc: dict) -> list[str]:  # type: ignore[type-arg]
    return list(dict.fromkeys(r["machine"] for r in doc["rungs"] if r["lane"] == "gcp"))


def test_debug_starts_gcp_on_an_l4(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, doc, _ = _plan(capsys, tmp_path, "debug", "--duration", "30m")
    assert rc == 0 and _gcp(doc)[0] == "g2-standard-4"
    assert doc["rungs"][0]["lane"] == "fellows"


def test_gpu_a100_80_is_only_a2_ultragpu_and_the_job_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc, doc, _ = _plan(capsys, tmp_path, "gpu-1", "--duration", "2h", "--gpu", "a100-80")
    assert rc == 0 and _gcp(doc) == ["a2-ultragpu-1g"] and {r["lane"] for r in doc["rungs"]} == {"gcp"}
    assert doc["job"]["gpu_models"] == ["a100-80"] and doc["job"]["gpu_mem_gb"] is None
    assert any(s["reason"]["code"] == "gpu_not_wanted" and s["lane"] == "fellows" for s in doc["skipped"])


def test_gpu_mem_raises_the_floor(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, doc, _ = _plan(capsys, tmp_path, "debug", "--duration", "30m", "--gpu-mem", "40")
    assert rc == 0 and _gcp(doc) == ["a2-highgpu-1g", "a2-ultragpu-1g", "a3-highgpu-1g"]
    assert doc["job"]["gpu_mem_gb"] == 40


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["gpu-1", "--gpu", "l4", "--gpu-mem", "80"], "no such GPU: no lane has l4 with at least 80 GB"),
        (["gpu-1", "--gpu", "h1000"], "unknown GPU 'h1000'"),
        (["gpu-1", "--gpu-mem", "lots"], "--gpu-mem takes a whole number of GB per GPU"),
        (["cpu-small", "--duration", "1h", "--gpu", "l4"], "cpu-small is CPU-only work (P1)"),
    ],
)
def test_a_need_that_cannot_be_met_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], said: str
) -> None:
    rc, out, err = run(capsys, ["plan", *argv], set_up_env(tmp_path))
    assert rc == 2 and out == ""
    assert said in err and len(err.strip().splitlines()) == 1, err


def test_the_job_file_says_it_and_flags_override(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('intent = "gpu-1"\nduration = "2h"\ngpu = ["a100-80", "h100"]\ngpu_mem = 80\n')
    rc, doc, _ = _plan(capsys, tmp_path, "--job", str(job))
    assert rc == 0 and doc["job"]["gpu_models"] == ["a100-80", "h100"] and doc["job"]["gpu_mem_gb"] == 80
    assert _gcp(doc) == ["a2-ultragpu-1g", "a3-highgpu-1g"]
    rc, doc, _ = _plan(capsys, tmp_path, "--job", str(job), "--gpu", "h100")
    assert rc == 0 and _gcp(doc) == ["a3-highgpu-1g"]


@pytest.mark.parametrize(
    ("text", "path"), [('gpu = ["x"]', "$.gpu"), ("gpu = []", "$.gpu"), ("gpu_mem = -3", "$.gpu_mem")]
)
def test_a_bad_gpu_in_a_job_file_names_its_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, path: str
) -> None:
    job = tmp_path / "job.toml"
    job.write_text(f'intent = "gpu-1"\n{text}\n')
    rc, out, err = run(capsys, ["plan", "--job", str(job)], set_up_env(tmp_path))
    assert rc == 2 and out == "" and f"@ {path}" in err and len(err.strip().splitlines()) == 1, err


def test_intents_say_each_gpu_intents_need(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, _ = run(capsys, ["intents", "--json"], set_up_env(tmp_path))
    assert rc == 0
    doc = json.loads(out)
    valid(doc, "intents")
    by = {i["name"]: i for i in doc["intents"]}
    assert by["debug"]["gpu_mem_gb"] == 24 and by["gpu-1"]["gpu_mem_gb"] == 80
    assert by["gpu-1"]["gcp_gpu_machines"] == ["a2-ultragpu-1g", "a3-highgpu-1g"]
    assert by["debug"]["gcp_gpu_machines"][0] == "g2-standard-4"


def test_the_python_api_takes_gpu_and_gpu_mem(tmp_path: Path) -> None:
    from eps.api import plan

    job = Job("gpu-1", duration="2h", gpu=["a100-80"], gpu_mem=40)
    assert job.core().gpu_models == ("a100-80",) and job.core().gpu_mem_gb == 40
    assert job.argv()[-4:] == ["--gpu", "a100-80", "--gpu-mem", "40"]
    with pytest.raises(JobError) as info:  # whether it can be planned is plan()'s to say (once, in the service)
        plan(Job("gpu-1", gpu="l4", gpu_mem=80), env=set_up_env(tmp_path))
    assert info.value.code == "no_such_gpu"
    with pytest.raises(JobError) as info:
        Job("gpu-1", gpu="x")
    assert info.value.code == "bad_gpu"
