"""Object storage, the shell's part (:mod:`eps.core.storage` is the pure part): which
location a job stores to, the credentials its machine gets, and this machine's own reads
of storage (``eps pull`` and ``eps logs`` of a job whose machine is gone).

Credentials come from the provider's standard places when a command runs (never from an
argument, never written to the ledger, an event or a log):

- ``s3://``: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (``AWS_SESSION_TOKEN``), else
  the shared credentials file (``AWS_SHARED_CREDENTIALS_FILE`` or ``~/.aws/credentials``),
  profile ``AWS_PROFILE``, else ``[storage] profile``, else ``default``;
- ``gs://``: the service account key of ``GOOGLE_APPLICATION_CREDENTIALS``; or, with
  ``[storage] machine_credentials = "service-account"``, none at all: the GCP VM's own
  service account (``env_auth``), eps's own reads use the same variable's key.

The job's machine gets them as rclone.conf, mode 0600, in its dispatch root; eps keeps that
text with the ``--env`` values of the dispatch (mode 0600 in the state directory, dropped when
it settles) so that its supervisor can ship it.  eps's own rclone runs read a 0600 file of
the state directory that is removed when the run ends.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from eps.core.model import Job, JobError, evolve
from eps.core.storage import CONF_VALUE, RCLONE_FLAGS, StorageError, inputs_of, parse_url, rclone_config
from eps.shell.config.storage import StorageSettings

#: What eps's own rclone runs call themselves (a server's log tells them from the machines').
LOCAL_AGENT = "eps"


def effective(job: Job, settings: StorageSettings | None) -> str | None:
    """The job's storage URL: its own (``none``: off), else the config's ``[storage] url``."""
    if job.storage == "none":
        return None
    return job.storage or (settings.url if settings else None)


def schemes_of(job: Job) -> list[str]:
    """The rclone remotes the job's machine needs: its storage's scheme and its inputs'."""
    found = [parse_url(job.storage).scheme] if job.storage else []
    found += [i.source.scheme for i in inputs_of(job.inputs)]
    return sorted(set(found))


def with_storage(job: Job, values: dict[str, str], settings: StorageSettings | None, env: Mapping[str, str],
                 sync_every_s: int, machine_account: str | None = None) -> tuple[Job, dict[str, str]]:  # fmt: skip
    """``job`` with its storage resolved (the config's default taken, ``none`` dropped), and
    ``values`` with its machine's rclone.conf when it needs one.  Bad input (no credentials
    for the scheme) is a :class:`JobError`, before anything happens."""
    job = evolve(job, storage=effective(job, settings))
    if job.storage and job.sync_every_s is None:  # the machine uploads this often: fixed at submission
        job = evolve(job, sync_every_s=sync_every_s)
    schemes = schemes_of(job)
    if not schemes:
        return job, values
    vm_account = settings is not None and settings.machine_credentials == "service-account"
    if "gs" in schemes and vm_account and machine_account is None:
        raise JobError("storage", 'storage gs:// with machine_credentials = "service-account" needs [gcp] '
                       "service_account (the VM's own account; it gets the storage scope)", job)  # fmt: skip
    try:
        conf = rclone_config(remotes(schemes, settings or StorageSettings(), env, machine=True))
    except StorageError as exc:
        raise JobError("storage", str(exc), job) from None
    return job, {**values, CONF_VALUE: conf}


def remotes(schemes: Sequence[str], settings: StorageSettings, env: Mapping[str, str], *,
            machine: bool) -> dict[str, dict[str, str]]:  # fmt: skip
    """rclone's remotes for ``schemes`` with their credentials (:class:`StorageError` when
    there are none).  ``machine``: for a job's machine (the VM's service account may stand
    in for a key there), else for this machine's own reads."""
    out: dict[str, dict[str, str]] = {}
    for scheme in schemes:
        if scheme == "s3":
            out["s3"] = _s3(settings, env)
        else:
            out["gs"] = _gs(settings, env, machine=machine)
    return out


def _s3(settings: StorageSettings, env: Mapping[str, str]) -> dict[str, str]:
    keys = {"type": "s3", "provider": settings.provider, "env_auth": "false", "no_check_bucket": "true"}
    if settings.endpoint:
        keys["endpoint"] = settings.endpoint
    keys["region"] = settings.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    key_id, secret, token = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY"), env.get("AWS_SESSION_TOKEN")
    if not (key_id and secret):
        key_id, secret, token = _shared_file(settings, env)
    keys["access_key_id"], keys["secret_access_key"] = key_id, secret
    if token:
        keys["session_token"] = token
    return keys


