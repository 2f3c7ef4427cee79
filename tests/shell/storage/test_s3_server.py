"""What eps relies on from rclone 1.60 (Debian's) against an S3 server: moto's on loopback,
behind the logging proxy of tests/storage_support.py.  Each test runs rclone as the job's
machine does: ``rclone --config FILE`` (FILE mode 0600, from ``S3Server.rclone_conf()``; no
key in any argv) with eps's own flags (``eps.core.storage.RCLONE_FLAGS``).

rclone's exit codes seen here: 0 done; 1 not otherwise classified (403 SignatureDoesNotMatch /
InvalidAccessKeyId, 404 NoSuchBucket on upload, AWS_CA_BUNDLE set, a name moto cannot route);
3 directory not found (a bucket that does not exist, read); 6 a source file being updated
(without --local-no-check-updated); 9 nothing transferred (--error-on-no-transfer).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_support import S3Server, sha256_file, sha256_tree

from eps.core.storage import RCLONE_FLAGS

#: The environment of a job's machine, minus what would change rclone here: AWS_* (this
#: machine sets AWS_CA_BUNDLE, which rclone 1.60 cannot use: see test_aws_ca_bundle_breaks_rclone),
#: RCLONE_* (config by environment) and proxies.
PROXIES = ("http_proxy", "https_proxy", "all_proxy")
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RCLONE_")) and k.lower() not in PROXIES}
Rclone = Callable[..., subprocess.CompletedProcess[str]]


def write_conf(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


@pytest.fixture
def rclone(s3: S3Server, tmp_path: Path) -> Rclone:
    """``rclone(*args, conf=None, flags=RCLONE_FLAGS, env=None, **conf_overrides)``: rclone run
    with a 0600 config of ``s3.rclone_conf(**conf_overrides)`` (or the text ``conf``)."""
    count = iter(range(1000))

    def run(*args: str, conf: str | None = None, flags: tuple[str, ...] = RCLONE_FLAGS,
            env: dict[str, str] | None = None, **overrides: str) -> subprocess.CompletedProcess[str]:  # fmt: skip
        path = write_conf(tmp_path / f"rclone{next(count)}.conf", conf or s3.rclone_conf(**overrides))
        return subprocess.run(["rclone", "--config", str(path), *flags, *args], env=env or ENV,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip

    return run


def make_tree(root: Path) -> None:
    """Nested dirs, odd names (space, unicode, a leading dash), an empty file, and links (to a
    file, to a directory, dangling)."""
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "deep.txt").write_text("deep\n")
    (root / "a" / "top.bin").write_bytes(os.urandom(70_000))
    (root / "sp ace ünï €.txt").write_text("odd\n")
    (root / "-leading-dash.txt").write_text("dash\n")
    (root / "empty").write_bytes(b"")
    os.symlink("/etc/hostname", root / "link-to-file")
    os.symlink("a", root / "link-to-dir")
    os.symlink("nowhere", root / "dangling")


TREE = {"a/b/c/deep.txt", "a/top.bin", "sp ace ünï €.txt", "-leading-dash.txt", "empty"}


def test_rclone_conf(s3: S3Server, bucket: str, rclone: Rclone) -> None:
    """The section that works: type, provider = Other (path-style addressing is its default:
    force_path_style need not be said), endpoint, the key pair, region.  Nothing else is needed;
    rclone would sign for us-east-1 without region too."""
    assert s3.rclone_conf() == (
        "[s3]\ntype = s3\nprovider = Other\n"
        f"endpoint = {s3.endpoint}\naccess_key_id = {s3.access_key}\nsecret_access_key = {s3.secret_key}\n"
        "region = us-east-1\n"
    )
    s3.put(bucket, "k", b"v")
    out = rclone("lsf", f"s3:{bucket}")
    assert (out.returncode, out.stdout, out.stderr) == (0, "k\n", "")
    no_region = s3.rclone_conf().replace("region = us-east-1\n", "")
    assert rclone("lsf", f"s3:{bucket}", conf=no_region).stdout == "k\n"
    assert {r.bucket for r in s3.log} == {bucket}


def test_copy_tree_and_back(s3: S3Server, bucket: str, rclone: Rclone, tmp_path: Path) -> None:
    """``rclone copy DIR s3:bucket/prefix``: every regular file, by its relative path, byte for
    byte; the links are left out, silently with --skip-links (without it: a NOTICE each, exit 0
    still).  ``rclone copy s3:bucket/prefix DIR`` brings the same tree back."""
    make_tree(tmp_path / "out")
    up = rclone("copy", str(tmp_path / "out"), f"s3:{bucket}/run/0/out")
    assert (up.returncode, up.stderr) == (0, "")
    local = sha256_tree(tmp_path / "out")
    assert set(local) == TREE
    assert s3.digests(bucket, "run/0/out") == local
    puts = [r for r in s3.log if r.method == "PUT" and r.key]
    assert sorted(r.key for r in puts) == sorted(f"run/0/out/{k}" for k in TREE)
    assert sum(r.received for r in puts) == sum(os.path.getsize(tmp_path / "out" / k) for k in TREE)

    loud = rclone("copy", str(tmp_path / "out"), f"s3:{bucket}/loud",
                  flags=tuple(f for f in RCLONE_FLAGS if f != "--skip-links"))  # fmt: skip
    assert loud.returncode == 0
    for name in ("link-to-file", "link-to-dir", "dangling"):
        assert f"NOTICE: {name}: Can't follow symlink without -L/--copy-links" in loud.stderr
    assert s3.keys(bucket, "loud/") == sorted(f"loud/{k}" for k in TREE)

    down = rclone("copy", f"s3:{bucket}/run/0/out", str(tmp_path / "back"))
    assert (down.returncode, down.stderr) == (0, "")
    assert sha256_tree(tmp_path / "back") == local
    assert (tmp_path / "back" / "empty").stat().st_size == 0


def test_newline_in_a_name(s3: S3Server, bucket: str, rclone: Rclone, tmp_path: Path) -> None:
    """A newline in a file name: with rclone's default S3 encoding the key holds the newline,
    and moto cannot route it (werkzeug's ``.+`` stops at it: a 404 HTML page, which rclone
    reports as "XML syntax error"; S3 itself takes such a key).  That file fails, the rest go:
    exit 1.  With ``encoding = Slash,InvalidUtf8,Dot,Ctl`` control characters are stored as
    their Unicode pictures (U+240A) and come back as themselves."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "new\nline.txt").write_text("nl\n")
    (tmp_path / "out" / "tab\there.txt").write_text("tab\n")
    plain = rclone("copy", str(tmp_path / "out"), f"s3:{bucket}/plain")
    assert plain.returncode == 1
    assert "new␊line.txt: Failed to copy: XML syntax error" in plain.stderr
    assert s3.keys(bucket, "plain/") == ["plain/tab\there.txt"]

    ctl = {"encoding": "Slash,InvalidUtf8,Dot,Ctl"}
    up = rclone("copy", str(tmp_path / "out"), f"s3:{bucket}/ctl", **ctl)
    assert (up.returncode, up.stderr) == (0, "")
    assert s3.keys(bucket, "ctl/") == ["ctl/new␊line.txt", "ctl/tab␉here.txt"]
    down = rclone("copy", f"s3:{bucket}/ctl", str(tmp_path / "back"), **ctl)
    assert down.returncode == 0
    assert sorted(os.listdir(tmp_path / "back")) == ["new\nline.txt", "tab\there.txt"]


