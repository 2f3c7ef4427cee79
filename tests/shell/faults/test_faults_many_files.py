"""The red-team rule "100k files" on outputs (issue 33): a job on the GCP fake (the real test
sshd) writes many small files to ``$EPS_OUTPUT_DIR``, and they come back whole

- through the VM pull path (no storage): the end's rsync into the state directory;
- through storage (moto's S3 behind the logging proxy): the machine's rclone uploads them,
  ``eps pull`` brings them from the bucket;

while eps's side stays flat: its own processes' peak memory (the ``eps`` command and the
supervisor, each sampled from ``/proc``: VmHWM) is bounded, and neither its events, nor its
ledger, nor its output grow with the count (no event, row or line per file).

The count is ``EPS_MANY_FILES`` (default: a size CI runs in seconds); the figures (seconds,
peak MB of eps and of the tools it ran) go to the JSON-lines file ``EPS_MANY_FILES_REPORT``
when set.  benchmarks/many_files.py runs it with 100,000 and prints them.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from faults_support import Eps, GcpTrap, RunpodTrap, assert_no_orphans
from storage_support import S3Server

CPU = ("cpu-small", "--duration", "30m", "--pin", "gcp")
#: How many files each path gets (``EPS_MANY_FILES``: both).
SIZES = {"vm": 5000, "storage": 500}
#: What eps's own processes may take at their peak, whatever the count (MB of VmHWM).
EPS_PEAK_MB = 250
#: Events of one dispatch, whatever the count: none per file.
MAX_EVENTS = 40


def _count(path: str) -> int:
    return int(os.environ.get("EPS_MANY_FILES") or SIZES[path])


def _writer(n: int) -> str:
    """A job that writes ``n`` files of its own index, 1000 to a directory."""
    return (f"import os\nfor i in range({n}):\n"
            "    d = os.path.join(os.environ['EPS_OUTPUT_DIR'], 'd%03d' % (i // 1000))\n"
            "    os.makedirs(d, exist_ok=True)\n"
            "    open(os.path.join(d, 'f%d' % i), 'w').write('%d\\n' % i)\n")  # fmt: skip


class Peaks:
    """Samples the peak memory (VmHWM) of eps's processes: ``roots`` (role -> a function that
    gives its pid, asked each time: the command, the supervisor), each by its role when it is
    Python (eps itself), and everything they started by its name (rsync, ssh, rclone)."""

    def __init__(self, roots: dict[str, Callable[[], int | None]]) -> None:
        self.roots = roots
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.1)

    def sample(self) -> None:
        parents: dict[int, int] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as fh:
                        parents[int(name)] = int(fh.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        for role, root in self.roots.items():
            pid = root()
            ours = {pid} if pid is not None else set()
            while more := {p for p, pp in parents.items() if pp in ours} - ours:
                ours |= more
            for one in ours:
                self._take(one, role)

    def _take(self, pid: int, role: str) -> None:
        try:
            with open(f"/proc/{pid}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            return
        name = fields.get("Name", "?").strip()
        kind = role if name.startswith("python") else name
        hwm = int(fields.get("VmHWM", "0 kB").split()[0] or 0)
        self.peak[kind] = max(self.peak.get(kind, 0), hwm)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(5)
        return {k: round(v / 1024, 1) for k, v in sorted(self.peak.items())}


def _report(**figures: object) -> None:
    print(json.dumps(figures))
    if path := os.environ.get("EPS_MANY_FILES_REPORT"):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(figures) + "\n")


def _timed(eps: Eps, *argv: str, timeout_s: float) -> tuple[int, str, str, float, dict[str, float]]:
    child_pid: list[int] = []
    peaks = Peaks({"eps": lambda: child_pid[0] if child_pid else None, "supervisor": eps.supervisor_pid})
    started = time.monotonic()
    child = eps.start(*argv)
    child_pid.append(child.pid)
    rc = child.wait(timeout_s)
    seconds = round(time.monotonic() - started, 2)
    return rc, "".join(child.lines), child.err, seconds, peaks.stop()


def _events(eps: Eps, d: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (eps.state / "events" / f"{d}.jsonl").read_text().splitlines()]


def _check_back(back: Path, n: int) -> None:
    names = {str(p.relative_to(back)) for p in back.rglob("f*") if p.is_file()}
    assert len(names) == n, (len(names), n)
    assert names == {f"d{i // 1000:03d}/f{i}" for i in range(n)}
    for i in (0, n // 2, n - 1):
        assert (back / f"d{i // 1000:03d}" / f"f{i}").read_text() == f"{i}\n"


@pytest.fixture
def detached(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, sshd: Path) -> Iterator[Eps]:
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, detached=True)
    try:
        yield e
    finally:
        e.close()


def test_many_files_come_back_through_the_vm_pull_path(detached: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    eps, d, n = detached, "m" + uuid.uuid4().hex[:10], _count("vm")
    rc, out, err, seconds, peak = _timed(eps, "execute", *CPU, "--dispatch-id", d, "--sync-every", "0", "--wait",
                                         "--", "python3", "-c", _writer(n), timeout_s=max(300, n / 50))  # fmt: skip
    assert rc == 0, (out, err)
    back = eps.state / "outputs" / d
    _check_back(back, n)
    events = _events(eps, d)
    _report(path="vm", files=n, execute_s=seconds, peak_mb=peak, events=len(events))
    assert len(events) <= MAX_EVENTS and len(err.splitlines()) <= MAX_EVENTS, (len(events), err[-2000:])
    assert max(peak.get("eps", 0), peak.get("supervisor", 0)) <= EPS_PEAK_MB, peak
    assert_no_orphans(eps, gtrap, rtrap)


def test_many_files_go_to_storage_and_come_back_by_eps_pull(
    detached: Eps, s3: S3Server, bucket: str, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    eps, d, n = detached, "m" + uuid.uuid4().hex[:10], _count("storage")
    storage = f'[storage]\nurl = "s3://{bucket}/runs"\nendpoint = "{s3.endpoint}"\n'
    eps.config.write_text(eps.config.read_text() + storage)
    eps.env.update(s3.env())
    rc, out, err, up_s, up_peak = _timed(eps, "execute", *CPU, "--dispatch-id", d, "--sync-every", "0", "--wait",
                                         "--", "python3", "-c", _writer(n), timeout_s=max(300, n / 20))  # fmt: skip
    assert rc == 0, (out, err)
    assert not (eps.state / "outputs" / d).exists()  # never through the shared VM
    rc, pulled, perr, pull_s, pull_peak = _timed(eps, "pull", d, timeout_s=max(300, n / 20))
    assert rc == 0, (pulled, perr)
    _check_back(eps.state / "outputs" / d, n)
    events = _events(eps, d)
    _report(path="storage", files=n, execute_s=up_s, execute_peak_mb=up_peak, pull_s=pull_s, pull_peak_mb=pull_peak,
            events=len(events))  # fmt: skip
    assert len(events) <= MAX_EVENTS and len((err + perr + pulled).splitlines()) <= MAX_EVENTS, len(events)
    peaks = [p.get(role, 0) for p in (up_peak, pull_peak) for role in ("eps", "supervisor")]
    assert max(peaks) <= EPS_PEAK_MB, (up_peak, pull_peak)
    assert_no_orphans(eps, gtrap, rtrap)
