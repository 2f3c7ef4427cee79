"""The S3 server object storage is tested against: moto's server on loopback, behind a
logging reverse proxy.

- moto runs in a process of its own (``python -c LAUNCH``, werkzeug's threaded server on a
  port the kernel picks, told back on a pipe), so an upload of a GB does not share this
  process's GIL.  It is ended by :meth:`S3Server.stop` (the session fixture's teardown;
  ``atexit`` too), and by the kernel if this process dies first (``PR_SET_PDEATHSIG``).
- moto checks credentials: at start a user ``eps-test`` with an allow-all policy and one
  access key is made through moto's IAM API, then moto's auth is switched on
  (``/moto-api/reset-auth``).  So a wrong key or secret is refused as S3 refuses it
  (403 InvalidAccessKeyId / SignatureDoesNotMatch).  The key pair is made by moto, new each
  server: :attr:`S3Server.access_key` / :attr:`S3Server.secret_key`.
- The proxy (stdlib only, a thread here) is what eps and the job's machines talk to
  (:attr:`S3Server.endpoint`).  It forwards each request to moto, streaming bodies, and logs
  it (:class:`Request`): so a test can say which client (User-Agent) moved which bytes.
  It changes one thing in moto's answers: moto 5.2.5 answers CompleteMultipartUpload on an
  unversioned bucket with ``x-amz-version-id: null`` (S3 sends no version id there) and then
  refuses the ``HEAD ?versionId=null`` rclone makes with it (400, where S3 answers 200): so
  every multipart upload by rclone would fail its first attempt.  The proxy drops that header.
- The helpers (:meth:`S3Server.make_bucket`, ``put``, ``get``, ``keys``, ``digests``) use
  boto3 against moto **directly**, not through the proxy: the log holds only what eps and
  rclone did.

Registered for the whole suite by ``pytest_plugins`` in tests/conftest.py: fixtures ``s3``
(session) and ``bucket`` (a fresh bucket per test; the log cleared first).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import http.client
import http.server
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

REGION = "us-east-1"
CHUNK = 1 << 20
#: The query parameters a presigned URL carries its credentials in: logged as "-".
SECRET_QUERY = frozenset({"x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature", "awsaccesskeyid"})
#: Headers of one hop only: never forwarded (the proxy frames each side's body itself).
HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
                 "upgrade", "transfer-encoding", "content-length"})  # fmt: skip
START_TIMEOUT_S = 60.0

# The moto process.  argv[1]: the pid of the test process (it dies with it), argv[2]: the fd
# the port is written to.
LAUNCH = r"""
import ctypes, logging, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from werkzeug.serving import make_server
from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=True,
                     request_handler=MotoRequestHandler)
with os.fdopen(int(sys.argv[2]), "w") as fh:
    fh.write(f"{server.server_address[1]}\n")
server.serve_forever()
"""


def read_port(read: int, proc: subprocess.Popen[bytes], tail: Callable[[], str], name: str) -> int:
    """The port a server process writes on the pipe ``read`` once it listens."""
    deadline = time.monotonic() + START_TIMEOUT_S
    text = b""
    while not text.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([read], [], [], left)[0]:
            raise RuntimeError(f"{name} did not start in {START_TIMEOUT_S:.0f} s: {tail()}")
        piece = os.read(read, 64)
        if not piece:
            raise RuntimeError(f"{name} ended at start (exit {proc.wait()}): {tail()}")
        text += piece
    return int(text)


@dataclass(frozen=True)
class Request:
    """One request the proxy forwarded.  ``path`` is decoded and has no query (``/bucket/key``);
    ``query`` is its parameters, credential ones as ``"-"``; ``received`` the request body's bytes
    (from the client), ``sent`` the response body's bytes (to the client)."""

    method: str
    path: str
    query: dict[str, str]
    agent: str
    received: int
    sent: int
    status: int
    seconds: float

    @property
    def bucket(self) -> str:
        return self.path.lstrip("/").partition("/")[0]

    @property
    def key(self) -> str:
        return self.path.lstrip("/").partition("/")[2]


