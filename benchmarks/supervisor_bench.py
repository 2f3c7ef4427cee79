"""The supervisor's figures: how fast `eps execute --detach` returns, what supervising many
dispatches costs in memory, and whether one `eps status` revives them all after a SIGKILL.

    python benchmarks/supervisor_bench.py [--detach-runs 20] [--n 200] [--sleep 60]

Everything runs on the VM lane (a local subprocess per job) in a fresh state directory:

1. ``eps execute cpu-small --duration 10s --detach --json -- true``, ``--detach-runs`` times,
   each a new process (the median and the worst wall time, as a caller sees it);
2. ``--n`` dispatches of ``sleep --sleep`` handed over one after another; once all have
   started, the PSS of the supervising process (``/proc/PID/smaps_rollup``), then a SIGKILL
   of it, one ``eps status``, and the time until every dispatch has ended with its code.

Prints figures; asserts nothing (timings belong here, not in the test run).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_support import eps_env

ENTRY = "from eps.shell.cli import entry; entry()"


def eps(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", ENTRY, *argv], env=env, capture_output=True, text=True, check=False)


def states(state: Path, ids: list[str]) -> dict[str, tuple[str, int | None]]:
    db = sqlite3.connect(f"file:{state / 'ledger.sqlite3'}?mode=ro", uri=True, timeout=30)
    try:
        rows = db.execute("SELECT id, state, exit_code FROM dispatches").fetchall()
    finally:
        db.close()
    return {d: (s, c) for d, s, c in rows if d in set(ids)}


def pss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def supervisor(state: Path) -> int:
    return int((state / "supervisor.pid").read_text())


def run(detach_runs: int, n: int, sleep_s: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="eps-supervisor-bench-"))
    state = tmp / "state"
    (tmp / "config.toml").write_text("[jobs]\nsupervisor_idle_s = 5\nwait_poll_s = 1.0\n[fanout]\nconcurrency = 256\n")
    env = eps_env(EPS_STATE_DIR=str(state), EPS_CONFIG=str(tmp / "config.toml"), HOME=str(tmp))

    walls = []
    for _ in range(detach_runs):
        began = time.perf_counter()
        out = eps(env, "execute", "cpu-small", "--duration", "10s", "--detach", "--json", "--", "true")
        walls.append(time.perf_counter() - began)
        assert out.returncode == 0, out.stderr
        json.loads(out.stdout)
    print(f"execute --detach --json: median {statistics.median(walls) * 1000:.0f} ms, "
          f"max {max(walls) * 1000:.0f} ms over {detach_runs} runs")  # fmt: skip

    ids = []
    began = time.perf_counter()
    for i in range(n):
        out = eps(env, "execute", "cpu-small", "--duration", "1m", "--time-limit", "20m", "--detach", "--json", "--",
                  f"sleep {sleep_s}; exit {i % 4}")  # fmt: skip
        assert out.returncode == 0, out.stderr
        ids.append(json.loads(out.stdout)["dispatch"])
    print(f"{n} dispatches handed over in {time.perf_counter() - began:.1f} s")
    while any(s != "started" for s, _ in states(state, ids).values()):
        time.sleep(0.5)
    pid = supervisor(state)
    threads = len(os.listdir(f"/proc/{pid}/task"))
    print(f"{n} supervised at once: supervisor PSS {pss_kb(pid) / 1024:.1f} MB "
          f"(one process, {threads} threads), the jobs' own processes not counted")  # fmt: skip

    os.kill(pid, signal.SIGKILL)
    began = time.perf_counter()
    out = eps(env, "status", "--json")
    assert out.returncode == 0, out.stderr
    print(f"SIGKILL of the supervisor, then one eps status: {time.perf_counter() - began:.2f} s "
          f"(new supervisor {supervisor(state)})")  # fmt: skip
    while True:
        now = states(state, ids)
        if all(s == "ended" for s, _ in now.values()):
            break
        time.sleep(0.5)
    wrong = [d for i, d in enumerate(ids) if now[d] != ("ended", i % 4)]
    print(f"every dispatch ended {time.perf_counter() - began:.1f} s after the kill; "
          f"{len(wrong)} with a wrong state or code")  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--detach-runs", type=int, default=20)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--sleep", type=int, default=150)
    a = ap.parse_args()
    run(a.detach_runs, a.n, a.sleep)