def test_multipart_round_trip(s3: S3Server, bucket: str, rclone: Rclone, tmp_path: Path) -> None:
    """A file over rclone's upload_cutoff (200 MiB) goes up in parts (5 MiB each, 4 at a time)
    and comes back byte for byte."""
    size = 210 << 20
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        for _ in range(size >> 20):
            fh.write(os.urandom(1 << 20))
    want = sha256_file(big)
    up = rclone("copyto", str(big), f"s3:{bucket}/run/0/out/big.bin")
    assert (up.returncode, up.stderr) == (0, "")
    parts = [r for r in s3.log if r.method == "PUT" and "partNumber" in r.query]
    assert len(parts) == 42
    assert sum(r.received for r in parts) == size
    assert any(r.method == "POST" and "uploads" in r.query for r in s3.log)
    assert s3.digests(bucket, "run/0/out") == {"big.bin": want}

    s3.clear_log()
    down = rclone("copyto", f"s3:{bucket}/run/0/out/big.bin", str(tmp_path / "back.bin"))
    assert (down.returncode, down.stderr) == (0, "")
    assert sha256_file(tmp_path / "back.bin") == want
    assert sum(r.sent for r in s3.log if r.method == "GET") == size


def test_copyto_a_file_being_written(s3: S3Server, bucket: str, rclone: Rclone, tmp_path: Path) -> None:
    """``copyto job.log`` while the job still appends to it: with --local-no-check-updated the
    upload is a prefix of the file (what was there when rclone looked), exit 0; without it,
    rclone refuses ("source file is being updated") on every attempt: exit 6."""
    log = tmp_path / "job.log"
    log.write_bytes(b"started\n" * (1 << 20))  # 8 MiB
    start = log.stat().st_size
    for flags, key in ((RCLONE_FLAGS, "a/job.log"),
                       (tuple(f for f in RCLONE_FLAGS if f != "--local-no-check-updated"), "b/job.log")):  # fmt: skip
        done = threading.Event()

        def append(done: threading.Event = done) -> None:
            with open(log, "ab") as fh:
                n = 0
                while not done.wait(0.0005):  # a job writing its log, a line at a time
                    fh.write(b"line %d\n" % n)
                    fh.flush()
                    n += 1

        writer = threading.Thread(target=append)
        writer.start()
        try:
            out = rclone("copyto", str(log), f"s3:{bucket}/{key}", flags=flags)
        finally:
            done.set()
            writer.join()
        if key == "a/job.log":
            assert (out.returncode, out.stderr) == (0, "")
            got = s3.get(bucket, key)
            assert len(got) >= start
            assert log.read_bytes().startswith(got)
        else:
            assert out.returncode == 6
            assert "can't copy - source file is being updated (size changed from" in out.stderr
            assert s3.keys(bucket, "b/") == []


