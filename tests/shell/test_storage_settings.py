"""``[storage]`` as the config reader takes it (one line per mistake), the credentials a
job's machine gets (from the provider's standard places only), and a job's storage resolved
at submission (eps.shell.config.storage, eps.shell.run.storage)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eps.core.model import Job, JobError
from eps.core.storage import CONF_VALUE
from eps.shell.config.load import load_settings
from eps.shell.config.settings import ConfigError
from eps.shell.config.storage import StorageSettings
from eps.shell.run.storage import remotes, with_storage

SECRET = "s3cr3t-Value/with+chars"  # noqa: S105 (a made-up key)


def _settings(tmp_path: Path, text: str) -> object:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    return load_settings({"EPS_CONFIG": str(cfg), "HOME": str(tmp_path), "EPS_STATE_DIR": str(tmp_path / "s")})


def test_the_section_is_read(tmp_path: Path) -> None:
    s = _settings(tmp_path, '[storage]\nurl = "s3://b0b/runs"\nendpoint = "http://127.0.0.1:9"\nregion = "eu-west-1"\n'
                            'provider = "Minio"\nprofile = "lab"\n')  # fmt: skip
    assert s.storage == StorageSettings("s3://b0b/runs", "http://127.0.0.1:9", "eu-west-1", "Minio", "lab")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('url = "ftp://b0b/x"', "$.storage.url"),
        ('url = "s3://B/x"', "not a bucket name"),
        ('endpoint = "localhost:9000"', "$.storage.endpoint"),
        ('gs_endpoint = "storage.example/v1"', "$.storage.gs_endpoint"),
        ('region = "EU WEST"', "$.storage.region"),
        ('provider = "Dropbox"', "$.storage.provider"),
        ('machine_credentials = "key"', "$.storage.machine_credentials"),
        ('scope = "admin"', "$.storage.scope"),
        ("url = 3", "$.storage.url"),
        ('bucket = "b0b"', "bucket"),
    ],
)
def test_each_mistake_is_one_line(tmp_path: Path, body: str, says: str) -> None:
    with pytest.raises(ConfigError) as got:
        _settings(tmp_path, f"[storage]\n{body}\n")
    assert says in str(got.value) and "\n" not in str(got.value)


def test_s3_keys_from_the_environment_else_the_shared_file_and_never_in_a_message(tmp_path: Path) -> None:
    st = StorageSettings("s3://b0b/x", endpoint="http://127.0.0.1:9")
    env = {"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": SECRET, "HOME": str(tmp_path)}
    s3 = remotes(["s3"], st, env, machine=True)["s3"]
    assert (s3["access_key_id"], s3["secret_access_key"], s3["endpoint"]) == ("AKIDENV", SECRET, "http://127.0.0.1:9")
    creds = tmp_path / ".aws" / "credentials"
    creds.parent.mkdir()
    creds.write_text(f"[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = x\n"
                     f"[lab]\naws_access_key_id = AKIDLAB\naws_secret_access_key = {SECRET}\n")  # fmt: skip
    home = {"HOME": str(tmp_path)}
    assert remotes(["s3"], st, home, machine=True)["s3"]["access_key_id"] == "AKIDDEF"
    assert remotes(["s3"], st, {**home, "AWS_PROFILE": "lab"}, machine=True)["s3"]["access_key_id"] == "AKIDLAB"
    assert remotes(["s3"], st._replace(profile="lab"), home, machine=True)["s3"]["access_key_id"] == "AKIDLAB"
    job = Job("cpu-small", command=("true",), storage="s3://b0b/x")
    with pytest.raises(JobError) as got:
        with_storage(job, {}, st, {**home, "AWS_PROFILE": "nope"}, 600)
    assert "no credentials" in str(got.value) and SECRET not in str(got.value)


def test_a_job_takes_the_default_location_or_its_own_or_none(tmp_path: Path) -> None:
    st = StorageSettings("s3://b0b/default")
    env = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": SECRET}
    plain = Job("cpu-small", command=("true",))
    job, values = with_storage(plain, {"K": "v"}, st, env, 600)
    assert job.storage == "s3://b0b/default" and job.sync_every_s == 600
    assert values["K"] == "v" and SECRET in values[CONF_VALUE] and "[s3]" in values[CONF_VALUE]
    own, _ = with_storage(plain._replace(storage="s3://b0b/own", sync_every_s=5), {}, st, env, 600)
    assert own.storage == "s3://b0b/own" and own.sync_every_s == 5
    off, values = with_storage(plain._replace(storage="none"), {}, st, env, 600)
    assert off.storage is None and CONF_VALUE not in values
    nothing, values = with_storage(plain, {}, None, {}, 600)
    assert nothing.storage is None and values == {}


def test_gs_takes_a_service_account_key_or_the_vms_own_account(tmp_path: Path) -> None:
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "private_key": "-----BEGIN\nX\n-----END\n",
                               "client_email": "a@b"}))  # fmt: skip
    st = StorageSettings("gs://b0b/x")
    gs = remotes(["gs"], st, {"GOOGLE_APPLICATION_CREDENTIALS": str(key)}, machine=True)["gs"]
    assert json.loads(gs["service_account_credentials"])["client_email"] == "a@b" and "endpoint" not in gs
    own = _settings(tmp_path, '[storage]\nurl = "gs://b0b/x"\ngs_endpoint = "http://127.0.0.1:9/storage/v1/"\n')
    private = own.storage  # type: ignore[attr-defined]
    assert private.gs_endpoint == "http://127.0.0.1:9/storage/v1/" and private.endpoint is None
    for machine in (True, False):  # the job's machine and eps's own reads
        got = remotes(["gs", "s3"], private, {"GOOGLE_APPLICATION_CREDENTIALS": str(key), "AWS_ACCESS_KEY_ID": "A",
                                              "AWS_SECRET_ACCESS_KEY": SECRET}, machine=machine)  # fmt: skip
        assert got["gs"]["endpoint"] == "http://127.0.0.1:9/storage/v1/" and "endpoint" not in got["s3"]
    assert "\n" not in gs["service_account_credentials"]
    vm = remotes(["gs"], st._replace(machine_credentials="service-account"), {}, machine=True)["gs"]
    assert vm["env_auth"] == "true" and "service_account_credentials" not in vm
    job = Job("cpu-small", command=("true",), storage="gs://b0b/x")
    with pytest.raises(JobError, match="service_account"):
        with_storage(job, {}, st._replace(machine_credentials="service-account"), {}, 600, None)
    key.write_text(json.dumps({"type": "authorized_user"}))
    with pytest.raises(JobError, match="not a service account key"):
        with_storage(job, {}, st, {"GOOGLE_APPLICATION_CREDENTIALS": str(key)}, 600)
    os.unlink(key)
    with pytest.raises(JobError, match="cannot be read"):
        with_storage(job, {}, st, {"GOOGLE_APPLICATION_CREDENTIALS": str(key)}, 600)
