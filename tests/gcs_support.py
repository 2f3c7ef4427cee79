"""The GCS server ``gs://`` storage is tested against: gcp-storage-emulator (PyPI; it speaks
the GCS JSON API: buckets, objects, media/multipart/resumable uploads, downloads) on
loopback, behind the logging proxy of tests/storage_support.py, which also plays Google's
OAuth token server for service account keys.

- The emulator runs in a process of its own (in memory, a port the kernel picks, told back
  on a pipe), ended by :meth:`GcsServer.stop` (the session fixture's teardown; ``atexit``
  too), and by the kernel if this process dies first (``PR_SET_PDEATHSIG``).
- The emulator checks no credentials at all; GCS does.  So the proxy does what GCS and
  Google's token server do with a service account key, and refuses what they refuse:
  - the server makes an RSA key pair at start and hands out a service account key
    (:meth:`GcsServer.key`) whose ``token_uri`` is the proxy's ``/token``;
  - ``POST /token`` takes the JWT bearer grant (RFC 7523) a client signs with that key:
    the signature (RS256, checked with the public key), ``iss`` (the key's
    ``client_email``), ``aud`` (the ``token_uri``), ``exp`` and a devstorage ``scope`` are
    checked; a bad one is ``400 invalid_grant``, as Google answers; a good one gets an
    access token (``ya29.``..., an hour);
  - every other request needs ``Authorization: Bearer`` with a token it issued, else
    ``401`` with GCS's error document; only then is it forwarded to the emulator.
- rclone's ``google cloud storage`` backend is pointed at it with ``endpoint`` (the JSON
  API base, :attr:`GcsServer.endpoint`); its downloads follow the objects' ``mediaLink``,
  which the emulator builds from the request's Host, so they go through the proxy too.
- What the emulator does not do as GCS does, none of which rclone needs here: a listing is
  one page whatever ``maxResults`` (GCS pages at 1000; rclone follows ``nextPageToken``
  when there is one); ACLs and IAM are stubs.
- The helpers (:meth:`GcsServer.make_bucket`, ``get``, ``keys``, ``digests``) talk to the
  emulator **directly**, not through the proxy: the log holds only what eps and rclone did.

Registered for the whole suite by ``pytest_plugins`` in tests/conftest.py: fixtures ``gcs``
(session) and ``gcs_bucket`` (a fresh bucket per test; the log cleared first).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import os
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, quote

import pytest
from storage_support import Request, ServerProcess, _Handler, _Proxy, serve_session

TOKEN_PATH = "/token"  # noqa: S105 (a path, not a password)
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
EMAIL = "eps-test@eps-test-project.iam.gserviceaccount.com"

# The emulator's process.  argv[1]: the pid of the test process (it dies with it), argv[2]: the
# fd the port is written to.
LAUNCH = r"""
import ctypes, logging, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
logging.getLogger().setLevel(logging.CRITICAL)
from gcp_storage_emulator.server import create_server
server = create_server("127.0.0.1", 0, in_memory=True)
server.start()
with os.fdopen(int(sys.argv[2]), "w") as fh:
    fh.write(f"{server._api._httpd.server_address[1]}\n")