def test_size_lsjson_cat(s3: S3Server, bucket: str, rclone: Rclone) -> None:
    """What ``size --json``, ``lsjson -R``, ``cat`` and ``lsjson --stat --files-only`` print, for
    a prefix that holds objects and for one that does not (S3 has no directories: a missing
    prefix is an empty one, exit 0; only a missing bucket is "directory not found", exit 3)."""
    s3.put(bucket, "p/0/out/a.txt", b"hello")
    s3.put(bucket, "p/0/out/d/b.bin", b"\x00" * 1000)
    s3.put(bucket, "p/0/job.log", b"log line\n")

    size = rclone("size", "--json", f"s3:{bucket}/p")
    assert (size.returncode, json.loads(size.stdout)) == (0, {"count": 3, "bytes": 1014, "sizeless": 0})

    ls = rclone("lsjson", "-R", f"s3:{bucket}/p/0")
    assert ls.returncode == 0
    entries = {e["Path"]: e for e in json.loads(ls.stdout)}
    assert set(entries) == {"out", "out/d", "out/a.txt", "out/d/b.bin", "job.log"}
    assert entries["out/d/b.bin"]["Size"] == 1000 and entries["out/d/b.bin"]["IsDir"] is False
    assert entries["out/d/b.bin"]["Name"] == "b.bin" and entries["out/d/b.bin"]["Tier"] == "STANDARD"
    assert set(entries["out/a.txt"]) == {"Path", "Name", "Size", "MimeType", "ModTime", "IsDir", "Tier"}
    assert entries["out/d"]["IsDir"] is True and entries["out/d"]["Size"] == -1  # directories: size -1

    cat = rclone("cat", f"s3:{bucket}/p/0/job.log")
    assert (cat.returncode, cat.stdout) == (0, "log line\n")

    stat = rclone("lsjson", "--stat", "--files-only", f"s3:{bucket}/p/0/job.log")
    assert (stat.returncode, json.loads(stat.stdout)["Size"]) == (0, 9)

    # nothing there: no error from any of them
    assert json.loads(rclone("size", "--json", f"s3:{bucket}/nothing").stdout) == {"count": 0, "bytes": 0,
                                                                                  "sizeless": 0}  # fmt: skip
    assert rclone("lsjson", "-R", f"s3:{bucket}/nothing").stdout == "[\n]\n"
    missing = rclone("cat", f"s3:{bucket}/p/0/nothing.log")
    assert (missing.returncode, missing.stdout, missing.stderr) == (0, "", "")  # cat cannot tell
    gone = rclone("lsjson", "--stat", "--files-only", f"s3:{bucket}/p/0/nothing.log")
    assert (gone.returncode, gone.stdout) == (0, "null\n")  # ... this can
    nob = rclone("lsjson", "-R", "s3:eps-no-such-bucket/p")
    assert nob.returncode == 3
    assert "directory not found" in nob.stderr