def _shared_file(settings: StorageSettings, env: Mapping[str, str]) -> tuple[str, str, str | None]:
    home = env.get("HOME") or os.path.expanduser("~")
    path = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials")
    profile = env.get("AWS_PROFILE") or settings.profile or "default"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        raise StorageError(f"storage: {path} cannot be read as an AWS credentials file") from None
    if parser.has_section(profile):
        key_id = parser.get(profile, "aws_access_key_id", fallback="")
        secret = parser.get(profile, "aws_secret_access_key", fallback="")
        if key_id and secret:
            return key_id, secret, parser.get(profile, "aws_session_token", fallback=None)
    raise StorageError(
        "storage s3://: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give profile "
        f"{profile!r} in {path}"
    )


def _gs(settings: StorageSettings, env: Mapping[str, str], *, machine: bool) -> dict[str, str]:
    keys = {"type": "google cloud storage", "bucket_policy_only": "true"}
    if settings.gs_endpoint:
        keys["endpoint"] = settings.gs_endpoint
    if machine and settings.machine_credentials == "service-account":
        return {**keys, "env_auth": "true"}
    path = env.get("GOOGLE_APPLICATION_CREDENTIALS")
    if not path:
        raise StorageError("storage gs://: no credentials: set GOOGLE_APPLICATION_CREDENTIALS to a service account"
                           ' key, or machine_credentials = "service-account" in [storage] (GCP machines only)')
    try:
        with open(path, encoding="utf-8") as fh:
            key = json.load(fh)
    except (OSError, ValueError):
        raise StorageError(f"storage gs://: {path} (GOOGLE_APPLICATION_CREDENTIALS) cannot be read") from None
    if not isinstance(key, dict) or key.get("type") != "service_account":
        raise StorageError(f"storage gs://: {path} is not a service account key")
    return {**keys, "service_account_credentials": json.dumps(key, separators=(",", ":"))}


# --- this machine's own reads of storage --------------------------------------------------------


@contextlib.contextmanager
def local_conf(state_dir: str, schemes: Sequence[str], settings: StorageSettings | None,
               env: Mapping[str, str]) -> Iterator[str]:  # fmt: skip
    """A 0600 rclone.conf for eps's own runs, in the state directory, removed afterwards."""
    text = rclone_config(remotes(schemes, settings or StorageSettings(), env, machine=False))
    os.makedirs(state_dir, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=".rclone-", suffix=".conf", dir=state_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def rclone(conf: str, *args: str, timeout_s: float | None = None) -> subprocess.CompletedProcess[bytes]:
    """eps's own rclone (its config file, the wrapper's flags), output captured."""
    argv = ["rclone", "--config", conf, *RCLONE_FLAGS, "--user-agent", LOCAL_AGENT, *args]
    env = dict(os.environ)
    if bundle := env.pop("AWS_CA_BUNDLE", None):  # it breaks rclone's S3 client: given as its own flag
        argv[1:1] = ["--ca-cert", bundle]
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False, env=env)
    except FileNotFoundError:
        raise StorageError("rclone is not installed on this machine (apt install rclone)") from None
    except subprocess.TimeoutExpired:
        raise StorageError(f"rclone {args[0]} took longer than {timeout_s:g} s") from None


def size(conf: str, remote: str, timeout_s: float = 600) -> tuple[int, int]:
    """Bytes and objects under ``remote`` (``rclone size --json``)."""
    done = rclone(conf, "size", "--json", remote, timeout_s=timeout_s)
    if done.returncode != 0:
        raise StorageError(f"cannot size {remote}: {said(done.stderr)}")
    data = json.loads(done.stdout or b"{}")
    return int(data.get("bytes", 0)), int(data.get("count", 0))


def said(stderr: bytes | None) -> str:
    """rclone's last line of complaint."""
    lines = [ln.strip() for ln in (stderr or b"").decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "rclone failed"


#: How long listing one ``--input`` prefix may take when a dispatch is submitted.
INPUT_LIST_TIMEOUT_S = 120.0


def measure_inputs(state_dir: str, job: Job, settings: StorageSettings | None,
                   env: Mapping[str, str]) -> tuple[dict[str, Any], ...]:  # fmt: skip
    """Each ``--input`` of ``job`` listed (``rclone size``, eps's own credentials for its
    scheme), before anything happens: ``{url, dest, objects, bytes}`` each.  A prefix with
    nothing there, or one that cannot be listed, is bad input (:class:`JobError`)."""
    items = inputs_of(job.inputs)
    if not items:
        return ()
    out = []
    try:
        with local_conf(state_dir, sorted({i.source.scheme for i in items}), settings, env) as conf:
            for item in items:
                try:
                    nbytes, count = size(conf, item.source.remote(), timeout_s=INPUT_LIST_TIMEOUT_S)
                except StorageError as exc:
                    raise StorageError(f"--input {item.source}: {exc}") from None
                if count == 0:
                    raise StorageError(f"--input {item.source}: nothing there (no object under that prefix)")
                out.append({"url": str(item.source), "dest": item.dest, "objects": count, "bytes": nbytes})
    except StorageError as exc:
        raise JobError("storage", str(exc), job) from None
    return tuple(out)
