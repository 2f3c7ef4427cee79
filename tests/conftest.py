"""Every test: a supervisor it started is gone when it ends.

A supervisor leaves by itself ``[jobs] supervisor_idle_s`` after its last dispatch settled;
a test does not wait for that: after the test, each supervisor that was not there before
is ended.  One that still owned an unsettled dispatch (a job the test left running) fails
the test: a test that leaves a detached process with work behind is a bug.

Every test: no ssh master connection (eps.shell.remote.mux) of this session's state dirs
outlives it.  A master ends by itself after its idle time; a test does not wait for that:
each one left (a machine the test did not release) is closed after the test, and one that
would not go fails it.

Every job's ``bash -l`` on this machine may run ``pyenv init``, whose rehash takes a lock
file and waits up to ``PYENV_REHASH_TIMEOUT`` (60 s unless set) for it.  The tests kill
jobs on purpose, sometimes mid-rehash, and a rehash killed that way leaves its lock
behind: every later login shell would then wait.  So the tests set the timeout to 1 s
and clear a lock older than a rehash ever takes (30 s) before each test.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest

# the S3 and GCS servers object storage is tested against: fixtures `s3`, `bucket`, `gcs`, `gcs_bucket`;
# the PostgreSQL server the ledger is: `pg_server` (session), `pg_url` and `ledger_url` (both backends)
pytest_plugins = ["storage_support", "gcs_support", "pg_support"]

#: Every test of the real SLURM test cluster runs in ONE pytest-xdist worker, one at a time:
#: the suites assume they are alone on the cluster (its QoS caps, its queue, its accounting).
#: A test file is the cluster's when its text names the cluster (this pattern); the check at
#: collection (:func:`pytest_collection_modifyitems`) fails the run if a test marked ``slurm``,
#: or one using the ``slurm_cluster`` fixture, is in a file the pattern does not see.
CLUSTER_SCOPE = "slurm-cluster"
_CLUSTER_TEXT = re.compile(rb"mark\.slurm|slurm_cluster|cluster\.sh|slurm_support|SlurmClient\(")


@functools.cache
def cluster_file(path: str) -> bool:
    """Whether the test file at ``path`` uses the real SLURM test cluster (by its text)."""
    try:
        with open(path, "rb") as fh:
            return _CLUSTER_TEXT.search(fh.read()) is not None
    except OSError:
        return False


def _rename(item: pytest.Item, nodeid: str) -> None:
    """Give ``item`` the node id ``nodeid`` (pytest 9 keeps it structured, earlier ones a string)."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:
        item._nodeid = nodeid
    else:
        item._id = NodeId.parse(nodeid)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # schemathesis names each operation's case in its name but not its node id: pytest-xdist
    # hands tests out by node id, so 12 cases under one id ran as one.  Each its own id, and a
    # run whose ids are not unique fails rather than drops tests silently.
    for item in items:
        head, _, last = item.nodeid.rpartition("::")
        if last != item.name and last == getattr(item, "originalname", None):
            _rename(item, f"{head}::{item.name}")
    seen: set[str] = set()
    twice = sorted({item.nodeid for item in items if item.nodeid in seen or seen.add(item.nodeid)})
    if twice:
        raise pytest.UsageError(f"tests with the same node id (pytest-xdist would run one of each): {twice}")
    stray = sorted({item.nodeid.split("::", 1)[0] for item in items
                    if (item.get_closest_marker("slurm") is not None
                        or "slurm_cluster" in getattr(item, "fixturenames", ()))
                    and not cluster_file(str(item.path))})  # fmt: skip
    if stray:
        raise pytest.UsageError(f"tests of the SLURM cluster in files tests/conftest.py's CLUSTER_TEXT does not see "
                                f"(they would run beside another worker's): {stray}")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: known only when it is loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist: each test file is one unit of work, except that every file of the SLURM
    test cluster is ONE unit (:data:`CLUSTER_SCOPE`), handed out first (it is the longest)."""
    from xdist.scheduler import LoadScopeScheduling

    root = str(config.rootpath)

    class OneCluster(LoadScopeScheduling):  # type: ignore[misc]
        first = True

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return CLUSTER_SCOPE if cluster_file(os.path.join(root, path)) else path

        def _assign_work_unit(self, node: Any) -> None:
            if self.first and CLUSTER_SCOPE in self.workqueue:
                self.workqueue.move_to_end(CLUSTER_SCOPE, last=False)
            self.first = False
            super()._assign_work_unit(node)

    return OneCluster(config, log)


MARK = b"from eps.shell.run.supervisor import main"
os.environ.setdefault("PYENV_REHASH_TIMEOUT", "1")
PYENV_LOCK = os.path.join(os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv"), "shims", ".pyenv-shim")


def clear_stale_pyenv_lock() -> None:
    try:
        if time.time() - os.stat(PYENV_LOCK).st_mtime > 30:
            os.unlink(PYENV_LOCK)
    except OSError:
        pass


def supervisors() -> dict[int, str]:
    """pid -> state dir of every live eps supervisor on this machine."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if len(argv) >= 4 and argv[2].startswith(MARK):
            found[int(name)] = argv[3].decode(errors="replace")
    return found


def unsettled(state_dir: str) -> list[str]:
    path = os.path.join(state_dir, "ledger.sqlite3")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            rows = db.execute(
                "SELECT id, state FROM dispatches WHERE state IN ('walking','started','held') AND parent IS NULL"
            ).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return []
    return [f"{d} ({s})" for d, s in rows]


def end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def _no_supervisor_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    clear_stale_pyenv_lock()
    before = set(supervisors())
    yield
    # only this session's: another test session on the machine has its own
    mine = str(tmp_path_factory.getbasetemp())
    left = {pid: d for pid, d in supervisors().items() if pid not in before and d.startswith(mine)}
    busy = {}
    for pid, state_dir in left.items():
        work = unsettled(state_dir)
        end(pid)
        if work:
            busy[pid] = (state_dir, work)
    if busy:
        pytest.fail(f"the test left supervisors with unsettled dispatches: {busy}")


def _control_dirs(base: str) -> list[str]:
    """This session's masters' socket directories: under its state dirs, or the short private
    ones (``/tmp/eps-<uid>/*``) whose ``owner`` file names one of its state dirs."""
    from eps.shell.remote import mux

    dirs = [base]
    short = os.path.join(mux.SHORT_BASE, f"eps-{os.geteuid()}")
    for name in sorted(os.listdir(short)) if os.path.isdir(short) else []:
        try:
            with open(os.path.join(short, name, mux.OWNER_FILE)) as fh:
                owner = fh.read().strip()
        except OSError:
            continue
        if owner.startswith(base):
            dirs.append(os.path.join(short, name))
    return dirs


@pytest.fixture(autouse=True)
def _no_ssh_master_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    yield
    from eps.shell.remote import mux

    dirs = _control_dirs(str(tmp_path_factory.getbasetemp()))
    left = mux.masters_under(dirs)
    for path in sorted(set(left.values())):
        mux.close(path)
    stuck = mux.wait_gone(left)
    for d in dirs[1:]:  # the short private ones: gone with their last socket
        mux.tidy(d)
    if stuck:
        pytest.fail(f"ssh masters of this test would not end: {[left[p] for p in stuck]}")