def test_download_failures(s3: S3Server, bucket: str, rclone: Rclone, tmp_path: Path) -> None:
    """``rclone copy s3:... DIR`` (an --input): one object lands as DIR/NAME; a missing object
    (copyto) or prefix is no error (exit 0, DIR not even made; exit 9 with
    --error-on-no-transfer); a missing bucket is exit 3; a wrong secret or key id exit 1 with
    S3's 403 code in the message.  rclone makes each of its --retries 3 attempts."""
    s3.put(bucket, "in/x", b"x")
    one = rclone("copy", f"s3:{bucket}/in/x", str(tmp_path / "d0"))  # one object: DIR/x, not DIR
    assert (one.returncode, os.listdir(tmp_path / "d0")) == (0, ["x"])
    nothing = rclone("copyto", f"s3:{bucket}/in/nothing", str(tmp_path / "f0"))  # no such object: no error
    assert (nothing.returncode, nothing.stderr, (tmp_path / "f0").exists()) == (0, "", False)
    empty = rclone("copy", f"s3:{bucket}/nothing", str(tmp_path / "d1"))
    assert (empty.returncode, empty.stderr) == (0, "")
    assert not (tmp_path / "d1").exists()
    strict = rclone("copy", f"s3:{bucket}/nothing", str(tmp_path / "d1"), "--error-on-no-transfer")
    assert strict.returncode == 9

    nob = rclone("copy", "s3:eps-no-such-bucket/in", str(tmp_path / "d2"))
    assert nob.returncode == 3
    assert "error reading source root directory: directory not found" in nob.stderr
    assert nob.stderr.count("Attempt ") == 3

    secret = rclone("copy", f"s3:{bucket}/in", str(tmp_path / "d3"), secret_access_key="wrong" + s3.secret_key[5:])
    assert secret.returncode == 1
    assert "SignatureDoesNotMatch: The request signature we calculated does not match" in secret.stderr
    assert "status code: 403" in secret.stderr

    key = rclone("copy", f"s3:{bucket}/in", str(tmp_path / "d4"), access_key_id="AKIAEPSTESTNOSUCHKEY")
    assert key.returncode == 1
    assert "InvalidAccessKeyId: The AWS Access Key Id you provided does not exist in our records." in key.stderr
    assert "status code: 403" in key.stderr
    assert s3.secret_key not in secret.stderr + key.stderr
    assert not any((tmp_path / d).exists() for d in ("d2", "d3", "d4"))


