"""Fan-out benchmark: ``eps execute --count N --pin runpod`` against a RunPod server with 100 ms per call
(``--lane gcp``: ``--pin gcp`` against the local Compute server instead).

    python benchmarks/runpod_fanout.py [--n 200] [--latency 0.1] [--concurrency 32] [--poll-interval 0.1]
                                       [--lane runpod|gcp] [--key-exchange NAME] [--machine-rc]

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

Every "machine" is this one, so the machines' side of each bring-up (sshd, the job's
wrapper) runs on the same two cores as eps; in life each runs on its own machine.  The
machines' logins are pod-like by default: a command's bash skips this machine's root
``~/.bashrc`` (which runs ``pyenv init``: about 0.1 CPU-s and 100 processes per session;
a pod's or cloud image's stock ``.bashrc`` returns at once for a shell that is not
interactive).  ``--machine-rc`` keeps it, as the issue's first figures did.  Also printed:
the CPU of this whole machine during the run, per machine brought up, and the processes and
threads started on it meanwhile (the kernel's last pid before and after), per machine.

``--lane gcp``: the local Compute server (tests/shell/gcp/fake_server.py) in this process,
answering at once; every VM's ``natIP`` is the test sshd.  GCP starts the machine's
watcher from its startup script, so the bring-up ships one file fewer.

``--key-exchange curve25519-sha256``: eps's ``[ssh] key_exchange`` setting; by default ssh
negotiates its own choice, on OpenSSH 9.0-9.8 the post-quantum hybrid
``sntrup761x25519-sha512@openssh.com``, whose key generation costs the connecting side about
0.1 CPU-s per machine here (the largest single cost of a fan-out on this machine).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "shell" / "runpod" / "fake_server.py"
sys.path.insert(0, str(ROOT / "tests" / "shell" / "ssh"))
import ssh_support  # noqa: E402  (the test sshd: the pods' ssh address)
from bench_support import close_masters, end_supervisor, eps_env  # noqa: E402

from eps.shell.remote.keys import ensure_key  # noqa: E402

KEY = "bench-key-not-a-secret"


def fingerprint(public: Path) -> str:
    """The key's SHA256 fingerprint, as the sshd logs it on each login."""
    out = subprocess.run(["ssh-keygen", "-lf", str(public)], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


GCP_PROJECT = "bench-project"


def load_gcp_fake() -> ModuleType:
    """The local Compute server module (tests/shell/gcp/fake_server.py), loaded by path."""
    path = ROOT / "tests" / "shell" / "gcp" / "fake_server.py"
    spec = importlib.util.spec_from_file_location("gcp_fake_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def machine_cpu_s() -> float:
    """CPU seconds this whole machine has spent (user, nice, system, irq, softirq: /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = fh.readline().split()[1:8]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields)
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def last_pid() -> int:
    """The last process id the kernel handed out (/proc/loadavg): the processes started during a
    run are the difference (pids are handed out in order; the run is far from wrapping them)."""
    with open("/proc/loadavg") as fh:
        return int(fh.read().split()[4])


class Run(NamedTuple):
    """What one ``eps execute --count N`` left."""

    proc: subprocess.CompletedProcess[str]
    wall: float
    machine_cpu: float
    rss_mb: float
    accepted: int
    eps_cpu: float  # the eps process and the ssh processes it waited for
    here_cpu: float  # this process: the local Compute server (--lane gcp) runs in it
    processes: int  # started on this machine during the run: eps's side and the machines' side


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per call on the server")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--poll-interval", type=float, default=0.1)
    parser.add_argument("--gets-to-running", type=int, default=1)
    parser.add_argument("--lane", choices=("runpod", "gcp"), default="runpod")
    parser.add_argument("--key-exchange", default="", metavar="NAME",
                        help="[ssh] key_exchange = [NAME] (default: ssh's own)")  # fmt: skip
    parser.add_argument("--machine-rc", action="store_true",
                        help="the machines' logins run this machine's ~/.bashrc (pyenv init)")  # fmt: skip
    return parser.parse_args(argv)


@contextlib.contextmanager
def provider(args: argparse.Namespace, tmp: str) -> Iterator[str]:
    """The provider's local server for the run; yields the config's provider section."""
    if args.lane == "gcp":
        gcp = load_gcp_fake().FakeCompute(GCP_PROJECT, nat_ip=ssh_support.VM_IP).start()
        try:
            yield (f'[gcp]\nproject = "{GCP_PROJECT}"\nendpoint = "{gcp.endpoint}"\nzones = ["us-central1-a"]\n'
                   f'ssh_user = "{ssh_support.USER}"\nwork_root = "{tmp}/gcp-runs"\n')  # fmt: skip
        finally:
            gcp.stop()
        return
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
        yield (f'[runpod]\nbase_url = "{url}"\nconcurrency = {args.concurrency}\n'
               f'poll_interval_s = {args.poll_interval}\nwork_root = "{tmp}/runpod-runs"\n')  # fmt: skip
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)


def fan_out(args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory() as tmp, provider(args, tmp) as section:
        config = Path(tmp) / "config.toml"
        kex = f'[ssh]\nkey_exchange = ["{args.key_exchange}"]\n' if args.key_exchange else ""
        config.write_text(section + kex + f"[fanout]\nconcurrency = {args.concurrency}\n[jobs]\nkeeper = false\n")
        # a key of this run's own (not the tests' shared one), so the sshd's log lines are this run's
        key = ensure_key(str(Path(tmp) / "state")).unwrap()
        ssh_support.authorize(key.public_key, plain_login=not args.machine_rc)
        mark = fingerprint(Path(key.public_path))
        log_offset = ssh_support.sshd_log_size()
        env = eps_env(EPS_CONFIG=str(config), EPS_STATE_DIR=str(Path(tmp) / "state"), RUNPOD_API_KEY=KEY, HOME=tmp)
        argv_eps = [
            sys.executable, "-c", "from eps.shell.cli import entry; entry()", "execute", "cpu-small",
            "--duration", "30m", "--pin", args.lane, "--count", str(args.n), "--json", "--", "sleep", "120",
        ]  # fmt: skip
        cpu0, here0, pid0 = machine_cpu_s(), time.process_time(), last_pid()
        began = time.perf_counter()
        proc = subprocess.run(argv_eps, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - began
        machine_cpu, here, processes = machine_cpu_s() - cpu0, time.process_time() - here0, last_pid() - pid0
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        rss_mb = kids.ru_maxrss / 1024  # KiB on Linux
        accepted = sum(
            1 for line in ssh_support.sshd_log_since(log_offset).splitlines()
            if "Accepted publickey" in line and mark in line
        )  # fmt: skip
        ssh_support.stop_machine_jobs(Path(tmp))
        end_supervisor(Path(tmp) / "state")
        close_masters(Path(tmp) / "state")
        ssh_support.revoke(key.public_key)
    return Run(proc, wall, machine_cpu, rss_mb, accepted, kids.ru_utime + kids.ru_stime, here, processes)


def report(args: argparse.Namespace, run: Run) -> None:
    events = [json.loads(line) for line in run.proc.stdout.splitlines() if line.startswith("{")]
    running = sum(1 for e in events if e.get("event") == "started")
    gcp_lane = args.lane == "gcp"
    per_machine = 1 + args.gets_to_running
    latency = 0.0 if gcp_lane else args.latency
    rounds = math.ceil(args.n / args.concurrency)
    floor = rounds * per_machine * latency
    polls = 0.0 if gcp_lane else rounds * args.gets_to_running * args.poll_interval
    login = "this machine's ~/.bashrc" if args.machine_rc else "pod-like (no ~/.bashrc for commands)"
    print(f"eps execute --count {args.n} --pin {args.lane}: exit {run.proc.returncode}, "
          f"{running}/{args.n} jobs launched; machines' login: {login}; "
          f"key exchange: {args.key_exchange or 'ssh default'}")  # fmt: skip
    if gcp_lane:
        print(f"local Compute server answering at once, concurrency {args.concurrency}")
    else:
        print(f"server latency {args.latency * 1000:.0f} ms/call, concurrency {args.concurrency}, "
              f"{per_machine} requests per machine, poll interval {args.poll_interval:g} s")  # fmt: skip
    print(f"wall time (whole command, interpreter start included): {run.wall:.2f} s")
    print(f"floor ceil(N/c) x requests x latency: {floor:.2f} s; with the poll waits: {floor + polls:.2f} s")
    rest = max(0.0, run.wall - floor - polls) / max(1, running) * args.concurrency
    print(f"the rest is the ssh launches: {rest:.2f} s per launch at {args.concurrency} at once")
    print(f"peak RSS of the eps process: {run.rss_mb:.1f} MB")
    print(f"CPU of this machine during the run (eps, its ssh, the machines' side, the servers): "
          f"{run.machine_cpu:.1f} s = {run.machine_cpu / max(1, running) * 1000:.0f} ms per machine")  # fmt: skip
    print(f"CPU of eps and the ssh processes it waited for (the masters, in the background, not counted): "
          f"{run.eps_cpu:.1f} s = {run.eps_cpu / max(1, running) * 1000:.0f} ms per machine")  # fmt: skip
    if gcp_lane:
        print(f"CPU of the local Compute server (in this process): {run.here_cpu:.1f} s")
    print(f"processes and threads started during the run (eps and its ssh, the servers, the machines): {run.processes}"
          f" = {run.processes / max(1, running):.1f} per machine")  # fmt: skip
    print(f"ssh handshakes: {run.accepted} for {running} machines ({run.accepted / max(1, running):.2f} per machine)")
    if run.proc.returncode != 0:
        print(run.proc.stderr[-2000:])


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    ssh_support.start_sshd()
    report(args, fan_out(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
