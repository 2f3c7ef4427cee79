"""The pure part of object storage (eps.core.storage): URLs, inputs, each task's place, the
rclone config, and the wrapper's storage lines (a table of cases, and properties)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eps.core.jobscript import LAYOUT, JobSpec, render_env_file, render_jobscript
from eps.core.lifecycle import job_spec, storage_plan
from eps.core.model import Job
from eps.core.storage import (
    Input,
    StorageError,
    StorageUrl,
    inputs_of,
    parse_input,
    parse_url,
    place,
    rclone_config,
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("s3://bucket/runs", StorageUrl("s3", "bucket", "runs")),
        ("s3://bucket", StorageUrl("s3", "bucket", "")),
        ("s3://bucket/", StorageUrl("s3", "bucket", "")),
        ("gs://my.bucket-1/a/b/", StorageUrl("gs", "my.bucket-1", "a/b")),
        ("s3://b_c/x y", StorageUrl("s3", "b_c", "x y")),
    ],
)
def test_urls(text: str, want: StorageUrl) -> None:
    assert parse_url(text) == want
    assert parse_url(str(want)) == want  # says itself back


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("http://bucket/x", "give s3://"),
        ("s3:/bucket/x", "give s3://"),
        ("bucket/x", "give s3://"),
        ("s3://Bucket/x", "not a bucket name"),
        ("s3://ab/x", "not a bucket name"),
        ("s3://a..b/x", "not a bucket name"),
        ("s3://bucket/a//b", "empty, '.' or '..'"),
        ("s3://bucket/a/../b", "empty, '.' or '..'"),
        ("s3://bucket/a\nb", "control characters"),
        ("s3://bucket/a\\b", "backslashes"),
    ],
)
def test_bad_urls_are_one_line(text: str, says: str) -> None:
    with pytest.raises(StorageError, match=None) as got:
        parse_url(text)
    assert says in str(got.value) and "\n" not in str(got.value)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("s3://b0b/data/shards:shards", Input(StorageUrl("s3", "b0b", "data/shards"), "shards")),
        ("s3://b0b/data/shards", Input(StorageUrl("s3", "b0b", "data/shards"), "shards")),
        ("gs://b0b/x:in/deep/", Input(StorageUrl("gs", "b0b", "x"), "in/deep")),
        ("s3://b0b", Input(StorageUrl("s3", "b0b", ""), "b0b")),
    ],
)
def test_inputs(text: str, want: Input) -> None:
    assert parse_input(text) == want


@pytest.mark.parametrize("text", ["s3://b0b/x:/abs", "s3://b0b/x:../up", "s3://b0b/x:a/../../b", "s3://b0b/x:a//b"])
def test_an_input_stays_in_the_workdir(text: str) -> None:
    with pytest.raises(StorageError, match="relative path within the workdir"):
        parse_input(text)


def test_inputs_may_not_overlap() -> None:
    with pytest.raises(StorageError, match="overlaps"):
        inputs_of(["s3://b0b/x:data", "s3://b0b/y:data/sub"])
    assert len(inputs_of(["s3://b0b/x:data", "s3://b0b/y:database"])) == 2


def test_each_task_and_run_has_its_place() -> None:
    url = parse_url("s3://b0b/runs")
    first = place(url, "dabc", 2, 0)
    assert first.outputs == "s3:b0b/runs/dabc/2/out" and first.log == "s3:b0b/runs/dabc/2/job.log"
    assert first.outputs_url == "s3://b0b/runs/dabc/2/out"
    again = place(url, "dabc", 2, 3)
    assert again.outputs == first.outputs and again.log == "s3:b0b/runs/dabc/2/job.r3.log"  # outputs carry over


def test_rclone_config_refuses_a_value_that_would_start_a_key_and_never_says_it() -> None:
    text = rclone_config({"s3": {"type": "s3", "secret_access_key": "abc"}})
    assert text == "[s3]\nsecret_access_key = abc\ntype = s3\n"
    with pytest.raises(StorageError) as got:
        rclone_config({"s3": {"secret_access_key": "abc\nendpoint = http://evil"}})
    assert "evil" not in str(got.value) and "abc" not in str(got.value)
    with pytest.raises(StorageError):
        rclone_config({"ftp": {}})


def test_no_storage_no_lines_and_the_wrapper_is_unchanged() -> None:
    job = Job("cpu-small", command=("true",))
    assert storage_plan(job, "dabc") is None
    assert "rclone" not in render_jobscript(job_spec(job, "dabc"))


def test_a_relaunch_restores_and_every_run_uploads_at_its_sync_interval() -> None:
    job = Job("cpu-small", command=("true",), storage="s3://b0b/p", sync_every_s=7, restart=2)
    plan = storage_plan(job, "dabc")
    assert plan is not None and plan.restore and plan.every_s == 7
    text = render_jobscript(job_spec(job, "dabc"))
    assert "from %s\\n' s3://b0b/p/dabc/0/out" in text and "sleep 7 &" in text
    only_inputs = storage_plan(Job("cpu-small", command=("true",), inputs=("s3://b0b/d",)), "dabc")
    assert only_inputs is not None and only_inputs.place is None
    assert "_eps_upload" not in render_jobscript(job_spec(Job("cpu-small", command=("true",), inputs=("s3://b0b/d",)),
                                                          "dabc"))  # fmt: skip


_part = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF, exclude_characters="/\\\x7f"),
                min_size=1, max_size=12).filter(lambda p: p not in (".", ".."))  # fmt: skip


#: URL[:DEST] splits at the last ':', so a DEST never holds one (a prefix may)
_dest_part = _part.filter(lambda p: ":" not in p)


@settings(max_examples=60, deadline=None)
@given(prefix=st.lists(_part, min_size=0, max_size=3), dest=st.lists(_dest_part, min_size=1, max_size=3),
       every=st.integers(0, 86400), restart=st.integers(0, 3))  # fmt: skip
def test_any_place_and_input_render_a_script_bash_reads(prefix: list[str], dest: list[str], every: int,
                                                        restart: int) -> None:  # fmt: skip
    url = "s3://b0b/" + "/".join(prefix)
    source = "s3://b0b/in/" + "/".join(prefix)
    job = Job("cpu-small", command=("true",), storage=url, sync_every_s=every, restart=restart,
              inputs=(f"{source}:{'/'.join(dest)}",))  # fmt: skip
    text = render_jobscript(job_spec(job, "dabc"))
    assert subprocess.run(["bash", "-n"], input=text.encode(), check=False).returncode == 0
    # each rclone path is one word that bash reads back exactly
    where = place(parse_url(url), "dabc", 0, restart)
    for word in (where.outputs, where.log):
        assert subprocess.run(["bash", "-c", 'printf %s "$1"', "-", word], capture_output=True,
                              check=True).stdout.decode() == word  # fmt: skip


def test_the_wrapper_removes_its_credentials_once_its_last_transfer_is_done() -> None:
    forget = '_eps_rm "$_eps_root/rclone.conf"'
    stored = render_jobscript(job_spec(Job("cpu-small", command=("true",), storage="s3://b0b/p"), "dabc"))
    end = stored.index("  _eps_end() {")
    # once, inside the end, after the last upload (confirmed or not) and before `stored` is written
    assert stored.count(forget) == 1
    at = stored.index(forget)
    assert end < stored.index("copyto job.log s3:b0b/p/dabc/0/job.log || ") < at < stored.index("_eps_put stored")
    inputs = render_jobscript(job_spec(Job("cpu-small", command=("true",), inputs=("s3://b0b/d",)), "dabc"))
    # inputs only: once they are copied (before the job starts), and in an end that comes first
    assert inputs.count(forget) == 2
    first, second = inputs.index(forget), inputs.rindex(forget)
    assert inputs.index("  _eps_end() {") < first < inputs.index("_eps_put exit-code") < second
    assert inputs.rindex("in %s\\n' s3://b0b/d") < second < inputs.index("exec timeout -k")


_HF = ("HF_XET_HIGH_PERFORMANCE", "HF_HUB_DOWNLOAD_TIMEOUT")


@pytest.mark.parametrize(
    ("given", "env_file", "expect"),
    [
        ({}, None, "1|60"),  # the wrapper's defaults, on every lane
        ({"HF_XET_HIGH_PERFORMANCE": "0", "HF_HUB_DOWNLOAD_TIMEOUT": "300"}, None, "0|300"),  # a cluster's own
        ({"HF_HUB_DOWNLOAD_TIMEOUT": "300"}, {"HF_HUB_DOWNLOAD_TIMEOUT": "5"}, "1|5"),  # the job's --env wins
    ],
)
def test_the_hugging_face_transfer_settings(tmp_path: Path, given: dict[str, str], env_file: dict[str, str] | None,
                                            expect: str) -> None:  # fmt: skip
    spec = JobSpec(('printf %s "$HF_XET_HIGH_PERFORMANCE|$HF_HUB_DOWNLOAD_TIMEOUT|${HF_HUB_ENABLE_HF_TRANSFER-unset}"'
                    ' > "$EPS_OUTPUT_DIR/hf"',), "hf1", 30, env_names=tuple(env_file or ()))  # fmt: skip
    root = tmp_path / "runs" / "hf1" / "0"
    (root / LAYOUT.workdir).mkdir(parents=True)
    (root / LAYOUT.script).write_text(render_jobscript(spec))
    if env_file is not None:
        (root / LAYOUT.env).write_text(render_env_file(env_file))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | given
    done = subprocess.run(["bash", str(root / LAYOUT.script), "run"], capture_output=True, text=True, timeout=30,
                          check=False, env=env)  # fmt: skip
    assert done.returncode == 0, (root / LAYOUT.log).read_text()
    # never HF_HUB_ENABLE_HF_TRANSFER: without the hf_transfer package an older client fails every download
    assert (root / "out" / "hf").read_text() == expect + "|unset"