def test_upload_to_a_missing_bucket(s3: S3Server, bucket: str, rclone: Rclone, tmp_path: Path) -> None:
    """Uploading into a bucket that does not exist: rclone makes it (a PUT /bucket before the
    first object; also sent for an existing bucket, which S3 us-east-1 and moto answer 200).
    With ``no_check_bucket = true`` it does not: exit 1, "NoSuchBucket ... status code: 404"."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "f").write_text("f\n")
    made = f"{bucket}-made"
    try:
        up = rclone("copy", str(tmp_path / "out"), f"s3:{made}/x")
        assert (up.returncode, up.stderr) == (0, "")
        assert s3.keys(made) == ["x/f"]
        assert any(r.method == "PUT" and r.path == f"/{made}" for r in s3.log)
    finally:
        s3.drop_bucket(made)
    s3.clear_log()
    refused = rclone("copy", str(tmp_path / "out"), f"s3:{bucket}-none/x", no_check_bucket="true")
    assert refused.returncode == 1
    assert "NoSuchBucket: The specified bucket does not exist" in refused.stderr
    assert "status code: 404" in refused.stderr
    assert not any(r.method == "PUT" and r.path == f"/{bucket}-none" for r in s3.log)
    ok = rclone("copyto", str(tmp_path / "out" / "f"), f"s3:{bucket}/y", no_check_bucket="true")
    assert ok.returncode == 0
    assert not any(r.method == "PUT" and r.path == f"/{bucket}" for r in s3.log)


def test_aws_ca_bundle_breaks_rclone(s3: S3Server, bucket: str, rclone: Rclone, tmp_path: Path) -> None:
    """rclone 1.60's S3 backend cannot take AWS_CA_BUNDLE: with it in the environment every
    command fails before any request, exit 1, whether the file is a good PEM bundle (the AWS
    SDK cannot put it in rclone's own HTTP transport) or not.  A job's machine that sets it
    (this one does) must not pass it to rclone."""
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    bundles = {empty: "LoadCustomCABundleError: failed to load custom CA bundle PEM file"}
    good = next((p for p in (os.environ.get("AWS_CA_BUNDLE"), "/etc/ssl/certs/ca-certificates.crt")
                 if p and os.path.isfile(p)), None)  # fmt: skip
    if good:
        bundles[Path(good)] = "LoadCustomCABundleError: unable to load custom CA bundle, HTTPClient's transport"
    for path, message in bundles.items():
        out = rclone("lsf", f"s3:{bucket}", env={**ENV, "AWS_CA_BUNDLE": str(path)})
        assert out.returncode == 1
        assert message in out.stderr
    assert s3.log == []


def test_user_agent_in_the_log(s3: S3Server, bucket: str, rclone: Rclone, tmp_path: Path) -> None:
    """Every request rclone makes carries its User-Agent: ``rclone/`` (Debian's build leaves the
    version out), or exactly what ``--user-agent`` says; the helpers' boto3 never reaches the
    proxy.  So the log says who moved which bytes."""
    (tmp_path / "f").write_bytes(b"z" * 12345)
    assert rclone("copyto", str(tmp_path / "f"), f"s3:{bucket}/plain").returncode == 0
    assert {r.agent for r in s3.log} == {"rclone/"}
    s3.clear_log()
    assert rclone("copyto", str(tmp_path / "f"), f"s3:{bucket}/job", "--user-agent", "eps-job/t1").returncode == 0
    assert rclone("copyto", f"s3:{bucket}/job", str(tmp_path / "g"), "--user-agent", "eps-in/t1").returncode == 0
    assert s3.get(bucket, "job") == b"z" * 12345
    log = s3.log
    assert {r.agent for r in log} == {"eps-job/t1", "eps-in/t1"}
    assert sum(r.received for r in log if r.agent == "eps-job/t1") == 12345
    assert sum(r.sent for r in log if r.agent == "eps-in/t1" and r.method == "GET") == 12345
    assert sum(r.received for r in log if r.agent == "eps-in/t1") == 0


def test_server_stops_cleanly() -> None:
    """An S3Server's stop() leaves nothing: moto's process is gone, the proxy's port refuses."""
    import socket

    server = S3Server()
    pid, port = server.pid, int(server.endpoint.rsplit(":", 1)[1])
    assert pid is not None and os.path.exists(f"/proc/{pid}")
    server.stop()
    assert not os.path.exists(f"/proc/{pid}")
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    server.stop()  # again: nothing to do
