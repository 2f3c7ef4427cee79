"""Scale: ``eps status`` on a ledger of 100,000 dispatches, and ``eps cancel --all`` of 1,000 pods.

    python benchmarks/scale.py [--rows 100000] [--pods 1000] [--latency 0.1] [--runs 9]

Each figure is the wall time of a real ``eps`` process (interpreter start included):

- status: the ledger holds ``--rows`` finished dispatches, and one job runs now (on the VM
  lane, its supervisor following it); the default view (active ones plus the newest 20) is
  printed, after a reconcile that settles only what is active or owns something live.
  Goal: under 150 ms here.
- cancel: ``--pods`` RunPod CPU pods started by ``eps execute --count`` against the local
  RunPod server (each job launched over ssh on the test sshd), then the server's latency is raised
  to ``--latency`` per call and
  ``eps cancel --all`` releases every one: one listing, then parallel terminations.
  Goal: under 60 s for 1,000 pods at 100 ms.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-key-not-a-secret"
from bench_support import close_masters, end_supervisor, eps_env  # noqa: E402

ENTRY = "from eps.shell.cli import entry; entry()"


def _fake_runpod() -> object:
    spec = importlib.util.spec_from_file_location("runpod_fake", ROOT / "tests" / "shell" / "runpod" / "fake_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["runpod_fake"] = module
    spec.loader.exec_module(module)
    return module


def eps(env: dict[str, str], *argv: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", ENTRY, *argv], env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - began, proc


def status_figure(rows: int, tmp: Path, url: str | None = None, *, attempts: bool = False, runs: int = 9) -> None:
    """The status figure on the SQLite ledger, or (``url``) on a PostgreSQL one (benchmarks/state_pg.py);
    ``attempts``: each finished dispatch with the one attempt that ran it, as a real ledger's has;
    ``runs``: how many ``eps status`` processes the medians are of."""
    from eps.shell.state.ledger import Ledger

    state = tmp / ("status-state" if url is None else "status-state-pg")
    Ledger(str(state), url=url).close()  # the schema, at the current version
    job = json.dumps({"intent": "cpu-small", "duration_s": 60, "restartable": False, "footprint_gb": 0.0,
                      "gradient_fit": False, "count": 1, "pin": None, "command": ["true"]})  # fmt: skip
    now = time.time()
    made = ((f"e{i:010x}", job, now - rows + i, now - rows + i) for i in range(rows))
    ran = ((f"e{i:010x}", "vm/local", "vm", "vm", "on-demand", f"eps-e{i:010x}-1", "ended", "started",
            now - rows + i, now - rows + i) for i in range(rows if attempts else 0))  # fmt: skip
    attempt_columns = "dispatch, seq, rung, lane, kind, provisioning, name, state, outcome, started_at, updated_at"
    if url is None:
        with sqlite3.connect(state / "ledger.sqlite3") as db:
            db.executemany(
                "INSERT INTO dispatches (id, parent, intent, job, state, message, created_at, updated_at)"
                " VALUES (?, NULL, 'cpu-small', ?, 'ended', 'exit code 0', ?, ?)",
                made,
            )
            db.executemany(f"INSERT INTO attempts ({attempt_columns}) VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ran)  # noqa: S608 (fixed columns)
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            with pg.cursor().copy("COPY dispatches (id, intent, job, state, message, created_at, updated_at)"
                                  " FROM STDIN") as copy:  # fmt: skip
                for i, text, created, updated in made:
                    copy.write_row((i, "cpu-small", text, "ended", "exit code 0", created, updated))
            with pg.cursor().copy(f"COPY attempts ({attempt_columns}) FROM STDIN") as copy:
                for d, *attempt in ran:
                    copy.write_row((d, 1, *attempt))
            pg.execute("ANALYZE dispatches")
            pg.execute("ANALYZE attempts")
    env = eps_env(EPS_STATE_DIR=str(state), HOME=str(tmp), **({"EPS_STATE_URL": url} if url else {}))
    # one job running now, on the VM lane, owned by its supervisor: status while a job runs
    _, proc = eps(env, "execute", "debug", "--duration", "5m", "--detach", "--json", "--", "sleep", "120")
    assert proc.returncode == 0, proc.stderr
    running = json.loads(proc.stdout)["dispatch"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _, proc = eps(env, "status", running, "--json")
        if json.loads(proc.stdout)["dispatches"][0]["state"] == "started":
            break
        time.sleep(0.5)
    times, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, proc = eps(env, "status", "--json")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert proc.returncode == 0, proc.stderr
        times.append(wall)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    eps(env, "cancel", running)
    end_supervisor(state)
    shown = len(json.loads(proc.stdout)["dispatches"])
    size = (state / "ledger.sqlite3").stat().st_size / 2**20 if url is None else 0
    where = f"{size:.0f} MB ledger" if url is None else "PostgreSQL on loopback"
    each = ", ".join(f"{t * 1000:.0f}" for t in times)
    where += ", an attempt each" if attempts else ""
    print(f"eps status --json, {rows} dispatches ({where}): median {statistics.median(times) * 1000:.0f} ms"
          f" over {runs} runs ({each} ms), {shown} shown (interpreter start included);"
          f" CPU median {statistics.median(cpu) * 1000:.0f} ms")  # fmt: skip
    began = time.perf_counter()
    _, proc = eps(env, "status", "--all", "--json")
    print(f"eps status --all --json: {time.perf_counter() - began:.2f} s, {len(proc.stdout) / 2**20:.1f} MB printed")


def cancel_figure(pods: int, latency: float, tmp: Path) -> None:
    """Each pod's job is launched over ssh on the test sshd, as a pod's is (with a classical
    key exchange, ``[ssh] key_exchange``, to make the setup quick: the figure is the cancel)."""
    sys.path.insert(0, str(ROOT / "tests" / "shell" / "ssh"))
    import ssh_support

    from eps.shell.remote.keys import ensure_key

    ssh_support.start_sshd()
    fake_module = _fake_runpod()
    fake = fake_module.FakeRunpod(api_key=KEY, gets_to_running=1)  # type: ignore[attr-defined]
    fake.public_ip, fake.ssh_port = ssh_support.VM_IP, ssh_support.VM_PORT
    fake.start()
    state = tmp / "cancel-state"
    key = ensure_key(str(state)).unwrap()
    ssh_support.authorize(key.public_key, plain_login=True)
    try:
        config = tmp / "cancel.toml"
        config.write_text(f'[runpod]\nbase_url = "{fake.url}"\npoll_interval_s = 0.05\nconcurrency = 64\n'
                          f'work_root = "{tmp}/runpod-runs"\n[fanout]\nconcurrency = 64\n'
                          '[ssh]\nkey_exchange = ["curve25519-sha256"]\n')  # fmt: skip
        env = eps_env(EPS_STATE_DIR=str(state), EPS_CONFIG=str(config), RUNPOD_API_KEY=KEY, HOME=str(tmp))
        wall, proc = eps(env, "execute", "cpu-small", "--pin", "runpod", "--duration", "30m",
                         "--count", str(pods), "--json", "--", "sleep", "600")  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        print(f"eps execute --count {pods} --pin runpod (no latency): {wall:.1f} s, {len(fake.live_pods())} pods live")
        fake.latency_s = latency
        wall, proc = eps(env, "cancel", "--all")
        print(f"eps cancel --all at {latency * 1000:.0f} ms per call: {wall:.1f} s, exit {proc.returncode},"
              f" {len(fake.live_pods())} pods left, {fake.count('GET', '/v2/pods')} listings")  # fmt: skip
    finally:
        fake.stop()
        ssh_support.stop_machine_jobs(tmp)
        ssh_support.revoke(key.public_key)
        end_supervisor(state)
        close_masters(state)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=9, help="eps status processes per median")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        status_figure(args.rows, Path(tmp), runs=args.runs)
        if args.pods > 0:  # --pods 0: the status figure only
            cancel_figure(args.pods, args.latency, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
