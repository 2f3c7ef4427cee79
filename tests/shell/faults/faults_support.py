"""Helpers for the fault-injection suite: ``eps`` as a real child process, SIGKILL at a
chosen step, and the questions asked afterwards (of the ledger file, the fake servers,
the SLURM cluster).

Kill points come from outside the executor, never from hooks in production code:

- the local GCP and RunPod servers run in this test process; :class:`GcpTrap` and
  :class:`RunpodTrap` wrap their request handling so that when a chosen request
  arrives the executor is SIGKILLed, either before the server applies it (the
  provider never saw the call) or after (the resource exists, the answer is lost);
- the JSON event lines on the child's stdout (:meth:`Child.wait_event`);
- for SLURM, the cluster's ``login`` command prefix is ``slurm_wrap.sh`` in this
  directory: it runs the real command and, on a one-shot rule, SIGKILLs its parent
  (the eps process) before or after a chosen command (:class:`SlurmTrap`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).parent
SHELL = HERE.parent
KEY = "rpa_FAULTSUITEKEY_5d1e0c7a9b"
PROJECT = "test-project"
ZONES = ("us-central1-a", "us-central1-b")
WRAP = HERE / "slurm_wrap.sh"
ENTRY = "from eps.shell.cli import entry; entry()"
#: A child started with test-sized provider timeouts (the CLI has no knob for them).
ENTRY_FAST_TIMEOUTS = (
    "import sys; from eps.shell.cli import main; from eps.shell.lanes import LaneOptions;"
    "from eps.shell.util.retry import RetryPolicy;"
    "sys.exit(main(sys.argv[1:], lane_options=LaneOptions("
    "gcp_options={'request_timeout_s': 1.0, 'retry': RetryPolicy(attempts=2, timeout_s=10, wait_initial_s=0.05,"
    " wait_max_s=0.1, wait_jitter_s=0.0)},"
    "runpod_options={'request_timeout_s': 1.0, 'retry': RetryPolicy(attempts=2, timeout_s=10,"
    " wait_initial_s=0.05, wait_max_s=0.1, wait_jitter_s=0.0)})))"
)


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gcp_fake = _load("gcp_fake_server_for_faults", SHELL / "gcp" / "fake_server.py")
runpod_fake = _load("runpod_fake_server_for_faults", SHELL / "runpod" / "fake_server.py")
ssh_support = _load("ssh_support", SHELL / "ssh" / "ssh_support.py")


def slurm_qos_caps() -> ModuleType:
    """tests/shell/slurm/qos_caps.py (the QoS-cap helper both suites use), loaded with the
    slurm_support it imports (the same modules the SLURM suite imports, when it runs too)."""
    _load("slurm_support", SHELL / "slurm" / "slurm_support.py")
    return _load("qos_caps", SHELL / "slurm" / "qos_caps.py")


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll ``predicate`` until truthy (returned); fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def wait_synced(path: Path, at_least: int, timeout_s: float = 60.0) -> None:
    """Wait until the checkpoint file ``path`` (pulled by eps's sync) holds a count of at
    least ``at_least``."""

    def counted() -> bool:
        try:
            return int(path.read_text()) >= at_least
        except (OSError, ValueError):
            return False

    wait_until(counted, timeout_s, f"a synced checkpoint of {at_least} at {path}")


def _proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def sigkill_and_confirm(pid: int, timeout_s: float = 5.0) -> None:
    """SIGKILL ``pid`` and return once it runs no more code (a zombie, or gone)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while _proc_state(pid) not in (None, "Z", "X"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"pid {pid} survived SIGKILL")
        time.sleep(0.005)


# --- the child process -------------------------------------------------------------------


class Child:
    """One ``eps`` process; stdout (JSON events, one per line) is read by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        self.lines: list[str] = []
        self.err = ""
        self._cond = threading.Condition()
        self._out = threading.Thread(target=self._read_out, daemon=True)
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._out.start()
        self._err.start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.err = self.proc.stderr.read()

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._cond:
            lines = list(self.lines)
        out = []
        for line in lines:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def wait_event(self, pred: Callable[[dict[str, Any]], bool], timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for line in self.lines:
                    with contextlib.suppress(ValueError):
                        ev = json.loads(line)
                        if pred(ev):
                            return ev
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._out.is_alive()):
                    pytest.fail(f"no event {what} (rc={self.proc.poll()}): {self.lines} {self.err}")
                self._cond.wait(min(left, 0.2))

    def kill(self) -> None:
        sigkill_and_confirm(self.pid)

    def wait(self, timeout_s: float = 60.0) -> int:
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            pytest.fail(f"eps {self.argv[3:]} did not finish in {timeout_s} s: {self.lines} {self.err}")
        self._out.join(5)
        self._err.join(5)
        return rc

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class Eps:
    """``eps`` against the local GCP and RunPod servers (and optionally the real SLURM cluster),
    each command a separate process; the state directory and config live in ``tmp``."""

    def __init__(
        self, tmp: Path, gcp: Any, runpod: Any, *, slurm: bool = False, caps: tuple[int, int] = (2, 1),
        detached: bool = False, state_url: str | None = None,
    ) -> None:
        self.tmp = tmp
        self.state_url = state_url  # the ledger in PostgreSQL (None: SQLite in the state dir)
        self.state = tmp / "state"
        self.config = tmp / "config.toml"
        self.faults = tmp / "slurm-faults"
        self.faults.mkdir(exist_ok=True)
        zones = ", ".join(f'"{z}"' for z in ZONES)
        # Without the cluster, fellows is reached through `false`: it reports unavailable at once.
        login = f'["{WRAP}"]' if slurm else '["false"]'
        gcp_machines, runpod_machines = ssh_support.machine_keys(tmp)
        self.config.write_text(
            f'[gcp]\nproject = "{PROJECT}"\nendpoint = "{gcp.endpoint}"\nzones = [{zones}]\npoll_interval_s = 0.05\n'
            + gcp_machines
            + f'[runpod]\nbase_url = "{runpod.url}"\npoll_interval_s = 0.05\n'
            + runpod_machines
            + ("[jobs]\nsupervise = 'detached'\nsupervisor_idle_s = 2\nwait_poll_s = 0.05\n" if detached
               else "[jobs]\nsupervise = 'inline'\nwait_poll_s = 0.05\n")
            + f'[[clusters]]\nname = "fellows"\nlogin = {login}\nwork_root = "{tmp / "shared"}"\nsubmit_gap = 0.2\n'
        )
        ssh_support.machines_here(gcp, runpod, self.state)  # each job runs on the test sshd, for real
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("EPS_", "RUNPOD_"))},
            "EPS_STATE_DIR": str(self.state),
            "EPS_CONFIG": str(self.config),
            "RUNPOD_API_KEY": KEY,
            "HOME": str(tmp),
            "EPS_FAULT_DIR": str(self.faults),
            "EPS_FELLOWS_QUEUE_WAIT_SECONDS": str(caps[0]),
            "EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": str(caps[1]),
            **({"EPS_STATE_URL": state_url} if state_url else {}),
        }
        self.children: list[Child] = []

    def start(self, *argv: str, entry: str = ENTRY, env: dict[str, str] | None = None) -> Child:
        child = Child([sys.executable, "-c", entry, *argv], {**self.env, **(env or {})}, self.tmp)
        self.children.append(child)
        return child

    def run(self, *argv: str, timeout_s: float = 60.0, **kw: Any) -> tuple[int, str, str]:
        child = self.start(*argv, **kw)
        rc = child.wait(timeout_s)
        return rc, "".join(child.lines), child.err

    def execute(self, *argv: str, timeout_s: float = 60.0, **kw: Any) -> tuple[int, list[dict[str, Any]], str]:
        child = self.start("execute", "--json", *argv, **kw)
        rc = child.wait(timeout_s)
        assert "Traceback" not in child.err, child.err
        return rc, child.events, child.err

    def close(self) -> None:
        for child in self.children:
            child.close()
        with contextlib.suppress(ProcessLookupError):
            self.kill_supervisor()
        ssh_support.stop_machine_jobs(self.tmp)

    # -- the supervisor (detached mode) --

    def supervisor_pid(self) -> int | None:
        try:
            pid = int((self.state / "supervisor.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if _proc_state(pid) not in (None, "Z") else None

    def kill_supervisor(self) -> int:
        """SIGKILL the state directory's supervisor (and confirm it is gone): its pid."""
        pid = self.supervisor_pid()
        if pid is None:
            raise ProcessLookupError("no supervisor")
        sigkill_and_confirm(pid)
        return pid

    # -- the ledger, read directly (``eps status`` would reconcile first) --

    def _db(self) -> Any:
        """The ledger's database, either backend (rows read by name: :func:`_dict`)."""
        if self.state_url:
            from eps.shell.state.pg_store import PgStore

            return PgStore(self.state_url)
        db = sqlite3.connect(f"file:{self.state / 'ledger.sqlite3'}?mode=ro", uri=True, timeout=30)
        db.row_factory = sqlite3.Row
        return db

    def dispatch(self, d: str) -> dict[str, Any]:
        with contextlib.closing(self._db()) as db:
            row = db.execute("SELECT * FROM dispatches WHERE id=?", (d,)).fetchone()
        assert row is not None, f"no dispatch {d} in the ledger"
        out = _dict(row)
        out["handle"] = json.loads(out["handle"]) if out["handle"] else None
        return out

    def dispatch_ids(self) -> list[str]:
        with contextlib.closing(self._db()) as db:
            return [r[0] for r in db.execute("SELECT id FROM dispatches ORDER BY created_at").fetchall()]

    def attempts(self, d: str) -> list[dict[str, Any]]:
        with contextlib.closing(self._db()) as db:
            rows = db.execute("SELECT * FROM attempts WHERE dispatch=? ORDER BY seq", (d,)).fetchall()
            return [_dict(r) for r in rows]

    def phases(self, d: str) -> dict[str, str]:
        """Pipeline ``d``'s phases, each name to its child row (its record in the ledger)."""
        with contextlib.closing(self._db()) as db:
            rows = db.execute("SELECT name, child FROM pipeline_phases WHERE dispatch=? ORDER BY seq", (d,)).fetchall()
            return {str(r[0]): str(r[1]) for r in rows}

    def wait_attempt(self, d: str | None, pred: Callable[[dict[str, Any]], bool], timeout_s: float, what: str) -> dict:
        def find() -> dict[str, Any] | None:
            if not self.state_url and not (self.state / "ledger.sqlite3").exists():
                return None
            try:
                ids = [d] if d else self.dispatch_ids()
                return next((a for i in ids for a in self.attempts(i) if pred(a)), None)
            except sqlite3.OperationalError:
                return None

        result: dict[str, Any] = wait_until(find, timeout_s, what, 0.01)
        return result


def _dict(row: Any) -> dict[str, Any]:
    return {k: row[k] for k in row.keys()}  # noqa: SIM118 (either backend's row)


# --- traps on the fake servers -----------------------------------------------------------


@contextlib.contextmanager
def cloud(tmp: Path, *, detached: bool = False, runpod_latency_s: float = 0.0) -> Iterator[Eps]:
    """:class:`Eps` against a fresh GCP fake (``.gcp``) and RunPod fake (``.runpod``, answering
    after ``runpod_latency_s``) and the test sshd; at the end everything is cancelled (at full
    speed), the supervisor and the jobs on the sshd ended, and both fakes stopped."""
    ssh_support.start_sshd()
    gcp = gcp_fake.FakeCompute(PROJECT).start()
    runpod = runpod_fake.FakeRunpod(api_key=KEY, gets_to_running=1, latency_s=runpod_latency_s).start()
    eps = Eps(tmp, gcp, runpod, detached=detached)
    eps.gcp, eps.runpod = gcp, runpod
    try:
        yield eps
    finally:
        runpod.latency_s = 0.0
        eps.run("cancel", "--all", timeout_s=180.0)
        eps.close()  # ends the supervisor it started, and the jobs on the test sshd
        gcp.stop()
        runpod.stop()


class _Trap:
    """Armed rules: when a request matches, SIGKILL the target before or after the server acts."""

    def __init__(self) -> None:
        self.rules: list[dict[str, Any]] = []
        self.fired: list[str] = []
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def arm(
        self,
        method: str,
        path: str,
        when: str,
        target: Child | Callable[[], None],
        *,
        skip: int = 0,
        answer: int = 503,
    ) -> None:
        """``when``: ``before`` (the request is dropped: the server never applies it),
        ``after`` (applied, then the client dies before it reads the answer), or
        ``delay:S`` (the server holds the answer S seconds and then answers normally;
        ``target`` is then a callable run at arrival)."""
        assert when in ("before", "after") or when.startswith("delay:")
        with self._lock:
            self.rules.append(
                {"method": method, "re": re.compile(path), "when": when, "target": target, "skip": skip, "ans": answer}
            )

    def _match(self, method: str, path: str) -> dict[str, Any] | None:
        with self._lock:
            self.seen.append((method, path))
            for rule in self.rules:
                if rule["method"] == method and rule["re"].search(path):
                    if rule["skip"] > 0:
                        rule["skip"] -= 1
                        return None
                    self.rules.remove(rule)
                    self.fired.append(f"{rule['when']} {method} {path}")
                    return rule
        return None

    @staticmethod
    def _strike(rule: dict[str, Any]) -> None:
        target = rule["target"]
        if isinstance(target, Child):
            target.kill()
        else:
            target()

    def _around(self, method: str, path: str, apply: Callable[[], Any], dropped: Callable[[int], Any]) -> Any:
        rule = self._match(method, path.split("?", 1)[0])
        if rule is None:
            return apply()
        when = rule["when"]
        if when == "before":
            self._strike(rule)
            return dropped(rule["ans"])
        if when == "after":
            answer = apply()
            self._strike(rule)
            return answer
        self._strike(rule)
        time.sleep(float(when.split(":", 1)[1]))
        return apply()


class GcpTrap(_Trap):
    def __init__(self, fake: Any) -> None:
        super().__init__()
        self.fake = fake
        self.materialized: list[tuple[str, str]] = []  # (zone, name) of every instance ever made
        original = fake.handle
        materialize = fake._materialize

        def handle(method: str, raw_path: str, raw_body: bytes) -> tuple[int, bytes]:
            def dropped(status: int) -> tuple[int, bytes]:
                return status, gcp_fake.dumps(gcp_fake.unavailable().body())

            return self._around(method, raw_path, lambda: original(method, raw_path, raw_body), dropped)

        def record(zone: str, body: dict[str, Any], status: str) -> dict[str, Any]:
            if status == "PROVISIONING":  # made by an insert (add_instance is the test's own)
                self.materialized.append((zone, body["name"]))
            return materialize(zone, body, status)

        fake.handle = handle
        fake._materialize = record

    def live(self, dispatch: str | None = None) -> list[dict[str, Any]]:
        """The instances (of ``dispatch``) eps still holds: one whose delete was accepted
        (STOPPING until its operation is done) is released, however soon the fake drops it."""
        with self.fake._lock:
            items = list(self.fake.instances.values())
        held = [i for i in items if i.get("status") != "STOPPING"]
        return [i for i in held if dispatch is None or i.get("labels", {}).get("eps-dispatch") == dispatch]

    def inserts(self) -> list[Any]:
        return self.fake.recorded("POST", r"/instances$")


class RunpodTrap(_Trap):
    def __init__(self, fake: Any) -> None:
        super().__init__()
        self.fake = fake
        self.created: list[str] = []  # pod names, one per pod ever made
        original = fake.handle

        def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> Any:
            def apply() -> Any:
                answer = original(method, path, headers, raw)
                if method == "POST" and path.rstrip("/") == "/v2/pods" and answer[0] == 201:
                    with self._lock:
                        self.created.append(answer[2]["name"])
                return answer

            def dropped(status: int) -> Any:
                return (
                    status,
                    {"Content-Type": "application/problem+json"},
                    {
                        "title": "Service Unavailable",
                        "status": status,
                        "detail": "dropped by the fault suite",
                    },
                )

            return self._around(method, path, apply, dropped)

        fake.handle = handle

    def live(self, dispatch: str | None = None) -> list[dict[str, Any]]:
        pods = self.fake.live_pods()
        return [p for p in pods if dispatch is None or p["name"].startswith(f"eps-{dispatch}-")]


# --- the SLURM side ------------------------------------------------------------------------


class SlurmTrap:
    """Rules for ``slurm_wrap.sh`` (one-shot files in ``EPS_FAULT_DIR/rules``) and its call log."""

    def __init__(self, fault_dir: Path) -> None:
        self.dir = fault_dir
        (self.dir / "rules").mkdir(exist_ok=True)
        self._n = 0

    def arm(self, command: str, when: str) -> None:
        """SIGKILL the eps process ``before`` or ``after`` its next ``command`` (sbatch, scancel, ...)."""
        assert when in ("before", "after")
        self._n += 1
        (self.dir / "rules" / f"{self._n:03d}-{command}").write_text(when + "\n")

    def calls(self) -> list[str]:
        log = self.dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def sbatches(self) -> list[tuple[str, str]]:
        """(qos, job id) of every sbatch that ran (job id empty when it printed none)."""
        out = []
        for line in self.calls():
            if line.startswith("sbatch "):
                _, qos, job = [*line.split(" ", 2), ""][:3]
                out.append((qos, job.strip()))
        return out

    def fired(self) -> list[str]:
        return [line for line in self.calls() if line.startswith("KILL")]


def squeue(name_prefix: str) -> list[tuple[str, str, str, str]]:
    """(job id, state, qos, name) of the live jobs whose name starts with ``name_prefix``."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%T|%q|%j"], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    rows = []
    for line in out.splitlines():
        job_id, state, qos, name = line.split("|", 3)
        if name.startswith(name_prefix):
            rows.append((job_id, state, qos, name))
    return rows


def scancel_names(prefix: str) -> None:
    """Cancel this suite's jobs only (other suites may share the cluster), and wait until gone."""
    ids = [j for j, *_ in squeue(prefix)]
    if ids:
        subprocess.run(["scancel", *ids], check=False, capture_output=True, timeout=30)
    wait_until(lambda: not squeue(prefix), 30, f"jobs {prefix}* to leave the queue")


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tiny tmpfs at ``path`` (root only); unmounted at exit."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


#: A job that counts to 16 in half seconds, keeping its count in $EPS_OUTPUT_DIR/ckpt and
#: starting from it, and notes each start with EPS_RESTART_COUNT.
COUNTER = (
    'o="$EPS_OUTPUT_DIR"; n=$(cat "$o/ckpt" 2>/dev/null || echo 0); '
    'echo "start $n restart $EPS_RESTART_COUNT" >> "$o/starts"; '
    'while [ "$n" -lt 16 ]; do n=$((n+1)); echo $n > "$o/ckpt.tmp"; mv "$o/ckpt.tmp" "$o/ckpt"; sleep 0.5; done'
)


def assert_counter_resumed(ckpt: bytes | str, starts: bytes | str) -> None:
    """:data:`COUNTER` ran twice and the second run went on from the checkpoint the first left
    (at least 3): its checkpoint at 16, its ``starts`` two lines, the second a restart."""
    as_text = [v.decode() if isinstance(v, bytes) else v for v in (ckpt, starts)]
    assert as_text[0] == "16\n"
    lines = as_text[1].splitlines()
    assert lines[0] == "start 0 restart 0" and len(lines) == 2, lines
    second = lines[1].split()
    assert int(second[1]) >= 3 and second[3] == "1", lines  # it went on from the saved count


def dies_with_its_disk(root: Path) -> None:
    """What ran on a VM that was taken back (its processes under ``root``): gone, its files with it."""
    found = subprocess.run(["pgrep", "-f", str(root)], capture_output=True, text=True, check=False).stdout.split()
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


# --- what the suite's setups share: storage, pipelines, a team of hosts ---------------------


def s3_storage(e: Eps, s3: Any, bucket: str) -> Eps:
    """``e`` with ``[storage]`` on the local S3 server (tests/storage_support.py), its keys in
    the environment, as AWS's."""
    e.config.write_text(e.config.read_text() + f'[storage]\nurl = "s3://{bucket}/runs"\nendpoint = "{s3.endpoint}"\n')
    e.env.update(s3.env())
    return e


def pulled_from_storage(e: Eps, d: str, at: str, want: dict[str, str], tree: Callable[[Path], dict[str, str]]) -> str:
    """``eps status`` says ``d``'s outputs are in storage at ``at``; ``eps pull`` brings every
    byte back (``tree`` of the outputs, {path: sha256}, equals ``want``); ``eps status`` then
    says they are pulled.  All that the three commands wrote (stdout and stderr)."""
    rc, out, err = e.run("status", d, "--json")  # where they live: the bucket, then here once pulled
    assert json.loads(out)["dispatches"][0]["outputs"] == {"where": "storage", "at": at}
    said = out + err
    rc, out, err = e.run("pull", d, timeout_s=300)
    assert rc == 0, (out, err)
    assert tree(e.state / "outputs" / d) == want  # every byte, by hash
    said += out + err
    rc, out, err = e.run("status", d, "--json")
    assert json.loads(out)["dispatches"][0]["outputs"] == {"where": "pulled", "at": str(e.state / "outputs" / d)}
    return said + out + err


#: A pipeline phase's command: the sha256 of every input file it was given, in ``seen``.
SEEN = '( cd "$EPS_INPUT_DIR" && find . -type f | sort | xargs sha256sum ) > "$EPS_OUTPUT_DIR/seen"'


def pipeline_toml(phases: list[dict[str, Any]]) -> str:
    """A job file of ``[[phases]]``, one table per dict (values written as JSON, which these
    are in TOML too: strings, lists of strings, booleans)."""
    return "\n".join("[[phases]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in p.items()) for p in phases)


def seen_by(out: Path) -> dict[str, str]:
    """A phase's ``seen`` (:data:`SEEN`) as {relative path: sha256}."""
    got = {}
    for line in (out / "seen").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        got[name.removeprefix("./")] = digest
    return got


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


#: The ``team_of_two`` fixture (conftest.py): ``team_of_two(lease_s, a={...}, b={...})``.
Team = Callable[..., tuple[Eps, Eps]]
#: The ``detached_eps`` fixture (conftest.py): ``detached_eps(slurm=..., caps=..., storage=...)``.
DetachedEps = Callable[..., Eps]


def team_host(tmp: Path, name: str, gtrap: GcpTrap, rtrap: RunpodTrap, url: str, lease_s: float,
              **options: Any) -> Eps:  # fmt: skip
    """Host ``name`` of a team sharing the PostgreSQL ledger at ``url`` (issue 37), simulated on
    this machine: its own HOME and state dir ``tmp/<name>``, config, key and (detached)
    supervisors, ``EPS_STATE_HOST=host-<name>`` and a lease of ``lease_s``.  What is the
    provider's or the cluster's, not the host's, lies outside its HOME, shared by the team
    (deleting the host leaves it): the GCP machines' disks under ``tmp/machines``, the
    cluster's work root ``tmp/cluster`` and the SLURM wrapper's call log ``tmp/slurm-calls``.
    ``options``: :class:`Eps`'s (``slurm``, ``caps``)."""
    root, machines, cluster, calls = tmp / name, tmp / "machines", tmp / "cluster", tmp / "slurm-calls"
    for shared in (machines, calls):
        shared.mkdir(exist_ok=True)
    root.mkdir()
    e = Eps(root, gtrap.fake, rtrap.fake, detached=True, state_url=url, **options)
    text = e.config.read_text()
    for mine, theirs in ((root / "gcp-runs", machines / "gcp-runs"), (root / "shared", cluster)):
        assert f'work_root = "{mine}"' in text, text
        text = text.replace(f'work_root = "{mine}"', f'work_root = "{theirs}"')
    e.config.write_text(text)
    e.env.update({"EPS_STATE_HOST": f"host-{name}", "EPS_STATE_LEASE": f"{lease_s}s", "EPS_FAULT_DIR": str(calls)})
    return e


# --- the questions asked after every fault -------------------------------------------------

LIVE_DISPATCH = ("started", "held")


def assert_no_orphans(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, *, slurm_prefix: str | None = None) -> None:
    """Every live resource belongs to a started/held dispatch, at most one per dispatch, and
    it is the one the ledger names; every pod name and (dispatch, rung) instance was made once."""
    live: dict[str, list[str]] = {}
    for inst in gtrap.live():
        live.setdefault(inst["labels"]["eps-dispatch"], []).append(f"gcp:{inst['name']}")
    for pod in rtrap.live():
        d = pod["name"][len("eps-") :].rsplit("-", 1)[0]
        live.setdefault(d, []).append(f"runpod:{pod['id']}")
    if slurm_prefix is not None:
        for job_id, _state, _qos, name in squeue(slurm_prefix):
            live.setdefault(name[len("eps-") :], []).append(f"fellows:{job_id}")
    for d, items in live.items():
        row = eps.dispatch(d)
        assert row["state"] in LIVE_DISPATCH, f"orphan: {items} live for {d}, which is {row['state']}"
        assert len(items) == 1, f"{d} holds {items}"
        assert row["handle"] is not None and items[0].endswith(":" + row["handle"]["id"]), (items, row["handle"])
    for d in eps.dispatch_ids():
        row = eps.dispatch(d)
        if row["state"] in LIVE_DISPATCH and row["parent"] is None and row["handle"] and row["handle"]["kind"] != "vm":
            assert d in live, f"{d} is {row['state']} on {row['handle']} but nothing is live"
    assert len(rtrap.created) == len(set(rtrap.created)), f"a pod name was created twice: {rtrap.created}"
    assert len(gtrap.materialized) == len(set(gtrap.materialized)), f"an instance made twice: {gtrap.materialized}"


def assert_ledger_consistent(eps: Eps, d: str) -> None:
    """Attempts agree with the dispatch: at most one live attempt, the started one carries the handle."""
    row = eps.dispatch(d)
    attempts = eps.attempts(d)
    live = [a for a in attempts if a["state"] in ("intent", "submitted", "running", "pending")]
    if row["state"] in LIVE_DISPATCH:
        assert row["handle"], row
        assert len(live) == 1, (row, attempts)
        assert live[0]["handle"] == row["handle"]["id"], (row, attempts)
    else:
        assert live == [], (row, attempts)


# --- a team's hosts (test_faults_team*.py) ---------------------------------------------

#: The team tests' lease period (``EPS_STATE_LEASE``).
TEAM_LEASE_S = 4


def owner_of(e: Eps, d: str) -> str | None:
    with contextlib.suppress(Exception):
        return e.dispatch(d)["owner_host"]  # type: ignore[no-any-return]
    return None


def lose_host(a: Eps) -> None:
    """Host A is lost: its ssh masters die with it (they were its processes; their sockets go
    with its state dir, so nothing could close them later), then its HOME, state dir, key and
    config are deleted."""
    import signal

    from eps.shell.remote import mux

    for pid in mux.masters_under([str(a.tmp)]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(a.tmp)


def supervise_until_taken(b: Eps, d: str, timeout_s: float) -> tuple[float, float]:
    """Run B's ``eps supervise`` every half second (its timer) until B owns ``d``: when
    (monotonic), and the longest one run of it took (the timer's own latency)."""
    deadline = time.monotonic() + timeout_s
    longest = 0.0
    while time.monotonic() < deadline:
        began = time.monotonic()
        rc, out, err = b.run("supervise", "--json", timeout_s=60)
        longest = max(longest, time.monotonic() - began)
        assert rc == 0, (out, err)
        if owner_of(b, d) == "host-b":
            return time.monotonic(), longest
        time.sleep(0.5)
    pytest.fail(f"host B did not take {d} over within {timeout_s} s")