signal.pause()
"""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class _GcsProxy(_Proxy):
    def __init__(self, upstream: int, public_key: Any) -> None:
        super().__init__(upstream)
        self.RequestHandlerClass = _GcsHandler
        self.public_key = public_key
        self.tokens: set[str] = set()

    @property
    def token_uri(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{TOKEN_PATH}"


class _GcsHandler(_Handler):
    server: _GcsProxy

    def _forward(self) -> Request:
        started = time.monotonic()
        path = self.path.partition("?")[0]
        if path == TOKEN_PATH and self.command == "POST":
            status, sent = self._token()
        elif self.headers.get("Authorization", "").removeprefix("Bearer ") in self.server.tokens:
            return super()._forward()
        else:
            why = {"reason": "authError", "message": "Invalid Credentials", "domain": "global"}
            error = {"code": 401, "message": "Invalid Credentials", "errors": [why]}
            self.close_connection = True  # its body (if any) is not read
            status, sent = 401, self._answer(401, {"error": error}, {"WWW-Authenticate": 'Bearer realm="eps-test"'})
        agent = self.headers.get("User-Agent", "")
        return Request(self.command, path, {}, agent, 0, sent, status, time.monotonic() - started)

    def _rewrite(self, status: int, reason: str,
                 headers: list[tuple[str, str]]) -> tuple[int, str, list[tuple[str, str]]]:  # fmt: skip
        """GCS's answer to a client that asks for no 308 (``X-GUploader-No-308: yes``, which Go's
        client sends with each chunk of a resumable upload and then refuses a 308): ``200`` with
        ``X-HTTP-Status-Code-Override: 308``.  The emulator knows no such header."""
        if status == 308 and self.headers.get("X-GUploader-No-308", "").lower() == "yes":
            return 200, "OK", [*headers, ("X-HTTP-Status-Code-Override", "308")]
        return status, reason, headers

    def _answer(self, status: int, doc: dict[str, Any], headers: dict[str, str] | None = None) -> int:
        body = json.dumps(doc).encode()
        self.send_response_only(status)
        for name, value in {"Content-Type": "application/json; charset=UTF-8", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return len(body)

    def _token(self) -> tuple[int, int]:
        """Google's token server for the JWT bearer grant of a service account key."""
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
        why = self._refused(form.get("grant_type", [""])[0], form.get("assertion", [""])[0])
        if why:
            return 400, self._answer(400, {"error": "invalid_grant", "error_description": why})
        token = "ya29." + secrets.token_urlsafe(32)
        with self.server.cond:
            self.server.tokens.add(token)
        return 200, self._answer(200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"})

    def _refused(self, grant: str, assertion: str) -> str | None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        if grant != JWT_GRANT:
            return "Invalid grant_type"
        try:
            head, body, signature = assertion.split(".")
            header, claims = json.loads(_unb64(head)), json.loads(_unb64(body))
            if header.get("alg") != "RS256":
                return "Invalid JWT: alg"
            self.server.public_key.verify(_unb64(signature), f"{head}.{body}".encode(), padding.PKCS1v15(),
                                          hashes.SHA256())  # fmt: skip
        except InvalidSignature:
            return "Invalid JWT Signature."
        except ValueError:
            return "Invalid JWT"
        if claims.get("iss") != EMAIL:
            return "Invalid JWT: iss"
        if claims.get("aud") != self.server.token_uri:
            return "Invalid JWT: aud"
        if not isinstance(claims.get("exp"), int) or claims["exp"] < time.time():
            return "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe."
        if "https://www.googleapis.com/auth/devstorage" not in str(claims.get("scope", "")):
            return "Invalid JWT: no storage scope"
        return None


class GcsServer(ServerProcess):
    """gcp-storage-emulator on loopback, behind the logging, credential-checking proxy.
    Started by the constructor."""

    name = "gcp-storage-emulator"

    def __init__(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        super().__init__()
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_key_pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()).decode()  # fmt: skip
        try:
            self.port = self._spawn(LAUNCH, dict(os.environ))
            self._gcs = _GcsProxy(self.port, private.public_key())
            self.url = self._serve(self._gcs)
        except BaseException:
            self.stop()
            raise
        self.endpoint = f"{self.url}/storage/v1/"

    # -- for clients ---------------------------------------------------------------------

    def key(self, private_key_pem: str | None = None) -> dict[str, str]:
        """A service account key for this server (``private_key_pem``: another key, which its
        token server refuses)."""
        return {"type": "service_account", "project_id": "eps-test-project", "private_key_id": "k" + "0" * 39,
                "private_key": private_key_pem or self.private_key_pem, "client_email": EMAIL,
                "client_id": "100000000000000000001", "token_uri": self._gcs.token_uri,
                "auth_uri": "https://accounts.google.com/o/oauth2/auth"}  # fmt: skip

    def key_file(self, directory: str | os.PathLike[str], **kw: str) -> str:
        """:meth:`key` written to ``directory`` (mode 0600): a GOOGLE_APPLICATION_CREDENTIALS."""
        path = os.path.join(directory, f"gcs-key-{uuid.uuid4().hex[:8]}.json")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as fh:
            json.dump(self.key(**kw), fh)
        return path

    @property
    def secret(self) -> str:
        """A line of the private key that nothing but the key file may hold."""
        return self.private_key_pem.splitlines()[5]

    # -- helpers (straight to the emulator: never in the log) -----------------------------

    def _call(self, method: str, path: str, body: bytes | None = None,
              kind: str = "application/json") -> tuple[int, bytes]:  # fmt: skip
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": kind} if body is not None else {})
            answer = conn.getresponse()
            return answer.status, answer.read()
        finally:
            conn.close()

    def make_bucket(self, name: str) -> str:
        status, said = self._call("POST", "/storage/v1/b", json.dumps({"name": name}).encode())
        assert status == 200, (status, said)
        return name

    def drop_bucket(self, name: str) -> None:
        for key in self.keys(name):
            self._call("DELETE", f"/storage/v1/b/{name}/o/{quote(key, safe='')}")
        self._call("DELETE", f"/storage/v1/b/{name}")

    def put(self, bucket: str, key: str, data: bytes) -> None:
        path = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}"
        status, said = self._call("POST", path, data, "application/octet-stream")
        assert status == 200, (status, said)

    def get(self, bucket: str, key: str) -> bytes:
        status, body = self._call("GET", f"/download/storage/v1/b/{bucket}/o/{quote(key, safe='')}?alt=media")
        if status != 200:
            raise KeyError(f"gs://{bucket}/{key}: {status}")
        return body

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        status, body = self._call("GET", f"/storage/v1/b/{bucket}/o?prefix={quote(prefix, safe='')}")
        assert status == 200, (status, body)
        return sorted(item["name"] for item in json.loads(body).get("items") or [])

    def digests(self, bucket: str, prefix: str) -> dict[str, str]:
        """sha256 (hex) of each object under the "directory" ``prefix``, by its relative key."""
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        return {key[len(base) :]: hashlib.sha256(self.get(bucket, key)).hexdigest() for key in self.keys(bucket, base)}


_buckets = iter(range(1, 1 << 30))


@pytest.fixture(scope="session")
def gcs() -> Iterator[GcsServer]:
    """gcp-storage-emulator behind the checking proxy, for the whole session; its process is
    gone when the session ends."""
    yield from serve_session(GcsServer())


@pytest.fixture
def gcs_bucket(gcs: GcsServer) -> Iterator[str]:
    """A fresh bucket (``eps-gcs-N-xxxxxxxx``); the proxy's log cleared first; dropped after."""
    name = gcs.make_bucket(f"eps-gcs-{next(_buckets)}-{uuid.uuid4().hex[:8]}")
    gcs.clear_log()
    yield name
    with contextlib.suppress(Exception):
        gcs.drop_bucket(name)