class _Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.records: list[Request] = []
        self.busy = 0
        self.cond = threading.Condition()
        self.clients: set[socket.socket] = set()

    def begin(self) -> None:
        with self.cond:
            self.busy += 1

    def end(self, record: Request | None) -> None:
        with self.cond:
            if record is not None:
                self.records.append(record)
            self.busy -= 1
            self.cond.notify_all()

    def taken(self) -> list[Request]:
        """The records, once no request is in flight (or after 2 s)."""
        with self.cond:
            self.cond.wait_for(lambda: self.busy == 0, timeout=2)
            return list(self.records)

    def close_all(self, thread: threading.Thread | None) -> None:
        """Stop serving, cut every client's connection, wait for the serving thread."""
        self.shutdown()
        with self.cond:
            clients = list(self.clients)
        for sock in clients:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.server_close()
        if thread is not None:
            thread.join(10)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def setup(self) -> None:
        super().setup()
        with self.server.cond:
            self.server.clients.add(self.connection)

    def finish(self) -> None:
        with self.server.cond:
            self.server.clients.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.begin()
        record = None
        try:
            record = self._forward()
        finally:
            self.server.end(record)

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _forward(self) -> Request:
        started = time.monotonic()
        url = urlsplit(self.path)
        query = {k: "-" if k.lower() in SECRET_QUERY else v for k, v in parse_qsl(url.query, keep_blank_values=True)}
        received = sent = 0
        status = 502
        self._replied = False
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream, timeout=600)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP:
                    upstream.putheader(name, value)
            upstream.putheader("Connection", "close")
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            length = int(self.headers.get("Content-Length") or 0)
            if chunked:
                upstream.putheader("Transfer-Encoding", "chunked")
            elif length or self.command in ("PUT", "POST"):
                upstream.putheader("Content-Length", str(length))
            upstream.endheaders()
            if chunked:
                received = self._relay_chunked(upstream)
            else:
                while received < length:
                    piece = self.rfile.read(min(CHUNK, length - received))
                    if not piece:
                        raise ConnectionError("the client's body ended early")
                    upstream.send(piece)
                    received += len(piece)
            response = upstream.getresponse()
            status = response.status
            sent = self._relay_response(response)
        except (OSError, http.client.HTTPException):
            self.close_connection = True
            if not self._replied:
                with contextlib.suppress(OSError):
                    self.send_error(502)
        finally:
            upstream.close()
        agent = self.headers.get("User-Agent", "")
        return Request(self.command, unquote(url.path), query, agent, received, sent, status,
                       time.monotonic() - started)  # fmt: skip

    def _relay_chunked(self, upstream: http.client.HTTPConnection) -> int:
        total = 0
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                upstream.send(b"0\r\n\r\n")
                return total
            upstream.send(b"%x\r\n" % size + self.rfile.read(size) + b"\r\n")
            self.rfile.readline()
            total += size

    def _rewrite(self, status: int, reason: str,
                 headers: list[tuple[str, str]]) -> tuple[int, str, list[tuple[str, str]]]:  # fmt: skip
        """What the proxy changes in the server's answer: moto's ``x-amz-version-id: null``."""
        return status, reason, [(k, v) for k, v in headers if (k.lower(), v) != ("x-amz-version-id", "null")]

    def _relay_response(self, response: http.client.HTTPResponse) -> int:
        status, reason, headers = self._rewrite(response.status, response.reason, response.getheaders())
        self.send_response_only(status, reason)
        self._replied = True
        for name, value in headers:
            if name.lower() not in HOP:
                self.send_header(name, value)
        length = response.getheader("Content-Length")
        bodiless = self.command == "HEAD" or response.status in (204, 304) or response.status < 200
        if bodiless:
            if length is not None:
                self.send_header("Content-Length", length)
            self.end_headers()
            return 0
        if length is not None:
            self.send_header("Content-Length", length)
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        while piece := response.read(CHUNK):
            self.wfile.write(piece if length is not None else b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
        if length is None:
            self.wfile.write(b"0\r\n\r\n")
        return sent


class ServerProcess:
    """A server in a process of its own (``python -c LAUNCH PID FD``: it dies with this process,
    PR_SET_PDEATHSIG, and tells its port on the pipe FD), behind a proxy served by a thread of
    this process.  :meth:`stop` ends both (``atexit`` too) and waits until the process is gone."""

    name = "server"

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._proxy: _Proxy | None = None
        self._thread: threading.Thread | None = None
        self._out = tempfile.TemporaryFile()  # noqa: SIM115 (the server's output; closed by stop())
        atexit.register(self.stop)

    def _spawn(self, launch: str, env: dict[str, str]) -> int:
        """Start the server's process; its port."""
        read, write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", launch, str(os.getpid()), str(write)], pass_fds=(write,),
                stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._out, env={**env, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
            os.close(write)
            write = -1
            return read_port(read, self._proc, self._tail, self.name)
        finally:
            os.close(read)
            if write >= 0:
                os.close(write)

    def _serve(self, proxy: _Proxy) -> str:
        """Serve ``proxy`` on a thread; its URL."""
        self._proxy = proxy
        self._thread = threading.Thread(target=proxy.serve_forever, name=f"{self.name}-proxy", daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{proxy.server_address[1]}"

    def _tail(self) -> str:
        self._out.seek(0)
        return self._out.read().decode(errors="replace")[-2000:]

    def stop(self) -> None:
        """End the proxy and the server; waits until its process is gone.  Idempotent."""
        atexit.unregister(self.stop)
        if self._proxy is not None:
            self._proxy.close_all(self._thread)
            self._proxy = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc = None
        self._out.close()

    @property
    def pid(self) -> int | None:
        """The server's process (None once stopped)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def log(self) -> list[Request]:
        """The requests the proxy forwarded and answered, oldest first (a copy).  Taken once no
        request is in flight (a client that has its answer may exit a moment before the proxy
        logs it), or after 2 s (a long transfer still going is not in it)."""
        assert self._proxy is not None, "stopped"
        return self._proxy.taken()

    def clear_log(self) -> None:
        assert self._proxy is not None, "stopped"
        with self._proxy.cond:
            self._proxy.records.clear()


Served = TypeVar("Served", bound=ServerProcess)


def serve_session(server: Served) -> Iterator[Served]:
    """A session fixture's body: ``server``, then its process gone when the session ends."""
    try:
        yield server
    finally:
        pid = server.pid
        server.stop()
        if pid is not None:
            assert not os.path.exists(f"/proc/{pid}") or _zombie(pid), f"{server.name}'s process {pid} outlived it"


class S3Server(ServerProcess):
    """moto's S3 on loopback, behind the logging proxy.  Started by the constructor."""

    region = REGION
    name = "moto"

    def __init__(self) -> None:
        super().__init__()
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
            self.moto_port = self._spawn(LAUNCH, env)
            self.moto_url = f"http://127.0.0.1:{self.moto_port}"
            self._start_auth()
            self.endpoint = self._serve(_Proxy(self.moto_port))
        except BaseException:
            self.stop()
            raise

    def _start_auth(self) -> None:
        """An IAM user with an allow-all policy and an access key; then moto's auth on."""
        iam = self._client("iam", "bootstrap", "bootstrap")
        iam.create_user(UserName="eps-test")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="eps-test", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="eps-test")["AccessKey"]
        self.access_key: str = key["AccessKeyId"]
        self.secret_key: str = key["SecretAccessKey"]
        conn = http.client.HTTPConnection("127.0.0.1", self.moto_port, timeout=30)
        try:
            conn.request("POST", "/moto-api/reset-auth", body=b"0")
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"moto's reset-auth answered {answer.status}")
        finally:
            conn.close()
        self._s3 = self._client("s3", self.access_key, self.secret_key)

    def _client(self, service: str, key: str, secret: str) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(s3={"addressing_style": "path"}, user_agent_extra="eps-tests-helper",
                        retries={"max_attempts": 2}, max_pool_connections=4)  # fmt: skip
        return boto3.session.Session().client(
            service, endpoint_url=self.moto_url, region_name=REGION,
            aws_access_key_id=key, aws_secret_access_key=secret, config=config,
        )  # fmt: skip

    # -- for clients ---------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The credentials for a subprocess (AWS_ACCESS_KEY_ID ...); no endpoint in it."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_DEFAULT_REGION": REGION}  # fmt: skip

    def rclone_conf(self, remote: str = "s3", **overrides: str) -> str:
        """rclone.conf text with one section ``[remote]`` that works against the proxy;
        ``overrides`` replace or add keys (e.g. ``secret_access_key="wrong"``)."""
        keys = {"type": "s3", "provider": "Other", "endpoint": self.endpoint, "access_key_id": self.access_key,
                "secret_access_key": self.secret_key, "region": REGION, **overrides}  # fmt: skip
        return f"[{remote}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())

    # -- helpers (boto3 straight to moto: never in the log) -------------------------------

    def make_bucket(self, name: str) -> str:
        self._s3.create_bucket(Bucket=name)
        return name

    def drop_bucket(self, name: str) -> None:
        """Delete a bucket and everything in it (frees moto's memory and temp files)."""
        for page in self._s3.get_paginator("list_object_versions").paginate(Bucket=name):
            for item in page.get("Versions", []) + page.get("DeleteMarkers", []):
                self._s3.delete_object(Bucket=name, Key=item["Key"], VersionId=item["VersionId"])
        for page in self._s3.get_paginator("list_multipart_uploads").paginate(Bucket=name):
            for upload in page.get("Uploads", []):
                self._s3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
        self._s3.delete_bucket(Bucket=name)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self._s3.put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, bucket: str, key: str) -> bytes:
        body: bytes = self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (a plain string prefix), sorted."""
        found = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found += [item["Key"] for item in page.get("Contents", [])]
        return sorted(found)

    def digests(self, bucket: str, prefix: str) -> dict[str, str]:
        """sha256 (hex) of each object under the "directory" ``prefix``, by its key relative to
        it.  Streamed: fine for objects of GBs."""
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        found = {}
        for key in self.keys(bucket, base):
            digest = hashlib.sha256()
            for piece in self._s3.get_object(Bucket=bucket, Key=key)["Body"].iter_chunks(CHUNK):
                digest.update(piece)
            found[key[len(base) :]] = digest.hexdigest()
        return found


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while piece := fh.read(CHUNK):
            digest.update(piece)
    return digest.hexdigest()


def sha256_tree(root: str | os.PathLike[str]) -> dict[str, str]:
    """sha256 of each regular file under ``root`` (symlinks left out), by its relative path."""
    found = {}
    for here, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(here, name)
            if not os.path.islink(path):
                found[os.path.relpath(path, root)] = sha256_file(path)
    return found


_buckets = iter(range(1, 1 << 30))


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """moto's S3 on loopback behind the logging proxy, for the whole session; its process is
    gone when the session ends."""
    yield from serve_session(S3Server())


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@pytest.fixture
def bucket(s3: S3Server) -> Iterator[str]:
    """A fresh bucket (``eps-test-N-xxxxxxxx``) for this test; the proxy's log cleared first.
    Deleted with what it holds after the test."""
    name = s3.make_bucket(f"eps-test-{next(_buckets)}-{uuid.uuid4().hex[:8]}")
    s3.clear_log()
    yield name
    with contextlib.suppress(Exception):
        s3.drop_bucket(name)
