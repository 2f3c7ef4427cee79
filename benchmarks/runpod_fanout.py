"""Fan-out benchmark: ``eps execute --count N --pin runpod`` against a RunPod server with 100 ms per call.

    python benchmarks/runpod_fanout.py [--n 200] [--latency 0.1] [--concurrency 32] [--poll-interval 0.1]

This measures the code users run: the real ``eps`` command in its own process (the
walker, the ledger, the RunPod lane), against the local RunPod test server
(tests/shell/runpod/fake_server.py) in another process, whose pods' ssh address is the
test sshd (tests/shell/ssh/sshd.sh, root): every copy's job is shipped and launched over
ssh for real.  Printed: wall time until every copy's job runs, the eps process's peak
RSS, the ssh handshakes per machine (the test sshd's ``Accepted publickey`` lines for the
run's key during the run: one per machine when every step shares the machine's master
connection), and the floor the concurrency allows for the API part:
``ceil(N / concurrency) x requests per machine x latency`` (create + the GETs until
RUNNING; poll waits and the ssh launches are on top of the floor).  Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "shell" / "runpod" / "fake_server.py"
sys.path.insert(0, str(ROOT / "tests" / "shell" / "ssh"))
import ssh_support  # noqa: E402  (the test sshd: the pods' ssh address)

from eps.shell.remote.keys import ensure_key  # noqa: E402

KEY = "bench-key-not-a-secret"


def fingerprint(public: Path) -> str:
    """The key's SHA256 fingerprint, as the sshd logs it on each login."""
    out = subprocess.run(["ssh-keygen", "-lf", str(public)], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def stop_supervisor(state: Path) -> None:
    """End the supervisor the run started for its state dir (its pods are never released
    here, so it would not go idle by itself; it would reopen the masters closed below)."""
    import signal

    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if len(argv) >= 4 and argv[2].startswith(b"from eps.shell.supervisor import main") and argv[3] == bytes(state):
            os.kill(int(name), signal.SIGKILL)


def close_masters(state: Path) -> None:
    """End the ssh master connections eps left to the run's machines (they would end by
    themselves after their idle time; the pods are never released here)."""
    try:
        from eps.shell.remote import mux
    except ImportError:  # an eps from before connection sharing
        return
    directory = mux.control_dir(str(state / "ssh"))
    for path in set(mux.masters_under([directory] if directory else []).values()):
        mux.close(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per call on the server")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--poll-interval", type=float, default=0.1)
    parser.add_argument("--gets-to-running", type=int, default=1)
    args = parser.parse_args(argv)

    ssh_support.start_sshd()
    server = subprocess.Popen(
        [sys.executable, str(SERVER), "--latency", str(args.latency), "--api-key", KEY,
         "--gets-to-running", str(args.gets_to_running), "--public-ip", ssh_support.VM_IP,
         "--ssh-port", str(ssh_support.VM_PORT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[1]
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "config.toml"
            config.write_text(
                f'[runpod]\nbase_url = "{url}"\nconcurrency = {args.concurrency}\n'
                f'poll_interval_s = {args.poll_interval}\nwork_root = "{tmp}/runpod-runs"\n'
                f"[fanout]\nconcurrency = {args.concurrency}\n[jobs]\nkeeper = false\n"
            )
            # a key of this run's own (not the tests' shared one), so the sshd's log lines are this run's
            key = ensure_key(str(Path(tmp) / "state")).unwrap()
            ssh_support.authorize(key.public_key)
            mark = fingerprint(Path(key.public_path))
            log_offset = ssh_support.sshd_log_size()
            env = {
                **os.environ,
                "EPS_CONFIG": str(config),
                "EPS_STATE_DIR": str(Path(tmp) / "state"),
                "RUNPOD_API_KEY": KEY,
                "HOME": tmp,
            }
            argv_eps = [
                sys.executable, "-c", "from eps.shell.cli import entry; entry()", "execute", "cpu-small",
                "--duration", "30m", "--pin", "runpod", "--count", str(args.n), "--json", "--", "sleep", "120",
            ]  # fmt: skip
            began = time.perf_counter()
            proc = subprocess.run(argv_eps, env=env, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - began
            rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
            accepted = sum(
                1 for line in ssh_support.sshd_log_since(log_offset).splitlines()
                if "Accepted publickey" in line and mark in line
            )  # fmt: skip
            ssh_support.stop_machine_jobs(Path(tmp))
            stop_supervisor(Path(tmp) / "state")
            close_masters(Path(tmp) / "state")
            ssh_support.revoke(key.public_key)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)

    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    running = sum(1 for e in events if e.get("event") == "started")
    per_machine = 1 + args.gets_to_running
    floor = math.ceil(args.n / args.concurrency) * per_machine * args.latency
    polls = math.ceil(args.n / args.concurrency) * args.gets_to_running * args.poll_interval
    print(f"eps execute --count {args.n} --pin runpod: exit {proc.returncode}, {running}/{args.n} jobs launched")
    print(f"server latency {args.latency * 1000:.0f} ms/call, concurrency {args.concurrency}, "
          f"{per_machine} requests per machine, poll interval {args.poll_interval:g} s")  # fmt: skip
    print(f"wall time (whole command, interpreter start included): {wall:.2f} s")
    print(f"floor ceil(N/c) x requests x latency: {floor:.2f} s; with the poll waits: {floor + polls:.2f} s")
    print(f"ratio to the floor: {wall / floor:.2f}x (to floor + poll waits: {wall / (floor + polls):.2f}x);"
          f" the rest is the ssh launches: {max(0.0, wall - floor - polls) / max(1, running) * args.concurrency:.2f} s"
          f" per launch at {args.concurrency} at once")  # fmt: skip
    print(f"peak RSS of the eps process: {rss_mb:.1f} MB")
    print(f"ssh handshakes: {accepted} for {running} machines ({accepted / max(1, running):.2f} per machine)")
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
